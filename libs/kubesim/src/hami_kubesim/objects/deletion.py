"""What a DELETE does to a stored object: remove it, keep it as it is, or mark it deleted
(``metadata.deletionTimestamp``) and keep it until something finishes the deletion.

Sources: ``staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`` (``BeforeDelete``: a
negative grace period counts as 1; an object already marked only takes a shorter period),
``pkg/registry/core/pod/strategy.go`` (``CheckGracefulDelete``) and the generic store's
``updateForGracefulDeletionAndFinalizers`` (finalizers keep a marked object stored).

Only pods delete gracefully: marked with ``deletionTimestamp = now + grace`` and
``deletionGracePeriodSeconds = grace``, they stay until their kubelet stops them and deletes
them again with grace 0.  Other kinds are marked (with grace 0) only while finalizers remain.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from datetime import datetime, timedelta
from typing import Any, Final

from hami_kubesim.apiserver.errors import BadRequestError
from hami_kubesim.objects.clock import rfc3339

REMOVE: Final = "remove"
KEEP: Final = "keep"
Plan = str | dict[str, Any]
""":data:`REMOVE`, :data:`KEEP`, or the object's new ``metadata`` (marked)."""


def requested_grace(options: Mapping[str, Any] | None) -> int | None:
    """DeleteOptions' ``gracePeriodSeconds``; a negative one counts as 1."""
    value = (options or {}).get("gracePeriodSeconds")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadRequestError(f"gracePeriodSeconds: must be an integer, got {value!r}")
    return 1 if value < 0 else value


def pod_grace_period(pod: Mapping[str, Any], requested: int | None) -> int:
    """``CheckGracefulDelete``: the seconds a DELETE leaves ``pod``'s kubelet to stop it (0: at
    once).  Without ``requested``, the pod's ``terminationGracePeriodSeconds``; a pod no node
    runs, or one that ended, goes at once."""
    spec = pod.get("spec") or {}
    if requested is not None:
        period = requested
    else:
        own = spec.get("terminationGracePeriodSeconds")
        period = own if isinstance(own, int) and not isinstance(own, bool) else 0
    if not spec.get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        period = 0
    return 1 if period < 0 else period


def plan_delete(
    obj: Mapping[str, Any],
    options: Mapping[str, Any] | None,
    *,
    is_pod: bool,
    kubelet_nodes: Container[str],
    now: str,
) -> Plan:
    """What a DELETE with ``options`` does to the stored ``obj`` (see the module doc).
    ``kubelet_nodes``: nodes with a kubelet that finishes graceful deletions; a pod elsewhere
    goes at once.  ``now``: the server's clock (RFC 3339)."""
    meta = obj["metadata"]
    requested = requested_grace(options)
    finalizers = bool(meta.get("finalizers"))
    if meta.get("deletionTimestamp"):
        return _delete_again(meta, requested, finalizers)
    period = 0
    if is_pod and (obj.get("spec") or {}).get("nodeName") in kubelet_nodes:
        # Elsewhere no kubelet would end the grace period: not even once finalizers are gone.
        period = pod_grace_period(obj, requested)
    if period == 0 and not finalizers:
        return REMOVE
    return {
        **meta,
        "deletionTimestamp": _plus(now, period),
        "deletionGracePeriodSeconds": period,
    }


def _delete_again(meta: Mapping[str, Any], requested: int | None, finalizers: bool) -> Plan:
    current = meta.get("deletionGracePeriodSeconds")
    if not current:
        # Marked without grace (finalizers), or left half-deleted: goes once it can.
        return KEEP if finalizers else REMOVE
    if requested is None or requested >= current:
        return KEEP
    if requested == 0 and not finalizers:
        return REMOVE
    return {
        **meta,
        "deletionTimestamp": _plus(meta["deletionTimestamp"], requested - current),
        "deletionGracePeriodSeconds": requested,
    }


def _plus(stamp: str, seconds: int) -> str:
    if not seconds:
        return stamp
    return rfc3339(datetime.fromisoformat(stamp) + timedelta(seconds=seconds))
