"""The in-memory API server: the store plus admission, watches and fault injection.

The HTTP face (:mod:`.http`) and tests both drive this object.  Its in-process methods copy
objects in and out (callers may keep and mutate what they pass or get); reads are synchronous,
writes are coroutines because pod creation runs the admission chain.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_kubesim.apiserver.errors import (
    BadRequestError,
    ForbiddenError,
    StatusError,
    reason_for,
)
from hami_kubesim.apiserver.faults import ErrorRule, Faults, LatencyRule
from hami_kubesim.apiserver.history import ADDED, BOOKMARK, Change, Entry, clone
from hami_kubesim.apiserver.hooks import AdmissionDenied, KubeletControl, MutatingAdmission
from hami_kubesim.apiserver.metrics import RequestCounter
from hami_kubesim.apiserver.selectors import (
    FieldSelector,
    label_selector_from_query,
    parse_field_selector,
)
from hami_kubesim.apiserver.store import Store
from hami_kubesim.apiserver.watch import Watcher
from hami_kubesim.objects.patching import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from hami_kubesim.objects.priorityclasses import admit_pod_priority
from hami_kubesim.objects.resources import PODS, PRIORITY_CLASSES, ResourceType
from hami_protocol.selectors import EVERYTHING, LabelSelector

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
PATCH_TYPES = {"merge": MERGE_PATCH, "strategic": STRATEGIC_PATCH, "json": JSON_PATCH}


@dataclass(frozen=True, slots=True)
class LocalWatchEvent:
    """One event of an in-process watch; ``object`` carries ``kind`` and ``apiVersion``."""

    type: str
    object: dict[str, Any]


class LocalWatch:
    """An in-process watch: ``async for event in watch`` (an ERROR event ends it); close with
    :meth:`aclose` or ``async with``."""

    def __init__(self, server: ApiServer, watcher: Watcher) -> None:
        self._server = server
        self._watcher = watcher
        self._buffer: list[tuple[str, Entry]] = []
        self._done = False

    def __aiter__(self) -> LocalWatch:
        return self

    async def __anext__(self) -> LocalWatchEvent:
        watcher = self._watcher
        while not self._buffer:
            if self._done:
                raise StopAsyncIteration
            self._buffer = watcher.drain()
            if self._buffer:
                break
            if watcher.closed:
                self._done = True
                await self.aclose()
                if watcher.error is not None:
                    return LocalWatchEvent("ERROR", watcher.error.status())
                raise StopAsyncIteration
            await watcher.wait(None)
        kind, entry = self._buffer.pop(0)
        return LocalWatchEvent(kind, json.loads(entry.wire_json(watcher.rt.wire_prefix)))

    async def aclose(self) -> None:
        self._server.close_watch(self._watcher)

    async def __aenter__(self) -> LocalWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def admit_priority(store: Store, pod: dict[str, Any]) -> None:
    """The Priority admission plugin on a pod CREATE (``spec.priority`` and
    ``spec.preemptionPolicy`` from the pod's PriorityClass, or the global default), or the 403
    it answers.  In place: the request owns ``pod``."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return  # validation refuses it later
    classes = {e.obj["metadata"]["name"]: e.obj for e in store.select(PRIORITY_CLASSES).entries}
    why = admit_pod_priority(spec, classes)
    if why is not None:
        meta = pod.get("metadata") or {}
        name = meta.get("name") or meta.get("generateName") or "Unknown"
        raise ForbiddenError(PODS.plural, PODS.group, str(name), why)


class ApiServer:
    """Objects, watches, admission seam and fault plan of one emulated cluster."""

    def __init__(
        self,
        *,
        history: int = 10_000,
        watch_queue_limit: int = 10_000,
        bookmark_interval: float = 60.0,
        admission: MutatingAdmission | None = None,
        seed: int = 0,
    ) -> None:
        self.store = Store(history=history, seed=seed)
        self.registry = self.store.registry
        self.faults = Faults(seed)
        self.admission = admission
        self.watch_queue_limit = watch_queue_limit
        self.bookmark_interval = bookmark_interval
        self.requests = RequestCounter()
        """Requests answered over HTTP (``/metrics``; ``requests.counts()`` in-process)."""
        self.kubelets: dict[str, KubeletControl] = {}
        """The kubelet stand-ins ``/_sim/kubelets`` drives, by node (set by the cluster).  With
        :meth:`delete_pods_gracefully`, pods on these nodes are deleted gracefully: their
        kubelet finishes the deletion."""
        self._watchers: set[Watcher] = set()
        self._held_watches: set[tuple[str, str]] = set()
        """``(resource key, client)`` whose watches :meth:`hold_watches` holds."""

    # ----- lookups -----------------------------------------------------------------------
    def resource(self, resource: str | ResourceType) -> ResourceType:
        """A resource type by plural (``pods``), short name, kind-ish singular or
        ``plural.group`` (``leases.coordination.k8s.io``)."""
        if isinstance(resource, ResourceType):
            return resource
        try:
            return self.registry.resolve(resource)
        except KeyError:
            raise BadRequestError(f"unknown resource {resource!r}") from None

    @property
    def resource_version(self) -> int:
        return self.store.rv

    def wire(self, rt: ResourceType, entry: Entry) -> dict[str, Any]:
        """A private copy of a stored object, with ``kind`` and ``apiVersion``."""
        out: dict[str, Any] = {"apiVersion": rt.api_version, "kind": rt.kind}
        out.update(clone(entry.obj))
        return out

    # ----- request-level operations (shared with the HTTP layer; no copies) ---------------
    async def create_entry(
        self, rt: ResourceType, body: Any, namespace: str | None, *, dry_run: bool = False
    ) -> Entry:
        """CREATE with the admission chain (pods) between defaulting and storage: the built-in
        plugins first (:func:`admit_priority`), then the mutating webhooks, as kube-apiserver
        orders them (Priority is in its default plugin list, webhooks come last)."""
        obj = self.store.prepare_create(rt, body, namespace)
        if rt is PODS:
            self.store.check_namespace(namespace or "")  # NamespaceLifecycle comes first
            admit_priority(self.store, obj)
        if rt is PODS and self.admission is not None:
            try:
                obj = await self.admission(
                    "CREATE",
                    "pods",
                    {"apiVersion": rt.api_version, "kind": rt.kind, **obj},
                    namespace,
                    dry_run=dry_run,
                )
            except AdmissionDenied as denied:
                raise StatusError(
                    denied.code, denied.message, reason=denied.reason or reason_for(denied.code)
                ) from denied
        with self.store.dry_run(dry_run):
            return self.store.create(rt, obj, namespace=namespace)

    def open_watch(
        self,
        rt: ResourceType,
        *,
        namespace: str | None = None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        resource_version: str | None = None,
        send_initial_events: bool | None = None,
        allow_bookmarks: bool = False,
        client: str = "",
    ) -> Watcher:
        """Start a watch as the API server does: no resourceVersion (or ``"0"``) first replays
        the current state as ADDED; a specific one replays only later changes, or ends at once
        with 410 Expired when those changes are no longer held."""
        watcher = Watcher(
            rt,
            namespace=namespace,
            labels=labels or EVERYTHING,
            fields=fields or FieldSelector(),
            limit=self.watch_queue_limit,
            client=client,
        )
        if (rt.key, client) in self._held_watches:
            watcher.hold()
        rv_text = resource_version or ""
        if rv_text not in ("", "0") and not rv_text.isdigit():
            raise BadRequestError(f'resourceVersion: Invalid value: "{rv_text}": must be a number')
        initial = send_initial_events is True or (
            send_initial_events is None and rv_text in ("", "0")
        )
        if initial:
            page = self.store.select(
                rt, namespace=namespace, labels=watcher.labels, fields=watcher.fields
            )
            events = [(ADDED, e) for e in page.entries]
            if send_initial_events and allow_bookmarks:
                marker = {
                    "metadata": {
                        "resourceVersion": str(page.rv),
                        "annotations": {INITIAL_EVENTS_END: "true"},
                    }
                }
                events.append((BOOKMARK, Entry(marker, page.rv)))
            watcher.preload(events)
        elif rv_text not in ("", "0"):
            start = int(rv_text)
            if start > self.store.rv:
                watcher.close(
                    StatusError(
                        504,
                        f"Too large resource version: {start}, current: {self.store.rv}",
                        reason="Timeout",
                        details={
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                )
                return watcher
            history = self.store.history(rt)
            changes = history.since(start)
            if changes is None:
                watcher.close(
                    StatusError(
                        410,
                        f"too old resource version: {start} ({history.floor})",
                        reason="Expired",
                    )
                )
                return watcher
            watcher.replay(changes)
        self.store.hubs[rt.key].add(watcher)
        self._watchers.add(watcher)
        return watcher

    def close_watch(self, watcher: Watcher) -> None:
        self.store.hubs[watcher.rt.key].remove(watcher)
        self._watchers.discard(watcher)
        watcher.close()

    # ----- in-process API (copies in and out) ---------------------------------------------
    def get(
        self, resource: str | ResourceType, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        rt = self.resource(resource)
        return self.wire(rt, self.store.entry(rt, namespace, name))

    def try_get(
        self, resource: str | ResourceType, name: str, *, namespace: str | None = None
    ) -> dict[str, Any] | None:
        rt = self.resource(resource)
        entry = self.store.find(rt, namespace, name)
        return None if entry is None else self.wire(rt, entry)

    def list(
        self,
        resource: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[dict[str, Any]]:
        rt = self.resource(resource)
        page = self.store.select(
            rt,
            namespace=namespace,
            labels=label_selector_from_query(label_selector),
            fields=parse_field_selector(field_selector, rt.field_labels),
        )
        return [self.wire(rt, e) for e in page.entries]

    async def create(
        self,
        resource: str | ResourceType,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """CREATE as a client's POST (``dry_run``: ``?dryRun=All``, admitted but not stored)."""
        rt = self.resource(resource)
        if namespace is None and rt.namespaced:
            namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        return self.wire(rt, await self.create_entry(rt, clone(obj), namespace, dry_run=dry_run))

    def restore(
        self, resource: str | ResourceType, obj: dict[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Store an object that already existed, as found in etcd when the server starts: it is
        validated and defaulted but keeps its ``status`` and ``creationTimestamp``, and goes
        through no admission webhook — e.g. a pod placed and started long ago (a pod without
        ``spec.priority`` gets it from its class, as admission gave it). Watchers see it ADDED."""
        rt = self.resource(resource)
        if namespace is None and rt.namespaced:
            namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        obj = clone(obj)
        if rt is PODS and (obj.get("spec") or {}).get("priority") is None:
            # Admitted when it was first created: the Priority plugin gave it its priority then.
            admit_priority(self.store, obj)
        return self.wire(rt, self.store.create(rt, obj, namespace=namespace, restore=True))

    async def update(
        self,
        resource: str | ResourceType,
        obj: dict[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        rt = self.resource(resource)
        meta = obj.get("metadata") or {}
        if namespace is None and rt.namespaced:
            namespace = meta.get("namespace") or "default"
        entry = self.store.update(
            rt, namespace, meta.get("name", ""), clone(obj), subresource=subresource
        )
        return self.wire(rt, entry)

    async def patch(
        self,
        resource: str | ResourceType,
        name: str,
        body: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "strategic",
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """``patch_type``: ``merge``, ``strategic`` or ``json`` (or a full media type)."""
        rt = self.resource(resource)
        ctype = PATCH_TYPES.get(patch_type, patch_type)
        entry = self.store.patch(rt, namespace, name, ctype, clone(body), subresource=subresource)
        return self.wire(rt, entry)

    async def delete(
        self, resource: str | ResourceType, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        rt = self.resource(resource)
        return self.wire(rt, self.store.delete(rt, namespace, name))

    async def bind(
        self, namespace: str, name: str, node: str, *, annotations: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Assign a pod to ``node`` through the binding subresource's rules; returns the pod."""
        meta: dict[str, Any] = {"name": name, "namespace": namespace}
        if annotations:
            meta["annotations"] = dict(annotations)
        binding = {"metadata": meta, "target": {"kind": "Node", "name": node}}
        return self.wire(PODS, self.store.bind(namespace, name, binding))

    def watch(
        self,
        resource: str | ResourceType,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        resource_version: str | None = None,
    ) -> LocalWatch:
        """Open a watch now; iterate it for events as the HTTP stream would carry them."""
        rt = self.resource(resource)
        watcher = self.open_watch(
            rt,
            namespace=namespace,
            labels=label_selector_from_query(label_selector),
            fields=parse_field_selector(field_selector, rt.field_labels),
            resource_version=resource_version,
        )
        return LocalWatch(self, watcher)

    def observe(
        self, callback: Callable[[str, str, Mapping[str, Any]], None]
    ) -> Callable[[], None]:
        """Call ``callback(resource, event type, object)`` — e.g. ``("pods", "MODIFIED", pod)``
        — synchronously as each change is committed, in commit order; returns the function that
        stops it. Unlike a watch it is never dropped, compacted or behind: for recorders in the
        test driver. ``object`` is the stored object: read it there, never keep or change it."""

        def observer(rt: ResourceType, change: Change) -> None:
            callback(rt.plural, change.type, change.entry.obj)

        self.store.observers.append(observer)
        return lambda: self.store.observers.remove(observer)

    # ----- faults and history control ----------------------------------------------------
    def inject_error(
        self,
        verb: str = "*",
        resource: str = "*",
        *,
        code: int = 500,
        rate: float = 1.0,
        times: int | None = None,
        message: str = "",
    ) -> None:
        """Answer matching HTTP requests with ``code`` (see :class:`ErrorRule`)."""
        self.faults.add_error(ErrorRule(verb, resource, code, rate, times, message))

    def inject_latency(self, seconds: float, verb: str = "*", resource: str = "*") -> None:
        self.faults.add_latency(LatencyRule(seconds, verb, resource))

    def delete_pods_gracefully(self, enabled: bool = True) -> None:
        """Delete pods bound to the nodes of :attr:`kubelets` gracefully (marked, kept until
        their kubelet stand-in deletes them again), as a real API server does.  Off by default
        (a bare server's tests attach stand-ins they never start); ``running_cluster`` turns it
        on once its kubelet stand-ins run."""
        self.store.kubelet_nodes = self.kubelets if enabled else frozenset()

    def hold_watches(self, resource: str, client: str) -> int:
        """Make ``client``'s watches of ``resource`` (open and to come) lag: their events stay
        queued until :meth:`release_watches`.  ``client``: the first word of its User-Agent.
        Returns how many open watches it holds now."""
        rt = self.resource(resource)
        self._held_watches.add((rt.key, client))
        held = [w for w in self._watchers if w.rt is rt and w.client == client]
        for watcher in held:
            watcher.hold()
        return len(held)

    def release_watches(self) -> None:
        """Deliver what every held watch kept, and hold no more."""
        self._held_watches.clear()
        for watcher in list(self._watchers):
            watcher.release()

    def clear_faults(self) -> None:
        self.faults.clear()

    def compact(self, resource_version: int | None = None) -> int:
        """Drop watch history up to ``resource_version`` (default: current); returns it."""
        return self.store.compact(resource_version)

    def set_history_size(self, size: int) -> None:
        self.store.set_history_size(size)

    def drop_watches(self, resource: str | None = None, *, mode: str = "close") -> int:
        """End open watches: ``close`` ends the stream cleanly, ``expire`` sends ERROR 410 first,
        ``abort`` cuts the connection mid-stream.  Returns how many were dropped."""
        if mode not in ("close", "expire", "abort"):
            raise BadRequestError(f"unknown drop mode {mode!r}; use close, expire or abort")
        rt = self.resource(resource) if resource else None
        dropped = 0
        for watcher in list(self._watchers):
            if rt is not None and watcher.rt is not rt:
                continue
            error = (
                StatusError(410, "too old resource version: watch dropped", reason="Expired")
                if mode == "expire"
                else None
            )
            watcher.close(error, abort=mode == "abort")
            self.store.hubs[watcher.rt.key].remove(watcher)
            self._watchers.discard(watcher)
            dropped += 1
        return dropped

    def stats(self) -> dict[str, Any]:
        return {
            "resourceVersion": str(self.store.rv),
            "objects": {rt.key: self.store.count(rt) for rt in self.registry.types},
            "watchers": {rt.key: len(self.store.hubs[rt.key]) for rt in self.registry.types},
            "history": {
                rt.key: {
                    "events": len(self.store.history(rt)),
                    "floor": self.store.history(rt).floor,
                }
                for rt in self.registry.types
            },
            "historySize": self.store.history_size,
        }

    def shutdown(self) -> None:
        """End every open watch cleanly (server stopping)."""
        for watcher in list(self._watchers):
            self.close_watch(watcher)


__all__ = ["ApiServer", "LocalWatch", "LocalWatchEvent"]
