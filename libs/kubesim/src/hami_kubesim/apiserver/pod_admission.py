"""The admission chain of a pod CREATE, in kube-apiserver's order: the built-in Priority plugin
(:func:`admit_priority`, in its default plugin list), then the mutating webhooks
(:func:`admit_by_webhooks`, through the :class:`~.hooks.MutatingAdmission` seam)."""

from __future__ import annotations

from typing import Any

from hami_kubesim.apiserver.errors import ForbiddenError, StatusError, reason_for
from hami_kubesim.apiserver.hooks import AdmissionDenied, MutatingAdmission
from hami_kubesim.apiserver.store import Store
from hami_kubesim.objects.priorityclasses import admit_pod_priority
from hami_kubesim.objects.resources import PODS, PRIORITY_CLASSES, ResourceType


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


async def admit_by_webhooks(
    admission: MutatingAdmission,
    rt: ResourceType,
    obj: dict[str, Any],
    namespace: str | None,
    *,
    dry_run: bool,
) -> dict[str, Any]:
    """The object as the mutating webhooks leave it, or the status error a refusal answers."""
    try:
        return await admission(
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
