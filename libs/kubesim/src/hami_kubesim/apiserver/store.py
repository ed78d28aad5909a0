"""The object store: every write path of the API server, with one global resourceVersion.

What the generic registry store is to kube-apiserver: create (names, defaults, validation, the
built-in validating admission), update and patch (preconditions, immutable fields), delete
(preconditions, finalizers, graceful pod deletion, a namespace's contents) and ``pods/binding``,
on the versioned objects, history and watch fan-out of :class:`.storage.Storage` (split off so
each part stays one concern).

Plain synchronous code: each call is one atomic step on the event loop, so a write, its
resourceVersion and the fan-out of its watch event happen together.  The store owns the dicts
passed in and never mutates a dict once stored; callers must not mutate what they get back.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Container, Iterable
from typing import Any

from hami_kubesim.apiserver.errors import (
    AlreadyExistsError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    StatusError,
)
from hami_kubesim.apiserver.history import ADDED, MODIFIED, Entry
from hami_kubesim.apiserver.preconditions import (
    check_delete,
    check_name_matches,
    check_update,
    name_required,
)
from hami_kubesim.apiserver.storage import Storage
from hami_kubesim.objects import deletion, priorityclasses, strategies
from hami_kubesim.objects.clock import generated_name, new_uid, rfc3339
from hami_kubesim.objects.patching import apply_patch
from hami_kubesim.objects.pods import bind_pod
from hami_kubesim.objects.resources import (
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    Registry,
    ResourceType,
)

Key = tuple[str, str]  # (namespace or "", name)
BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Store(Storage):
    """All objects of all resource types, their change history and their watchers, written
    through the API's verbs."""

    def __init__(
        self,
        *,
        registry: Registry | None = None,
        history: int = 10_000,
        clock: Callable[[], str] = rfc3339,
        seed: int | None = None,
        bootstrap: bool = True,
    ) -> None:
        super().__init__(registry=registry, history=history)
        self._clock = clock
        self._rng = random.Random(seed)
        self.kubelet_nodes: Container[str] = frozenset()
        """Nodes whose kubelet stand-in finishes graceful pod deletions.  A pod DELETE with a
        grace period marks the pod only there; elsewhere no kubelet would ever confirm it, so
        the pod goes at once, as if its kubelet had stopped it immediately."""
        if bootstrap:
            for name in BOOTSTRAP_NAMESPACES:
                self.create(NAMESPACES, {"metadata": {"name": name}}, namespace=None)
            if PRIORITY_CLASSES.key in self._objects:
                # kube-apiserver's scheduling/bootstrap-system-priority-classes hook.
                for pc in priorityclasses.system_priority_classes():
                    self.create(PRIORITY_CLASSES, pc, namespace=None)

    # ----- writes ------------------------------------------------------------------------
    def prepare_create(self, rt: ResourceType, obj: Any, namespace: str | None) -> dict[str, Any]:
        """Normalize and default a new object (what admission sees)."""
        normalized = strategies.normalize_body(rt, obj, namespace)
        strategies.prepare_for_create(rt, normalized)
        return normalized

    def create(
        self, rt: ResourceType, obj: Any, *, namespace: str | None, restore: bool = False
    ) -> Entry:
        """Store a new object. ``restore``: an object that already existed (as found in etcd
        when the server starts) keeps the ``status`` and ``creationTimestamp`` it carries."""
        kept = dict(obj) if restore and isinstance(obj, dict) else {}
        obj = self.prepare_create(rt, obj, namespace)
        if rt.has_status and isinstance(kept.get("status"), dict):
            obj["status"] = kept["status"]
        meta = obj["metadata"]
        if rt.namespaced:
            self.check_namespace(namespace or "")
        if meta.get("resourceVersion"):
            raise StatusError(500, "resourceVersion should not be set on objects to be created")
        bucket = self._objects[rt.key].get(namespace or "", {})
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise name_required(rt)
            for _ in range(16):
                name = generated_name(prefix, self._rng)
                if name not in bucket:
                    break
            meta["name"] = name
        causes = strategies.validate_create(rt, obj)
        if causes:
            raise InvalidError(rt.kind, rt.group, name, causes)
        self._validating_admission(rt, obj, updating=False)
        if name in bucket:
            raise AlreadyExistsError(rt.plural, rt.group, name)
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(key, None)
        meta["uid"] = new_uid()
        created = (kept.get("metadata") or {}).get("creationTimestamp")
        meta["creationTimestamp"] = created if isinstance(created, str) else self._clock()
        return self._commit(rt, ADDED, obj, None)

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        obj: Any,
        *,
        subresource: str | None = None,
    ) -> Entry:
        """PUT: the body replaces the object; its resourceVersion is a precondition."""
        obj = strategies.normalize_body(rt, obj, namespace)
        meta = obj["metadata"]
        check_name_matches(meta, name)
        old = self.find(rt, namespace, name)
        if old is None:
            if rt.allow_create_on_update and subresource is None:
                meta.pop("resourceVersion", None)
                return self.create(rt, obj, namespace=namespace)
            raise NotFoundError(rt.plural, rt.group, name)
        check_update(rt, name, meta, old.obj["metadata"])
        return self._replace(rt, old, obj, subresource)

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str | None = None,
    ) -> Entry:
        """PATCH against the latest stored version; a resourceVersion the patch sets is a
        precondition, a changed uid is invalid."""
        old = self.entry(rt, namespace, name)
        original = {"apiVersion": rt.api_version, "kind": rt.kind, **old.obj}
        patched = apply_patch(rt.kind, original, content_type, body)
        meta = patched.get("metadata")
        if not isinstance(meta, dict):
            raise BadRequestError("metadata must be an object")
        old_meta = old.obj["metadata"]
        rv = meta.get("resourceVersion")
        if rv and rv != old_meta["resourceVersion"]:
            raise ConflictError(rt.plural, rt.group, name)
        check_name_matches(meta, name)
        causes = strategies.validate_immutable(meta, old_meta)
        if causes:
            raise InvalidError(rt.kind, rt.group, name, causes)
        patched = strategies.normalize_body(rt, patched, namespace)
        return self._replace(rt, old, patched, subresource)

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        *,
        options: dict[str, Any] | None = None,
        collection: bool = False,
    ) -> Entry:
        """Delete at once, or mark ``deletionTimestamp``: while finalizers remain, and for a pod
        a node's kubelet must stop first (graceful deletion, see :attr:`kubelet_nodes`).
        ``collection``: part of a DELETE of the collection, which skips the per-object guards
        of the resource's REST storage (as the real generic store's ``DeleteCollection``)."""
        old = self.entry(rt, namespace, name)
        check_delete(rt, name, options, old.obj["metadata"])
        if rt is PRIORITY_CLASSES and not collection and priorityclasses.is_system_class(name):
            raise ForbiddenError(
                rt.plural, rt.group, name, priorityclasses.SYSTEM_CLASS_NOT_DELETABLE
            )
        plan = deletion.plan_delete(
            old.obj,
            options,
            is_pod=rt is PODS,
            kubelet_nodes=self.kubelet_nodes,
            now=self._clock(),
        )
        if isinstance(plan, dict):
            return self._commit(rt, MODIFIED, {**old.obj, "metadata": plan}, old)
        if plan == deletion.KEEP:
            return old
        if rt is NAMESPACES:
            self._delete_namespace_contents(name)
        return self._remove(rt, old)

    def delete_collection(
        self,
        rt: ResourceType,
        entries: Iterable[Entry],
        *,
        options: dict[str, Any] | None = None,
    ) -> list[Entry]:
        """Each object deleted as :meth:`delete` would, with the same ``options``."""
        out = []
        for entry in list(entries):
            meta = entry.obj["metadata"]
            current = self.find(rt, meta.get("namespace"), meta["name"])
            if current is not None:
                namespace, name = meta.get("namespace"), meta["name"]
                out.append(self.delete(rt, namespace, name, options=options, collection=True))
        return out

    def bind(self, namespace: str, name: str, binding: Any) -> Entry:
        """``pods/binding``: assign the pod to a node, atomically."""
        if not isinstance(binding, dict):
            raise BadRequestError("the body of the request must be a JSON object")
        old = self.entry(PODS, namespace, name)
        new = bind_pod(old.obj, binding, name, self._clock())
        return self._commit(PODS, MODIFIED, new, old)

    # ----- internals ---------------------------------------------------------------------
    def check_namespace(self, namespace: str) -> None:
        ns = self.find(NAMESPACES, None, namespace)
        if ns is None:
            raise NotFoundError("namespaces", "", namespace)
        if ns.obj["metadata"].get("deletionTimestamp"):
            raise StatusError(
                403,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                reason="Forbidden",
            )

    def _replace(
        self, rt: ResourceType, old: Entry, obj: dict[str, Any], subresource: str | None
    ) -> Entry:
        old_meta = old.obj["metadata"]
        new = strategies.prepare_for_update(rt, obj, old.obj, subresource)
        meta = dict(new["metadata"])
        meta["uid"] = old_meta["uid"]
        meta["creationTimestamp"] = old_meta["creationTimestamp"]
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        new["metadata"] = meta
        causes = strategies.validate_update(rt, new, old.obj, subresource)
        if causes:
            raise InvalidError(rt.kind, rt.group, meta["name"], causes)
        if subresource is None:
            self._validating_admission(rt, new, updating=True)
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and not meta.get("deletionGracePeriodSeconds")
        ):
            # The last finalizer of an object deleted without grace is gone (a pod waiting for
            # its kubelet stays until the kubelet deletes it).
            return self._remove(rt, old, new)
        if new == old.obj:
            return old  # identical writes do not reach storage: no new resourceVersion, no event
        return self._commit(rt, MODIFIED, new, old)

    def _validating_admission(
        self, rt: ResourceType, obj: dict[str, Any], *, updating: bool
    ) -> None:
        """The built-in validating admission plugins, after validation and before storage:
        Priority refuses a second ``globalDefault`` PriorityClass."""
        if rt is not PRIORITY_CLASSES:
            return
        classes = [e.obj for e in self._objects[rt.key].get("", {}).values()]
        why = priorityclasses.global_default_conflict(obj, classes, updating=updating)
        if why is not None:
            raise ForbiddenError(rt.plural, rt.group, obj["metadata"]["name"], why)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for rt in self.registry.types:
            if not rt.namespaced:
                continue
            bucket = self._objects[rt.key].get(namespace)
            for entry in list((bucket or {}).values()):
                self._remove(rt, entry)
