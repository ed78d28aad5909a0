"""The in-memory API server: the store plus admission, watches and fault injection.

Its parts: the pod CREATE admission chain (:mod:`.pod_admission`), the open watches and the
in-process :class:`LocalWatch` (:mod:`.watches`), the store (:mod:`.store`) and the fault plan
(:mod:`.faults`).

The HTTP face (:mod:`.http`) and tests both drive this object.  Its in-process methods copy
objects in and out (callers may keep and mutate what they pass or get); reads are synchronous,
writes are coroutines because pod creation runs the admission chain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hami_kubesim.apiserver.errors import BadRequestError
from hami_kubesim.apiserver.faults import ErrorRule, Faults, LatencyRule
from hami_kubesim.apiserver.history import Change, Entry, clone
from hami_kubesim.apiserver.hooks import KubeletControl, MutatingAdmission
from hami_kubesim.apiserver.metrics import RequestCounter
from hami_kubesim.apiserver.pod_admission import admit_by_webhooks, admit_priority
from hami_kubesim.apiserver.selectors import (
    label_selector_from_query,
    parse_field_selector,
)
from hami_kubesim.apiserver.store import Store
from hami_kubesim.apiserver.watches import LocalWatch, LocalWatchEvent, OpenWatches
from hami_kubesim.objects.patching import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from hami_kubesim.objects.resources import PODS, ResourceType

PATCH_TYPES = {"merge": MERGE_PATCH, "strategic": STRATEGIC_PATCH, "json": JSON_PATCH}


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
        self.bookmark_interval = bookmark_interval
        self.requests = RequestCounter()
        """Requests answered over HTTP (``/metrics``; ``requests.counts()`` in-process)."""
        self.kubelets: dict[str, KubeletControl] = {}
        """The kubelet stand-ins ``/_sim/kubelets`` drives, by node (set by the cluster).  With
        :meth:`delete_pods_gracefully`, pods on these nodes are deleted gracefully: their
        kubelet finishes the deletion."""
        self.watches = OpenWatches(self.store, limit=watch_queue_limit)
        """Every open watch (the HTTP layer opens and closes them there), and the clients whose
        watches :meth:`hold_watches` holds."""

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

    @property
    def watch_queue_limit(self) -> int:
        """The backlog past which a watch is ended with 410 (a slow watcher, dropped)."""
        return self.watches.limit

    @watch_queue_limit.setter
    def watch_queue_limit(self, limit: int) -> None:
        self.watches.limit = limit

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
        plugins first (:func:`.pod_admission.admit_priority`), then the mutating webhooks, as
        kube-apiserver orders them (Priority is in its default plugin list, webhooks come last)."""
        obj = self.store.prepare_create(rt, body, namespace)
        if rt is PODS:
            self.store.check_namespace(namespace or "")  # NamespaceLifecycle comes first
            admit_priority(self.store, obj)
        if rt is PODS and self.admission is not None:
            obj = await admit_by_webhooks(self.admission, rt, obj, namespace, dry_run=dry_run)
        with self.store.dry_run(dry_run):
            return self.store.create(rt, obj, namespace=namespace)

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
        watcher = self.watches.open(
            rt,
            namespace=namespace,
            labels=label_selector_from_query(label_selector),
            fields=parse_field_selector(field_selector, rt.field_labels),
            resource_version=resource_version,
        )
        return LocalWatch(self.watches, watcher)

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
        return self.watches.hold(self.resource(resource), client)

    def release_watches(self) -> None:
        """Deliver what every held watch kept, and hold no more."""
        self.watches.release()

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
        return self.watches.drop(self.resource(resource) if resource else None, mode)

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
        self.watches.shutdown()


__all__ = ["ApiServer", "LocalWatch", "LocalWatchEvent"]
