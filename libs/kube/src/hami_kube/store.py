"""A local object cache keyed by ``namespace/name`` with pluggable secondary indexes.

Pure data structure: the reflector fills it, services read it. Objects are the decoded JSON dicts
as received; readers must treat them as read-only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_kube.objects import ObjectView, object_key
from hami_kube.resources import JsonObject

Indexer = Callable[[Mapping[str, Any]], Iterable[str]]
"""Maps an object to the index values it is filed under (none, one or several)."""


def index_by_node_name(obj: Mapping[str, Any]) -> Iterable[str]:
    """Pods by ``spec.nodeName`` (unscheduled pods are not indexed)."""
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, Mapping) else None
    return (node,) if isinstance(node, str) and node else ()


def index_by_namespace(obj: Mapping[str, Any]) -> Iterable[str]:
    meta = obj.get("metadata")
    namespace = meta.get("namespace") if isinstance(meta, Mapping) else None
    return (namespace,) if isinstance(namespace, str) and namespace else ()


@dataclass(frozen=True, slots=True)
class StoreDelta:
    """What a ``replace`` changed: added objects, ``(old, new)`` updates, deleted objects."""

    added: list[JsonObject] = field(default_factory=list)
    updated: list[tuple[JsonObject, JsonObject]] = field(default_factory=list)
    deleted: list[JsonObject] = field(default_factory=list)


class Store:
    """Objects by key plus, per index name, ``value -> keys``."""

    def __init__(self, *, indexers: Mapping[str, Indexer] | None = None) -> None:
        self._items: dict[str, JsonObject] = {}
        self._indexers: dict[str, Indexer] = dict(indexers or {})
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        self._filed: dict[str, dict[str, frozenset[str]]] = {}

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._items))

    def get(self, key: str) -> JsonObject | None:
        return self._items.get(key)

    def keys(self) -> list[str]:
        return list(self._items)

    def objects(self) -> list[JsonObject]:
        return list(self._items.values())

    def snapshot(self) -> dict[str, JsonObject]:
        """A shallow copy of ``key -> object``."""
        return dict(self._items)

    @property
    def index_names(self) -> tuple[str, ...]:
        return tuple(self._indexers)

    def index_values(self, index: str) -> list[str]:
        """Every value currently present in ``index``."""
        return list(self._index(index))

    def keys_by_index(self, index: str, value: str) -> set[str]:
        return set(self._index(index).get(value, ()))

    def by_index(self, index: str, value: str) -> list[JsonObject]:
        """Objects filed under ``value`` in ``index`` (e.g. pods on one node)."""
        keys = self._index(index).get(value, ())
        return [self._items[key] for key in keys]

    def _index(self, index: str) -> dict[str, set[str]]:
        try:
            return self._indexes[index]
        except KeyError:
            raise KeyError(f"no index named {index!r}") from None

    # -- writing (the reflector) -------------------------------------------------------------
    def upsert(self, obj: JsonObject) -> JsonObject | None:
        """Insert or replace ``obj``; returns the previous object under its key, if any."""
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key)
        self._items[key] = obj
        self._file(key, obj)
        return old

    def remove(self, key: str) -> JsonObject | None:
        """Drop the object under ``key``; returns it, or None when absent."""
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key)
        return old

    def replace(self, objects: Iterable[JsonObject]) -> StoreDelta:
        """Make the store hold exactly ``objects`` and report the difference.

        An object whose resourceVersion is unchanged counts as neither added nor updated.
        """
        delta = StoreDelta()
        fresh: dict[str, JsonObject] = {}
        for obj in objects:
            fresh[object_key(obj)] = obj
        for key in [key for key in self._items if key not in fresh]:
            old = self.remove(key)
            if old is not None:
                delta.deleted.append(old)
        for obj in fresh.values():
            old = self.upsert(obj)
            if old is None:
                delta.added.append(obj)
            elif (version := ObjectView(obj).resource_version) != ObjectView(
                old
            ).resource_version or not version:
                delta.updated.append((old, obj))
        return delta

    def _file(self, key: str, obj: JsonObject) -> None:
        filed: dict[str, frozenset[str]] = {}
        for name, indexer in self._indexers.items():
            values = frozenset(indexer(obj))
            filed[name] = values
            index = self._indexes[name]
            for value in values:
                index.setdefault(value, set()).add(key)
        self._filed[key] = filed

    def _unindex(self, key: str) -> None:
        # Uses the values recorded at filing time, so a reader mutating a cached object cannot
        # leave a stale index entry behind.
        for name, values in self._filed.pop(key, {}).items():
            index = self._indexes[name]
            for value in values:
                keys = index.get(value)
                if keys is None:
                    continue
                keys.discard(key)
                if not keys:
                    del index[value]


__all__ = [
    "Indexer",
    "Store",
    "StoreDelta",
    "index_by_namespace",
    "index_by_node_name",
]
