"""Versioned storage under the API server: what etcd and the watch cache are to kube-apiserver.

Holds every object by resource type, namespace and name, the one global resourceVersion, each
type's change history (watch starting points, compaction) and the fan-out of every committed
change to watchers, list indexes and observers.  :class:`.store.Store` builds the API's write
verbs (validation, preconditions, admission, graceful deletion) on top, as the generic registry
store does on ``k8s.io/apiserver``'s storage; this part knows nothing of what the objects mean.

Plain synchronous code: each call is one atomic step on the event loop, so a write, its
resourceVersion and the fan-out of its watch event happen together.  Stored dicts are never
mutated once stored; callers must not mutate what they get back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from hami_kubesim.apiserver.errors import NotFoundError
from hami_kubesim.apiserver.history import DELETED, Change, Entry, History
from hami_kubesim.apiserver.listing import Listing, ListPage
from hami_kubesim.apiserver.watch import WatchHub
from hami_kubesim.objects.resources import Registry, ResourceType


class Storage:
    """All objects of all resource types, their change history and their watchers."""

    def __init__(self, *, registry: Registry | None = None, history: int = 10_000) -> None:
        self.registry = registry or Registry()
        self.rv = 0
        self._history_size = history
        self._objects: dict[str, dict[str, dict[str, Entry]]] = {}
        self._history: dict[str, History] = {}
        self.hubs: dict[str, WatchHub] = {}
        self.listing = Listing(self)
        self._dry = False
        self.observers: list[Callable[[ResourceType, Change], None]] = []
        """Called synchronously with every committed change (see ``ApiServer.observe``)."""
        for rt in self.registry.types:
            self._objects[rt.key] = {}
            self._history[rt.key] = History(history)
            self.hubs[rt.key] = WatchHub(rt)

    @contextmanager
    def dry_run(self, enabled: bool = True) -> Iterator[None]:
        """Within the block, writes are checked and answered but not stored (``dryRun=All``).
        The block must not await: the flag belongs to the single step it wraps."""
        previous, self._dry = self._dry, enabled
        try:
            yield
        finally:
            self._dry = previous

    # ----- reads -------------------------------------------------------------------------
    def buckets(self, rt: ResourceType) -> dict[str, dict[str, Entry]]:
        return self._objects[rt.key]

    def history(self, rt: ResourceType) -> History:
        return self._history[rt.key]

    def entry(self, rt: ResourceType, namespace: str | None, name: str) -> Entry:
        found = self._objects[rt.key].get(namespace or "", {}).get(name)
        if found is None:
            raise NotFoundError(rt.plural, rt.group, name)
        return found

    def find(self, rt: ResourceType, namespace: str | None, name: str) -> Entry | None:
        return self._objects[rt.key].get(namespace or "", {}).get(name)

    def count(self, rt: ResourceType) -> int:
        return sum(len(b) for b in self._objects[rt.key].values())

    def select(self, rt: ResourceType, **kwargs: Any) -> ListPage:
        """See :meth:`Listing.list`."""
        return self.listing.list(rt, **kwargs)

    # ----- commits -----------------------------------------------------------------------
    def _commit(
        self, rt: ResourceType, kind: str, obj: dict[str, Any], prev: Entry | None
    ) -> Entry:
        meta = obj["metadata"]
        if prev is not None and meta is prev.obj["metadata"]:
            meta = obj["metadata"] = dict(meta)
        if self._dry:
            if prev is None:
                meta.pop("resourceVersion", None)
            else:
                meta["resourceVersion"] = prev.obj["metadata"]["resourceVersion"]
            return Entry(obj, self.rv)
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        entry = Entry(obj, self.rv)
        bucket_key = meta.get("namespace") or ""
        buckets = self._objects[rt.key]
        bucket = buckets.get(bucket_key)
        if bucket is None:
            bucket = buckets[bucket_key] = {}
        if prev is None:
            self.listing.invalidate(rt, bucket_key)
        bucket[meta["name"]] = entry
        self.listing.reindex(rt, prev, entry)
        self._publish(rt, Change(kind, entry, prev))
        return entry

    def _remove(self, rt: ResourceType, old: Entry, last: dict[str, Any] | None = None) -> Entry:
        """Delete ``old``; the DELETED event carries ``last`` (default: ``old``'s state)."""
        if self._dry:
            return old
        self.rv += 1
        meta = old.obj["metadata"]
        state = last if last is not None else old.obj
        final = Entry(
            {**state, "metadata": {**state["metadata"], "resourceVersion": str(self.rv)}}, self.rv
        )
        bucket_key = meta.get("namespace") or ""
        bucket = self._objects[rt.key].get(bucket_key, {})
        bucket.pop(meta["name"], None)
        if not bucket:
            self._objects[rt.key].pop(bucket_key, None)
        self.listing.invalidate(rt, bucket_key)
        self.listing.reindex(rt, old, None)
        self._publish(rt, Change(DELETED, final, None))
        return final

    def _publish(self, rt: ResourceType, change: Change) -> None:
        self._history[rt.key].append(change)
        self.hubs[rt.key].dispatch(change)
        for observer in list(self.observers):
            observer(rt, change)

    # ----- history control ---------------------------------------------------------------
    def compact(self, rv: int | None = None) -> int:
        """Forget history up to ``rv`` (default: now); older watch starting points get 410."""
        target = self.rv if rv is None else rv
        for hist in self._history.values():
            hist.compact(target)
        return target

    def set_history_size(self, size: int) -> None:
        self._history_size = size
        for hist in self._history.values():
            hist.resize(size)

    @property
    def history_size(self) -> int:
        return self._history_size
