"""The per-kind rules the object store applies to ``resource.k8s.io`` objects (see
:mod:`hami_kubesim.objects.strategies`, which dispatches here for this group).

- ResourceSlice, DeviceClass: ``metadata.generation`` 1 on create, +1 on a spec change.
- ResourceClaim: status reset on create, request defaults, spec immutable, status only
  through ``/status`` (which keeps the spec and the stored labels, annotations, finalizers
  and owners).  No generation (the real strategy sets none).
- ResourceClaimTemplate: request defaults, spec immutable.
Quantities (capacities, capacity requests, consumed capacity) are stored canonical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_kubesim.objects.resource import claims, requests, slices
from hami_kubesim.objects.resources import (
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    ResourceType,
)
from hami_kubesim.objects.validation import Cause

GROUP: Final = "resource.k8s.io"
_WITH_GENERATION: Final = (RESOURCE_SLICES.key, DEVICE_CLASSES.key)


def handles(rt: ResourceType) -> bool:
    return rt.group == GROUP


def _defaults(rt: ResourceType, obj: dict[str, Any]) -> None:
    if rt is RESOURCE_SLICES:
        slices.canonicalize(obj)
    elif rt is RESOURCE_CLAIMS:
        obj["spec"] = requests.default_claim_spec(obj.get("spec"))
    elif rt is RESOURCE_CLAIM_TEMPLATES and isinstance(obj.get("spec"), Mapping):
        spec = obj["spec"]
        obj["spec"] = {**spec, "spec": requests.default_claim_spec(spec.get("spec"))}


def prepare_for_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Defaults, canonical quantities, status reset and generation, in place."""
    _defaults(rt, obj)
    if rt.key in _WITH_GENERATION:
        obj["metadata"]["generation"] = 1
    else:
        obj["metadata"].pop("generation", None)
    if rt is RESOURCE_CLAIMS:
        obj["status"] = {}


def validate_create(rt: ResourceType, obj: Mapping[str, Any]) -> list[Cause]:
    if rt is RESOURCE_SLICES:
        return slices.validate_spec(obj.get("spec"))
    if rt is DEVICE_CLASSES:
        return requests.validate_class_spec(obj.get("spec"))
    if rt is RESOURCE_CLAIMS:
        return requests.validate_claim_spec("spec", obj.get("spec"))
    if rt is RESOURCE_CLAIM_TEMPLATES:
        return claims.validate_template(obj)
    return []


def prepare_for_update(
    rt: ResourceType, new: dict[str, Any], old: Mapping[str, Any], subresource: str | None
) -> dict[str, Any]:
    """``new`` is a fresh top-level dict (the store's generic rules already kept the status
    or the spec); nested values may be shared and are replaced, not changed."""
    if subresource == "status":
        claims.keep_meta_for_status(new, old)
        claims.canonicalize_status(new)
    else:
        _defaults(rt, new)
    generation = old["metadata"].get("generation")
    if rt.key in _WITH_GENERATION and new.get("spec") != old.get("spec"):
        generation = int(generation or 1) + 1
    meta = dict(new["metadata"])
    if generation is None:
        meta.pop("generation", None)
    else:
        meta["generation"] = generation
    new["metadata"] = meta
    return new


def validate_update(
    rt: ResourceType, new: Mapping[str, Any], old: Mapping[str, Any], subresource: str | None
) -> list[Cause]:
    if rt is RESOURCE_CLAIMS and subresource == "status":
        return claims.validate_status(new, old)
    if rt is RESOURCE_SLICES:
        return slices.validate_spec(new.get("spec"), old.get("spec") or {})
    if rt is DEVICE_CLASSES:
        return requests.validate_class_spec(new.get("spec"))
    if rt in (RESOURCE_CLAIMS, RESOURCE_CLAIM_TEMPLATES):
        # The real server validates the whole claim again, then immutability; a changed spec
        # is reported as immutable, an unchanged one was valid when stored.
        return claims.immutable_spec(new, old)
    return []
