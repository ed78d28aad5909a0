"""The pod fields that refer to claims, as ``pkg/apis/core/validation`` checks them:
``spec.resourceClaims[]`` (``validatePodResourceClaim``), containers'
``resources.claims[]`` (``validateResourceClaimNames``) and ``status.resourceClaimStatuses[]``
(``validatePodResourceClaimStatuses``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from hami_kubesim.objects.resource import names
from hami_kubesim.objects.validation import Cause, duplicate, invalid, not_found, required

_CONTAINER_GROUPS: Final = ("containers", "initContainers")
BOTH_SOURCES: Final = (
    "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"
)
NO_SOURCE: Final = "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"


def _shown(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def pod_claim_names(spec: Mapping[str, Any]) -> set[str]:
    return {
        names.text(c.get("name"))
        for c in spec.get("resourceClaims") or ()
        if isinstance(c, Mapping) and c.get("name")
    }


def validate_pod_claims(spec: Mapping[str, Any]) -> list[Cause]:
    """``spec.resourceClaims`` and every container's ``resources.claims``."""
    claims = spec.get("resourceClaims")
    if claims is None:
        claims = []
    if not isinstance(claims, list):
        return [invalid("spec.resourceClaims", _shown(claims), "must be a list")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        causes.extend(_validate_pod_claim(f"spec.resourceClaims[{i}]", claim, seen))
    known = pod_claim_names(spec)
    for group in _CONTAINER_GROUPS:
        for j, container in enumerate(spec.get(group) or ()):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            refs = resources.get("claims") if isinstance(resources, Mapping) else None
            if refs:
                where = f"spec.{group}[{j}].resources.claims"
                causes.extend(_validate_container_claims(where, refs, known))
    return causes


def _validate_pod_claim(where: str, claim: Any, seen: set[str]) -> list[Cause]:
    if not isinstance(claim, Mapping):
        return [invalid(where, _shown(claim), "must be an object")]
    name = names.text(claim.get("name"))
    causes: list[Cause] = []
    if not name:
        causes.append(required(f"{where}.name"))
    elif name in seen:
        causes.append(duplicate(f"{where}.name", name))
    else:
        causes.extend(names.dns_label(f"{where}.name", name))
        seen.add(name)
    claim_name, template = claim.get("resourceClaimName"), claim.get("resourceClaimTemplateName")
    if claim_name is not None and template is not None:
        causes.append(invalid(where, _shown(claim), BOTH_SOURCES))
    if claim_name is None and template is None:
        causes.append(invalid(where, _shown(claim), NO_SOURCE))
    if claim_name is not None:
        causes.extend(names.dns_subdomain(f"{where}.resourceClaimName", claim_name))
    if template is not None:
        causes.extend(names.dns_subdomain(f"{where}.resourceClaimTemplateName", template))
    return causes


def _validate_container_claims(where: str, refs: Any, known: set[str]) -> list[Cause]:
    if not isinstance(refs, list):
        return [invalid(where, _shown(refs), "must be a list")]
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, ref in enumerate(refs):
        at = f"{where}[{i}]"
        name = names.text(ref.get("name")) if isinstance(ref, Mapping) else ""
        if not name:
            causes.append(required(at))
            continue
        key = name
        request = ref.get("request")
        if request:
            causes.extend(names.dns_label(f"{at}.request", request))
            key = f"{name}/{request}"
        if key in seen:
            causes.append(duplicate(at, key))
        seen.add(key)
        if name not in known:
            listed = ": " + ", ".join(sorted(known)) if known else " which is empty"
            causes.append(
                not_found(at, name, f"must be one of the names in pod.spec.resourceClaims{listed}")
            )
    return causes


def validate_claim_statuses(pod: Mapping[str, Any]) -> list[Cause]:
    """``status.resourceClaimStatuses``: names of pod claims, once each, with valid claim
    names."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses")
    if not statuses:
        return []
    where = "status.resourceClaimStatuses"
    if not isinstance(statuses, list):
        return [invalid(where, _shown(statuses), "must be a list")]
    known = pod_claim_names(pod.get("spec") or {})
    causes: list[Cause] = []
    seen: set[str] = set()
    for i, entry in enumerate(statuses):
        at = f"{where}[{i}]"
        name = names.text(entry.get("name")) if isinstance(entry, Mapping) else ""
        if name in seen:
            causes.append(duplicate(f"{at}.name", name))
        elif name not in known:
            causes.append(
                invalid(
                    f"{at}.name", name, "must match the name of an entry in `spec.resourceClaims`"
                )
            )
        seen.add(name)
        claim = entry.get("resourceClaimName") if isinstance(entry, Mapping) else None
        if claim is not None:
            causes.extend(names.dns_subdomain(f"{at}.resourceClaimName", claim))
    return causes
