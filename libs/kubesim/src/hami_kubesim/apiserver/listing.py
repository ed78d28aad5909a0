"""LIST: selection, ordering by namespace/name like etcd keys, paging with ``limit``/``continue``,
and the secondary index (pods by ``spec.nodeName``) that keeps per-node lists cheap."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from hami_kubesim.apiserver.errors import BadRequestError
from hami_kubesim.apiserver.history import Entry
from hami_kubesim.apiserver.selectors import FieldSelector, field_value
from hami_kubesim.objects.resources import ResourceType
from hami_protocol.selectors import EVERYTHING, LabelSelector


@dataclass(frozen=True, slots=True)
class ListPage:
    """One LIST answer: matching entries in key order, the list's resourceVersion, and the
    token for the next page (empty when this is the last)."""

    entries: list[Entry]
    rv: int
    continue_token: str = ""
    remaining: int | None = None


def encode_continue(rv: int, after: tuple[str, str]) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": f"{after[0]}/{after[1]}\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_continue(token: str) -> tuple[int, tuple[str, str]]:
    try:
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        start = str(data["start"]).rstrip("\x00")
        namespace, _, name = start.partition("/")
        return int(data["rv"]), (namespace, name)
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequestError(f"invalid continue token: {exc}") from exc


class Buckets(Protocol):
    """What a listing reads of the store that owns it: the current resourceVersion and each
    resource type's objects, by namespace (``""`` for cluster-scoped) and name."""

    @property
    def rv(self) -> int: ...

    def buckets(self, rt: ResourceType) -> dict[str, dict[str, Entry]]: ...


class Listing:
    """Sorted-key caches and field indexes over a store's buckets."""

    def __init__(self, store: Buckets) -> None:
        self._store = store
        self._sorted_ns: dict[str, list[str]] = {}
        self._sorted_names: dict[tuple[str, str], list[str]] = {}
        self._index: dict[str, dict[str, set[tuple[str, str]]]] = {}

    def invalidate(self, rt: ResourceType, bucket: str) -> None:
        self._sorted_ns.pop(rt.key, None)
        self._sorted_names.pop((rt.key, bucket), None)

    def reindex(self, rt: ResourceType, old: Entry | None, new: Entry | None) -> None:
        field = rt.index_field
        if field is None:
            return
        index = self._index.setdefault(rt.key, {})
        old_value = field_value(old.obj, field) if old is not None else None
        new_value = field_value(new.obj, field) if new is not None else None
        if old_value == new_value and old is not None and new is not None:
            return
        if old is not None and old_value is not None:
            meta = old.obj["metadata"]
            keys = index.get(old_value)
            if keys is not None:
                keys.discard((meta.get("namespace") or "", meta["name"]))
                if not keys:
                    del index[old_value]
        if new is not None and new_value is not None:
            meta = new.obj["metadata"]
            index.setdefault(new_value, set()).add((meta.get("namespace") or "", meta["name"]))

    def _names(self, rt: ResourceType, bucket: str) -> list[str]:
        cached = self._sorted_names.get((rt.key, bucket))
        if cached is None:
            cached = sorted(self._store.buckets(rt).get(bucket, {}))
            self._sorted_names[(rt.key, bucket)] = cached
        return cached

    def _keys(self, rt: ResourceType, namespace: str | None) -> Iterator[tuple[str, str]]:
        buckets = self._store.buckets(rt)
        if namespace is not None or not rt.namespaced:
            bucket = (namespace or "") if rt.namespaced else ""
            for name in self._names(rt, bucket):
                yield bucket, name
            return
        spaces = self._sorted_ns.get(rt.key)
        if spaces is None:
            spaces = self._sorted_ns[rt.key] = sorted(buckets)
        for space in spaces:
            for name in self._names(rt, space):
                yield space, name

    def list(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        limit: int = 0,
        continue_token: str = "",
    ) -> ListPage:
        """Matching objects in (namespace, name) order.  Later pages are read from the current
        state and report the first page's resourceVersion."""
        labels = labels or EVERYTHING
        fields = fields or FieldSelector()
        rv = self._store.rv
        after: tuple[str, str] | None = None
        if continue_token:
            rv, after = decode_continue(continue_token)
        pinned = fields.exact(rt.index_field) if rt.index_field else None
        keys: Iterator[tuple[str, str]]
        if pinned is not None:
            found = self._index.get(rt.key, {}).get(pinned, set())
            keys = iter(sorted(k for k in found if namespace is None or k[0] == namespace))
        else:
            keys = self._keys(rt, namespace)
        buckets = self._store.buckets(rt)
        out: list[Entry] = []
        more = False
        last: tuple[str, str] | None = None
        for key in keys:
            if after is not None and key <= after:
                continue
            entry = buckets.get(key[0], {}).get(key[1])
            if entry is None:
                continue
            obj = entry.obj
            if not labels.is_everything and not labels.matches(obj["metadata"].get("labels") or {}):
                continue
            if not fields.empty and not fields.matches(obj):
                continue
            if limit and len(out) >= limit:
                more = True
                break
            out.append(entry)
            last = key
        if not more or last is None:
            return ListPage(out, rv)
        remaining = None
        if labels.is_everything and fields.empty:
            remaining = sum(1 for k in self._keys(rt, namespace) if k > last)
        return ListPage(out, rv, encode_continue(rv, last), remaining)
