"""The resourceclaim controller's decisions (kube-controller-manager's
``pkg/controller/resourceclaim/controller.go``), pure: :mod:`.resourceclaim` runs them.

* A pod's ``spec.resourceClaims[]`` entry naming a template gets a ResourceClaim made from it:
  ``generateName`` ``<pod>-<pod claim>-`` (both parts cut proportionally when longer than 57
  characters), the template's labels and annotations plus ``resource.kubernetes.io/
  pod-claim-name``, owned by the pod (``controller`` and ``blockOwnerDeletion``), the
  template's claim spec unchanged.  Its name goes into the pod's
  ``status.resourceClaimStatuses``.
* A claim's ``status.reservedFor`` loses pods that are gone (or replaced: another UID) or done
  (``Succeeded`` / ``Failed``, or deleted before being scheduled).  When the last one goes and
  the claim carries the scheduler's finalizer, the allocation is cleared with it, and once no
  allocation is left the finalizer is removed.
* A generated claim whose pod is done or replaced, and that nothing reserves, is deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

POD_CLAIM_NAME_ANNOTATION: Final = "resource.kubernetes.io/pod-claim-name"
FINALIZER: Final = "resource.kubernetes.io/delete-protection"
"""Set by the scheduler before it writes an allocation."""
_MAX_BASE: Final = 57  # leaves room for the 5 random characters in a 63-character name


def generate_name(pod: str, claim: str) -> str:
    """The claim's ``generateName``: ``<pod>-<claim>-``, or both cut to fit 57 characters."""
    name = f"{pod}-{claim}-"
    if len(name) <= _MAX_BASE:
        return name
    return (
        f"{pod[: len(pod) * _MAX_BASE // len(name)]}-{claim[: len(claim) * _MAX_BASE // len(name)]}"
    )


def is_pod_done(pod: Mapping[str, Any]) -> bool:
    """The pod will not run (again): a terminal phase, or deleted before it was scheduled."""
    phase = (pod.get("status") or {}).get("phase")
    deleted = bool(pod["metadata"].get("deletionTimestamp"))
    return phase in ("Succeeded", "Failed") or (
        deleted and not (pod.get("spec") or {}).get("nodeName")
    )


def owning_pod(claim: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(name, uid)`` of the pod that controls ``claim``, if a pod does."""
    for owner in claim["metadata"].get("ownerReferences") or ():
        if (
            owner.get("controller")
            and owner.get("kind") == "Pod"
            and owner.get("apiVersion") == "v1"
        ):
            return str(owner.get("name", "")), str(owner.get("uid", ""))
    return None


def claim_status_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim name -> generated claim name, from ``status.resourceClaimStatuses``."""
    return {
        str(entry.get("name")): str(entry["resourceClaimName"])
        for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or ()
        if entry.get("resourceClaimName")
    }


def template_claims(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(pod claim name, template name)`` for every template entry of the pod."""
    return [
        (str(entry.get("name")), str(entry["resourceClaimTemplateName"]))
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ()
        if entry.get("resourceClaimTemplateName")
    ]


def referenced_claims(pod: Mapping[str, Any]) -> set[str]:
    """Names of all claims the pod uses (direct ones and generated ones known so far)."""
    direct = {
        str(entry["resourceClaimName"])
        for entry in (pod.get("spec") or {}).get("resourceClaims") or ()
        if entry.get("resourceClaimName")
    }
    return direct | set(claim_status_names(pod).values())


def find_generated(
    pod: Mapping[str, Any], pod_claim: str, claims: Iterable[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """An existing claim made for this pod's ``pod_claim`` (``findPodResourceClaim``: owned by
    the pod and annotated with the pod claim's name), e.g. made before a crash that lost the
    pod status update."""
    uid = pod["metadata"].get("uid")
    for claim in claims:
        owner = owning_pod(claim)
        annotations = claim["metadata"].get("annotations") or {}
        if (
            owner is not None
            and owner[1] == uid
            and annotations.get(POD_CLAIM_NAME_ANNOTATION) == pod_claim
        ):
            return claim
    return None


def claim_from_template(
    pod: Mapping[str, Any], pod_claim: str, template: Mapping[str, Any]
) -> dict[str, Any]:
    """The ResourceClaim to create for ``pod_claim`` of ``pod`` from ``template``."""
    meta = pod["metadata"]
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = {**(template_meta.get("annotations") or {}), POD_CLAIM_NAME_ANNOTATION: pod_claim}
    claim_meta: dict[str, Any] = {
        "generateName": generate_name(meta["name"], pod_claim),
        "namespace": meta.get("namespace"),
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "annotations": annotations,
    }
    if template_meta.get("labels"):
        claim_meta["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": claim_meta,
        "spec": template_spec.get("spec") or {},
    }


@dataclass(frozen=True, slots=True)
class ClaimSync:
    """What to do with one claim: a new ``status`` to write (``None``: keep), whether to
    remove the scheduler's finalizer afterwards, whether to delete the claim."""

    status: dict[str, Any] | None = None
    remove_finalizer: bool = False
    delete: bool = False


def pods_to_look_up(claim: Mapping[str, Any]) -> set[str]:
    """Names of the pods :func:`sync_claim` needs: those reserving the claim, and its owner."""
    names = {
        str(ref.get("name"))
        for ref in (claim.get("status") or {}).get("reservedFor") or ()
        if ref.get("resource") == "pods" and not ref.get("apiGroup")
    }
    owner = owning_pod(claim)
    return names | ({owner[0]} if owner else set())


def sync_claim(claim: Mapping[str, Any], pods: Mapping[str, Mapping[str, Any]]) -> ClaimSync:
    """The controller's ``syncClaim`` for ``claim`` given the existing pods of its namespace
    by name (at least :func:`pods_to_look_up`; the caller asks the API server about those its
    cache lacks, as the real controller does, so a missing pod is a deleted one)."""
    status = claim.get("status") or {}
    reserved = list(status.get("reservedFor") or ())
    valid = []
    for ref in reserved:
        if ref.get("resource") != "pods" or ref.get("apiGroup"):
            valid.append(ref)  # only pods are understood; others stay
            continue
        pod = pods.get(str(ref.get("name")))
        replaced = pod is None or pod["metadata"].get("uid") != ref.get("uid")
        if not replaced and pod is not None and not is_pod_done(pod):
            valid.append(ref)
    finalized = FINALIZER in (claim["metadata"].get("finalizers") or ())
    new_status: dict[str, Any] | None = None
    if len(valid) < len(reserved):
        new_status = {**status, "reservedFor": valid}
        if not valid:
            new_status.pop("reservedFor")
            if finalized:
                new_status.pop("allocation", None)
    allocated = (new_status if new_status is not None else status).get("allocation") is not None
    deleting = bool(claim["metadata"].get("deletionTimestamp"))
    if not valid and finalized and allocated and deleting and new_status is None:
        new_status = {k: v for k, v in status.items() if k != "allocation"}
        allocated = False
    remove_finalizer = not valid and finalized and not allocated
    return ClaimSync(new_status, remove_finalizer, not valid and _owner_gone(claim, pods))


def _owner_gone(claim: Mapping[str, Any], pods: Mapping[str, Mapping[str, Any]]) -> bool:
    """The claim was generated for a pod that is done, replaced or deleted."""
    owner = owning_pod(claim)
    if owner is None:
        return False
    pod = pods.get(owner[0])
    return pod is None or pod["metadata"].get("uid") != owner[1] or is_pod_done(pod)
