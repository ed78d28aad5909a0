"""NVIDIA requests users already write, turned into DRA claims (``--dra-claims``; docs/dra.md).

Pure: :func:`convert_pod` edits a pod (as decoded JSON, after the NVIDIA defaults of
:mod:`hami_webhook.mutation.nvidia` ran) in place and returns the ResourceClaimTemplates the pod now
references.  Nothing here performs I/O; the HTTP layer creates the templates before answering.

Why templates, named by the request's shape (HAMi-DRA's design and its bug: contract §6.2):
HAMi-DRA creates one ResourceClaim per pod inside admission and deletes it from a validating
webhook on pod DELETE.  The claim has no owner (the pod UID is unknown at admission), so a
refused pod, a dry run, a missed DELETE or a rolling update leaves it behind (HAMi-DRA #21).
Here the pod names a ``resourceClaimTemplateName`` instead; kube-controller-manager's
resourceclaim controller then creates the pod's claim **owned by the pod** (controller
reference), so the garbage collector removes it with the pod, and nothing pod-specific is
created during admission.  The template itself is shared: its name is a hash of its spec
(``hami-gpu-<16 hex>``), so every pod asking the same shape in a namespace references the same
one; creating it is idempotent (AlreadyExists is success), a dry run skips it, and a template
left by a pod that was refused later is still correct for the next pod of that shape.

Per container with an NVIDIA request (init containers too), the container gets its own pod
claim ``gpu-<container>`` and one request ``gpu``:

* ``exactly.deviceClassName: gpu.hami.io``, ``count`` = ``nvidia.com/gpu``;
* ``capacity.requests.memory`` = ``gpumem`` MiB × memoryFactor (or ``defaultMem``) per GPU,
  absent for a whole card (percentage 100, or no memory asked and no default): the device's
  request policy then charges the whole memory (notes DECISIONS);
* ``capacity.requests.cores`` = ``gpucores`` per GPU when above 0 (the whole-card default 100
  comes from the NVIDIA rule that ran before);
* selectors (CEL over the driver's attributes) from the pod's ``nvidia.com/use-gputype`` /
  ``nouse-gputype`` (case-insensitive substrings of ``model``, as HAMi matches them) and
  ``use-gpuuuid`` / ``nouse-gpuuuid`` (exact ``uuid``);
* ``nvidia.com/numa-bind: true`` with more than one GPU → constraint ``matchAttribute:
  gpu.hami.io/numa`` (every GPU of the request on one NUMA node).

Its NVIDIA resources (count, memory, percentage, cores, priority) leave ``limits`` and
``requests``, so nothing asks the device-plugin path; ``CUDA_TASK_PRIORITY`` and the other env
the NVIDIA rule wrote stay.

Refused (:class:`ConversionError`), each because a claim could not say it: a memory
percentage below 100 (a claim asks an absolute amount; KEP-5075 has no relative request);
cores above 100; a container naming NVIDIA resources whose request does not parse (e.g.
``gpumem: 16Gi``, which HAMi reads as MiB and drops).  Warned (admission ``warnings``):
HAMi's placement annotations (binpack/spread, topology-aware, scoring weights, vGPU mode),
which kube-scheduler's first-fit allocator cannot honour.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hami_protocol import keys
from hami_protocol.dra_driver import (
    ATTR_MODEL,
    ATTR_NUMA,
    ATTR_UUID,
    CAPACITY_CORES,
    CAPACITY_MEMORY,
    DEVICE_CLASS,
    DRIVER,
    RESOURCE_API_VERSION,
)
from hami_protocol.pod.policy import parse_pod_policy
from hami_protocol.request.containers import (
    FULL_PERCENTAGE,
    container_mentions_vendor,
    vendor_request,
)
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.vendors.rule_set import VendorRuleError

__all__ = [
    "MANAGED_BY",
    "POD_CLAIM_PREFIX",
    "REQUEST_NAME",
    "TEMPLATE_PREFIX",
    "ClaimTemplate",
    "Conversion",
    "ConversionError",
    "GpuShape",
    "cel_string",
    "convert_pod",
    "template_for",
]

REQUEST_NAME: Final = "gpu"
"""The one request of every converted claim (results and CDI ids are ``.../<claimUID>-gpu``)."""
TEMPLATE_PREFIX: Final = "hami-gpu-"
POD_CLAIM_PREFIX: Final = "gpu-"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "hami-webhook"}
SHAPE_ANNOTATION: Final = "gpu.hami.io/request"
"""On the template: the request it stands for, for people (``count=1 memory=4Gi cores=30``)."""

_HASH_CHARS: Final = 16
_DNS_LABEL_MAX: Final = 63
_MAX_CORES: Final = 100
_NUMA_QUALIFIED: Final = f"{DRIVER}/{ATTR_NUMA}"
_ATTRIBUTE: Final = f'device.attributes["{DRIVER}"]'
_IGNORED_POLICY_KEYS: Final = (
    keys.NODE_SCHEDULER_POLICY,
    keys.GPU_SCHEDULER_POLICY,
    keys.DEVICE_SCORING_WEIGHTS,
    keys.NVIDIA_VGPU_MODE,
)
_REGEX_SPECIAL: Final = frozenset("\\.+*?()|[]{}^$-")


class ConversionError(VendorRuleError):
    """A container's NVIDIA request cannot be expressed as a claim (the pod is refused with
    code 500, as a request breaking any other admission rule)."""


@dataclass(frozen=True, slots=True)
class GpuShape:
    """What one container asks per claim: the only input of a template (its name hashes it)."""

    count: int
    memory_mib: int = 0
    """Per GPU; 0 = the whole card (no capacity request: the device's default applies)."""
    cores: int = 0
    """Per GPU, percent of the SMs; 0 = none reserved (the device's default)."""
    selectors: tuple[str, ...] = ()
    """CEL expressions, all of which a device must satisfy."""
    same_numa: bool = False

    @property
    def summary(self) -> str:
        parts = [f"count={self.count}"]
        if self.memory_mib:
            parts.append(f"memory={_mebibytes(self.memory_mib)}")
        if self.cores:
            parts.append(f"cores={self.cores}")
        if self.same_numa:
            parts.append("same-numa")
        if self.selectors:
            parts.append(f"selectors={len(self.selectors)}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class ClaimTemplate:
    """A ResourceClaimTemplate the pod references; the HTTP layer makes sure it exists."""

    namespace: str
    name: str
    body: Mapping[str, Any] = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Conversion:
    """What :func:`convert_pod` did: templates to ensure (one per distinct shape), warnings."""

    templates: tuple[ClaimTemplate, ...] = ()
    containers: tuple[str, ...] = ()
    """The containers that now use a claim instead of NVIDIA resources."""
    warnings: tuple[str, ...] = ()


def cel_string(text: str) -> str:
    """A CEL double-quoted string literal (backslash and quote escaped, control chars as \\x)."""
    out = []
    for char in text:
        if char in '\\"':
            out.append("\\" + char)
        elif ord(char) < 0x20:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _regex_literal(text: str) -> str:
    """``text`` matched literally by RE2 (upstream CEL) and Python's ``re`` (the emulator):
    only punctuation is escaped, which both read as the character itself."""
    return "".join("\\" + char if char in _REGEX_SPECIAL else char for char in text)


def _model_matches(items: tuple[str, ...]) -> str:
    # HAMi matches types as case-insensitive substrings of the model; CEL's matches() is an
    # unanchored RE2 search, and (?i) folds case (the strings extension's lowerAscii() is not
    # in every CEL implementation).
    pattern = "(?i)(?:" + "|".join(_regex_literal(item) for item in items) + ")"
    return f"{_ATTRIBUTE}.{ATTR_MODEL}.matches({cel_string(pattern)})"


def _uuid_in(items: tuple[str, ...]) -> str:
    listed = ", ".join(cel_string(item) for item in items)
    return f"{_ATTRIBUTE}.{ATTR_UUID} in [{listed}]"


def pod_selectors(annotations: Mapping[str, str]) -> tuple[tuple[str, ...], bool, tuple[str, ...]]:
    """``(CEL selectors, numa bind, warnings)`` from a pod's NVIDIA selector annotations."""
    # Scoring weights only order HAMi's own device choice (ignored here, with a warning), so a
    # malformed value must not refuse the pod as the extender's Filter would.
    policy = parse_pod_policy(
        {k: v for k, v in annotations.items() if k != keys.DEVICE_SCORING_WEIGHTS}
    )
    selectors: list[str] = []
    if policy.use_types:
        selectors.append(_model_matches(policy.use_types))
    if policy.nouse_types:
        selectors.append("!" + _model_matches(policy.nouse_types))
    if policy.use_uuids:
        selectors.append(_uuid_in(policy.use_uuids))
    if policy.nouse_uuids:
        selectors.append(f"!({_uuid_in(policy.nouse_uuids)})")
    warnings = [
        f"{key} is ignored for GPUs requested through DRA: kube-scheduler allocates devices "
        "first-fit in ResourceSlice order and scores no device placement"
        for key in _IGNORED_POLICY_KEYS
        if key in annotations
    ]
    warnings.extend(w for w in policy.warnings if keys.NVIDIA_NUMA_BIND in w)
    return tuple(selectors), policy.numa_bind, tuple(warnings)


def _mebibytes(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def _request_spec(shape: GpuShape) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS, "count": shape.count}
    if shape.selectors:
        exactly["selectors"] = [{"cel": {"expression": expr}} for expr in shape.selectors]
    capacity: dict[str, str] = {}
    if shape.memory_mib:
        capacity[CAPACITY_MEMORY] = _mebibytes(shape.memory_mib)
    if shape.cores:
        capacity[CAPACITY_CORES] = str(shape.cores)
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    devices: dict[str, Any] = {"requests": [{"name": REQUEST_NAME, "exactly": exactly}]}
    if shape.same_numa and shape.count > 1:
        devices["constraints"] = [{"requests": [REQUEST_NAME], "matchAttribute": _NUMA_QUALIFIED}]
    return {"devices": devices}


def template_for(shape: GpuShape, namespace: str) -> ClaimTemplate:
    """The ResourceClaimTemplate of ``shape`` in ``namespace``; its name hashes the claim spec,
    so equal shapes share a name and different ones never do (barring a 64-bit collision)."""
    claim_spec = _request_spec(shape)
    digest = hashlib.sha256(
        json.dumps(claim_spec, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    name = TEMPLATE_PREFIX + digest[:_HASH_CHARS]
    body = {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {SHAPE_ANNOTATION: shape.summary},
        },
        # The generated claims carry the label too (kubectl get resourceclaims -l ...).
        "spec": {"metadata": {"labels": dict(MANAGED_BY)}, "spec": claim_spec},
    }
    return ClaimTemplate(namespace=namespace, name=name, body=body)


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers"):
        for ctr in spec.get(key) or ():
            if isinstance(ctr, dict):
                yield ctr


def _shape(
    ctr: dict[str, Any], vendor: Vendor, selectors: tuple[str, ...], numa: bool
) -> GpuShape | None:
    name = ctr.get("name")
    request = vendor_request(ctr, vendor)
    if request is None:
        if container_mentions_vendor(ctr, vendor):
            raise ConversionError(
                f"container {name}: its NVIDIA request cannot be read as a DRA claim "
                f"({vendor.count_resource} must be a whole number of GPUs, "
                f"{vendor.memory_resource} a whole number of MiB)",
                container=name,
            )
        return None
    memory = request.memreq
    if memory == 0 and request.mem_percentagereq != FULL_PERCENTAGE:
        raise ConversionError(
            f"container {name}: {vendor.memory_percentage_resource}="
            f"{request.mem_percentagereq} cannot be converted to a DRA claim: a claim asks an "
            f"absolute amount of memory; ask {vendor.memory_resource} (MiB) instead, or 100 "
            "percent for whole GPUs",
            container=name,
            resource=vendor.memory_percentage_resource,
            value=request.mem_percentagereq,
        )
    if request.coresreq > _MAX_CORES:
        raise ConversionError(
            f"container {name}: {vendor.cores_resource}={request.coresreq} is more than "
            f"{_MAX_CORES} percent of a GPU",
            container=name,
            resource=vendor.cores_resource,
            value=request.coresreq,
        )
    return GpuShape(
        count=request.nums,
        memory_mib=memory,
        cores=request.coresreq,
        selectors=selectors,
        same_numa=numa,
    )


def _pod_claim_name(container: str, taken: set[str]) -> str:
    base = POD_CLAIM_PREFIX + container
    if len(base) > _DNS_LABEL_MAX:
        digest = hashlib.sha256(container.encode()).hexdigest()[:8]
        base = base[: _DNS_LABEL_MAX - 9].rstrip("-") + "-" + digest
    name, suffix = base, 1
    while name in taken:
        suffix += 1
        tail = f"-{suffix}"
        name = base[: _DNS_LABEL_MAX - len(tail)].rstrip("-") + tail
    taken.add(name)
    return name


def _strip(ctr: dict[str, Any], names: tuple[str, ...], claim: str) -> None:
    resources = ctr.get("resources")
    if not isinstance(resources, dict):
        ctr["resources"] = resources = {}
    for section in ("limits", "requests"):
        values = resources.get(section)
        if isinstance(values, dict) and any(name in values for name in names):
            kept = {k: v for k, v in values.items() if k not in names}
            if kept:
                resources[section] = kept
            else:
                del resources[section]
    claims = resources.get("claims")
    claims = list(claims) if isinstance(claims, list) else []
    claims.append({"name": claim})
    resources["claims"] = claims


def convert_pod(
    spec: dict[str, Any], *, namespace: str, annotations: Mapping[str, str], vendor: Vendor
) -> Conversion:
    """Move every container's NVIDIA request of ``spec`` (edited in place; containers and
    ``resourceClaims`` are replaced, not shared) into a claim from a template.  ``vendor`` is
    the NVIDIA row.  Raises :class:`ConversionError` for a request a claim cannot express."""
    selectors, numa, warnings = pod_selectors(annotations)
    existing = spec.get("resourceClaims")
    pod_claims = list(existing) if isinstance(existing, list) else []
    taken = {c.get("name") for c in pod_claims if isinstance(c, dict)}
    taken_names = {name for name in taken if isinstance(name, str)}
    stripped = tuple(name for name in (*vendor.managed_resources, vendor.priority_resource) if name)
    templates: dict[str, ClaimTemplate] = {}
    converted: list[str] = []
    for ctr in _containers(spec):
        shape = _shape(ctr, vendor, selectors, numa)
        if shape is None:
            continue
        template = template_for(shape, namespace)
        templates.setdefault(template.name, template)
        container = str(ctr.get("name") or f"container-{len(converted)}")
        claim = _pod_claim_name(container, taken_names)
        pod_claims.append({"name": claim, "resourceClaimTemplateName": template.name})
        _strip(ctr, stripped, claim)
        converted.append(container)
    if not converted:
        return Conversion()
    spec["resourceClaims"] = pod_claims
    return Conversion(
        templates=tuple(templates.values()), containers=tuple(converted), warnings=warnings
    )
