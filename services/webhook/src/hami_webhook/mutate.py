"""The admission decision for one pod: allow, mutate (with a JSON Patch) or deny, and why.

Pure: :func:`admit_pod` takes the pod as decoded JSON, the :class:`MutationRules` and a quota
view, and returns a :class:`Decision`.  Nothing here awaits or performs I/O.

The rules, in HAMi's order (pkg/scheduler/webhook.go and the NVIDIA ``MutateAdmission``):

1. A pod whose containers cannot be read (wrong JSON types, a managed resource that is not a
   quantity) is an error, code 400.  A pod without containers is denied ``pod has no containers``.
2. A pod labelled ``hami.io/webhook: ignore`` is allowed unchanged (the chart's object selector
   normally keeps such pods away; this guards a configuration without it).
3. A pod that names another scheduler is allowed unchanged: ``schedulerName`` is set, and it is
   not ``default-scheduler`` (or overwriting that is switched off), and it is not ours.
4. Every container, init containers first: an NVIDIA memory percentage outside 0..100 is an
   error, code 500, as in HAMi.  Privileged containers are not mutated.  Every other container:

   * ``CUDA_TASK_PRIORITY=<n>`` from the priority resource (limits);
   * count absent but memory, percentage or cores present → add the count ``defaultGPUNum``
     (none when it is 0);
   * count present, cores absent, and the request is for a whole card (percentage 100, or no
     memory resource configured, or neither memory nor percentage given) → add cores ``100``;
   * with an NVIDIA request: ``GPU_CORE_UTILIZATION_POLICY`` when ``gpuCorePolicy`` is not
     ``default``; ``runtimeClassName`` when configured and the pod has none;
   * without one, and ``overwriteEnv`` on: ``NVIDIA_VISIBLE_DEVICES=none`` (not in a container
     listing DRA claims: a DRA driver's CDI spec sets it).

   A container asks for another vendor's devices when that vendor's count resource is present
   (or, for AWS Neuron and Enflame DRS, their core/memory resources).  Then each vendor's own
   rule (:mod:`hami_webhook.vendor_rules`: Ascend templates and 910C modules, Iluvatar,
   Moore Threads, Kunlunxin vXPU memory, MetaX sGPU QoS, AWS Neuron and Enflame checks); a
   refusal is an error, code 500, in HAMi's words.  The pod annotations and runtime class
   those rules ask for are written once every container passed.
   4b. With ``dra_claims`` (the ``/webhook/dra`` path, ``--dra-claims``): every unprivileged
   container's NVIDIA request becomes a DRA claim from a ResourceClaimTemplate and its NVIDIA
   resources are removed (:mod:`hami_webhook.dra_claims`; a request no claim can express is an
   error, code 500).  Converted GPUs do not route the pod to our scheduler (rule 6): only
   other devices do.  The templates travel in :attr:`Decision.templates`.
5. Devices requested and any container privileged → denied ``container <name> is privileged``
   (naming the first privileged container that asks for devices, else the first privileged one).
6. Devices requested and a scheduler name configured → ``schedulerName`` is set, and a pod that
   already names a node is denied ``pod has node assigned``.  Devices requested and no node
   named → a placement's record on the pod (:func:`~hami_protocol.pod.allocation.placement_keys`:
   device lists, ``hami.io/vgpu-node``, bind phase and time, MIG reservations — a manifest copied
   from a placed pod) is removed (not in HAMi).
7. With ``capacity_totals`` on (``--write-capacity-totals``): every container asking NVIDIA GPUs
   gets ``hami.io/nvidia-memory`` / ``hami.io/nvidia-cores`` in limits and requests, any other
   container loses them (:mod:`hami_webhook.totals`); values already there are overwritten.
8. Per vendor, memory = max(Σ app containers memory×count, largest init container) and the same
   for cores; if that exceeds a namespace quota → denied ``exceeding resource quota: ...``.

Deliberate differences from HAMi, each to keep the reply minimal or the rule consistent:
an env var that is already present with the wanted value is left alone, and one with another
value (or a ``valueFrom``) is replaced in place instead of appending a duplicate;
``GPU_CORE_UTILIZATION_POLICY`` goes only to containers with an NVIDIA request (HAMi-core reads it
only there); resources are looked up in limits and then requests throughout (HAMi reads some
only from limits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from hami_kube.objects import ContainerView, ObjectView
from hami_protocol import keys
from hami_protocol.config.device import DeviceConfig, NvidiaConfig
from hami_protocol.errors import ProtocolError
from hami_protocol.pod import envs
from hami_protocol.pod.allocation import placement_keys
from hami_protocol.request.containers import PodDeviceRequests, pod_device_requests, priority_value
from hami_protocol.topology.layout import RDMA_RESOURCE
from hami_protocol.vendor.table import DEFAULT_VENDORS, NVIDIA, Vendor
from hami_webhook.dra_claims import ClaimTemplate, Conversion, ConversionError, convert_pod
from hami_webhook.edits import Sections as _Sections
from hami_webhook.edits import mapping as _mapping
from hami_webhook.edits import present as _present
from hami_webhook.edits import sections as _sections
from hami_webhook.edits import set_env as _set_env
from hami_webhook.edits import set_limit as _set_limit
from hami_webhook.edits import value as _value
from hami_webhook.patch import PatchOp, copy_json, diff
from hami_webhook.quota import QuotaView, check_quota
from hami_webhook.totals import write_totals
from hami_webhook.vendor_rules import (
    PodEdits,
    VendorRuleError,
    VendorRuleSet,
    mutate_container,
    vendor_rule_set,
)

__all__ = [
    "DEFAULT_SCHEDULER",
    "ENV_CORE_POLICY",
    "ENV_TASK_PRIORITY",
    "ENV_VISIBLE_DEVICES",
    "Decision",
    "MutationRules",
    "Outcome",
    "admit_pod",
]

DEFAULT_SCHEDULER: Final = "default-scheduler"
ENV_TASK_PRIORITY: Final = envs.CUDA_TASK_PRIORITY
ENV_CORE_POLICY: Final = envs.GPU_CORE_UTILIZATION_POLICY
ENV_VISIBLE_DEVICES: Final = envs.NVIDIA_VISIBLE_DEVICES

Outcome = Literal["allowed", "mutated", "denied", "error"]


@dataclass(frozen=True, slots=True)
class MutationRules:
    """What the mutation depends on; built once from the service settings."""

    scheduler_name: str = "hami-scheduler"
    """Written into ``spec.schedulerName``; empty means "leave it" (and skip the node check)."""
    force_overwrite_default_scheduler: bool = True
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    vendors: tuple[Vendor, ...] = DEFAULT_VENDORS
    """Every vendor row; the NVIDIA row must use the same resource names as ``nvidia``."""
    devices: DeviceConfig = field(default_factory=DeviceConfig)
    """The device config the vendor rows came from (Ascend templates, Moore Threads card
    sizes, ...)."""
    vendor_rules: VendorRuleSet | None = None
    """Derived from ``devices`` and ``vendors`` when not given."""
    placement: frozenset[str] = frozenset()
    """Derived from ``vendors``: the annotations of a placement's record (rule 6)."""
    capacity_totals: bool = False
    """Write the capacity totals into the containers (rule 7); off by default."""

    def __post_init__(self) -> None:
        if self.vendor_rules is None:
            object.__setattr__(self, "vendor_rules", vendor_rule_set(self.devices, self.vendors))
        object.__setattr__(self, "placement", placement_keys(self.vendors))

    @property
    def nvidia_row(self) -> Vendor | None:
        """The NVIDIA vendor row, if configured."""
        return next((v for v in self.vendors if v.common_word == NVIDIA), None)

    @property
    def rule_set(self) -> VendorRuleSet:
        assert self.vendor_rules is not None
        return self.vendor_rules


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one pod.  ``patch`` is empty unless ``outcome`` is ``mutated``."""

    outcome: Outcome
    patch: tuple[PatchOp, ...] = ()
    message: str = ""
    code: int = 200
    """HTTP-style status code carried in ``response.status`` when not allowed."""
    reason: str = ""
    """``Forbidden`` (denied), ``BadRequest`` / ``InternalError`` (error)."""
    detail: Mapping[str, object] = field(default_factory=dict)
    """The offending values, for the one log line a refusal gets."""
    pod: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The pod as admitted (the patch applied) when the mutation pass ran; else ``None``."""
    templates: tuple[ClaimTemplate, ...] = ()
    """ResourceClaimTemplates the patched pod references (DRA conversion, rule 4b): they must
    exist before the reply goes out (except on a dry run)."""
    warnings: tuple[str, ...] = ()
    """Admission warnings for the client (``kubectl`` prints them)."""

    @property
    def allowed(self) -> bool:
        return self.outcome in ("allowed", "mutated")


def _allowed(message: str = "") -> Decision:
    return Decision("allowed", message=message)


def _denied(message: str, **detail: object) -> Decision:
    return Decision("denied", message=message, code=403, reason="Forbidden", detail=detail)


def _error(code: int, message: str, **detail: object) -> Decision:
    reason = "BadRequest" if code == 400 else "InternalError"
    return Decision("error", message=message, code=code, reason=reason, detail=detail)


class _InvalidRequestError(Exception):
    """A container's request breaks a vendor rule (HAMi answers these with code 500)."""

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


# -- reading containers --------------------------------------------------------------------------


def _privileged(ctr: Mapping[str, Any]) -> bool:
    return _mapping(ctr.get("securityContext")).get("privileged") is True


# -- editing containers --------------------------------------------------------------------------


# -- NVIDIA --------------------------------------------------------------------------------------


def _check_percentage(ctr: ContainerView, config: NvidiaConfig) -> None:
    name = config.resource_memory_percentage_name
    percentage = _value(_sections(ctr), name)
    if percentage is not None and not 0 <= percentage <= 100:
        raise _InvalidRequestError(
            f"invalid {name} value {percentage} in container {ctr.name}: "
            "must be an integer between 0 and 100",
            container=ctr.name,
            resource=name,
            value=percentage,
        )


def _whole_card(sections: _Sections, config: NvidiaConfig) -> bool:
    percentage = _value(sections, config.resource_memory_percentage_name)
    if percentage is not None:
        return percentage == 100
    return not config.resource_memory_name or not _present(sections, config.resource_memory_name)


def _uses_claims(ctr: Mapping[str, Any]) -> bool:
    """Whether the container lists DRA claims: their devices (and NVIDIA_VISIBLE_DEVICES) come
    from the driver's CDI spec, which a ``none`` from overwriteEnv would contradict."""
    return bool(_mapping(ctr.get("resources")).get("claims"))


def _mutate_nvidia(ctr: dict[str, Any], config: NvidiaConfig, vendor: Vendor) -> bool:
    """Apply the NVIDIA defaults to one container; returns whether it asks for NVIDIA GPUs."""
    priority = priority_value(ctr, vendor)
    if priority is not None:
        _set_env(ctr, ENV_TASK_PRIORITY, str(priority))
    view = ContainerView(ctr)
    sections = _sections(view)
    count = config.resource_count_name
    found = _present(sections, count)
    partial = (
        config.resource_memory_name,
        config.resource_memory_percentage_name,
        config.resource_core_name,
    )
    if not found and config.default_gpu_num > 0 and any(_present(sections, n) for n in partial):
        _set_limit(ctr, count, config.default_gpu_num)
        sections = _sections(view)
        found = True
    cores = config.resource_core_name
    if found and cores and not _present(sections, cores) and _whole_card(sections, config):
        _set_limit(ctr, cores, 100)
    if found and config.gpu_core_policy != "default":
        _set_env(ctr, ENV_CORE_POLICY, config.gpu_core_policy)
    if not found and config.overwrite_env and not _uses_claims(ctr):
        _set_env(ctr, ENV_VISIBLE_DEVICES, "none")
    return found


# -- the decision --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Scan:
    has_devices: bool = False
    has_nvidia: bool = False
    has_other: bool = False
    """Devices other than NVIDIA GPUs (other vendors, RDMA NICs): they keep our scheduler."""
    privileged: str | None = None
    """The privileged container to name: the first one asking for devices, else the first."""
    privileged_asks: bool = False
    edits: PodEdits = field(default_factory=PodEdits)
    """What unprivileged containers' vendor rules ask of the pod."""


def _mutate_containers(
    spec: dict[str, Any], rules: MutationRules, annotations: Mapping[str, str]
) -> _Scan:
    scan = _Scan()
    nvidia = rules.nvidia_row
    others = tuple(v for v in rules.vendors if v.common_word != NVIDIA)
    for key in ("initContainers", "containers"):
        for ctr in spec.get(key) or ():
            if not isinstance(ctr, dict):
                continue  # a null entry: nothing to edit (the request decoder read it as empty)
            view = ContainerView(ctr)
            _check_percentage(view, rules.nvidia)
            privileged = _privileged(ctr)
            # A privileged container is left as it is, but what it asks for still counts.
            target = copy_json(ctr) if privileged else ctr
            found_nvidia = nvidia is not None and _mutate_nvidia(target, rules.nvidia, nvidia)
            # A privileged container's vendor rules still run (a refusal is a refusal), but what
            # they would ask of the pod is dropped with the container's edits.
            edits = PodEdits() if privileged else scan.edits
            found_vendor = mutate_container(target, annotations, rules.rule_set, edits)
            # RDMA NICs (koordinator.sh/rdma) are placed by our scheduler together with GPUs.
            limits, requests = _sections(view)
            found_other = (
                found_vendor
                or any(
                    v.count_resource in limits
                    or (not v.limits_only and v.count_resource in requests)
                    for v in others
                )
                or RDMA_RESOURCE in limits
                or RDMA_RESOURCE in requests
            )
            found = found_nvidia or found_other
            scan.has_nvidia |= found_nvidia and not privileged
            scan.has_other |= found_other
            scan.has_devices |= found
            if privileged and (scan.privileged is None or (found and not scan.privileged_asks)):
                scan.privileged = view.name
                scan.privileged_asks = found
    return scan


def _annotate(pod: dict[str, Any], current: Mapping[str, str], edits: PodEdits) -> None:
    """Write the vendor rules' pod annotations (metadata and annotations copied on write)."""
    wanted = dict(edits.annotations)
    for key, text in edits.default_annotations.items():
        if key not in current and key not in wanted:
            wanted[key] = text
    if all(current.get(key) == text for key, text in wanted.items()):
        return
    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        return
    meta = dict(meta or {})
    annotations = meta.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, dict) else {}
    annotations.update(wanted)
    meta["annotations"] = annotations
    pod["metadata"] = meta


def _drop_placement(
    pod: dict[str, Any], current: Mapping[str, str], placement: frozenset[str]
) -> None:
    """Remove a placement's record from a pod being created unplaced (copied from a placed
    pod's manifest, or restored from a backup): it is another pod's, and the scheduler's cache
    would count its devices as held until the pod is placed (metadata and annotations copied
    on write)."""
    stale = placement.intersection(current)
    if not stale:
        return
    meta = dict(pod.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    for key in stale:
        annotations.pop(key, None)
    meta["annotations"] = annotations
    pod["metadata"] = meta


def _other_scheduler(spec: Mapping[str, Any], rules: MutationRules) -> str | None:
    current = spec.get("schedulerName")
    if not isinstance(current, str) or not current:
        return None
    if current == DEFAULT_SCHEDULER and rules.force_overwrite_default_scheduler:
        return None
    if rules.scheduler_name and current == rules.scheduler_name:
        return None
    return current


def _pod_effective(requests: PodDeviceRequests, word: str) -> tuple[int, int]:
    """``(memory, cores)`` the pod holds of one vendor: max(Σ apps, largest init container)."""
    app_mem = app_cores = init_mem = init_cores = 0
    for slot in requests.slots:
        request = slot.requests.get(word)
        if request is None:
            continue
        memory, cores = request.memreq * request.nums, request.coresreq * request.nums
        if slot.is_init:
            init_mem, init_cores = max(init_mem, memory), max(init_cores, cores)
        else:
            app_mem, app_cores = app_mem + memory, app_cores + cores
    return max(app_mem, init_mem), max(app_cores, init_cores)


def _quota_denial(
    pod: Mapping[str, Any], namespace: str, rules: MutationRules, quota: QuotaView
) -> Decision | None:
    requests = pod_device_requests(pod, vendors=rules.vendors)
    for vendor in rules.vendors:
        if vendor.common_word not in requests.vendors():
            continue
        memory, cores = _pod_effective(requests, vendor.common_word)
        if memory == 0 and cores == 0:
            continue
        violation = check_quota(
            quota, namespace=namespace, vendor=vendor, memory=memory, cores=cores
        )
        if violation is not None:
            return _denied(
                violation.message,
                namespace=namespace,
                quota=violation.quota,
                resource=violation.resource,
                limit=violation.limit,
                used=violation.used,
                requested=violation.requested,
            )
    return None


def admit_pod(
    pod: object,
    *,
    namespace: str,
    rules: MutationRules,
    quota: QuotaView | None = None,
    dra_claims: bool = False,
) -> Decision:
    """Decide on one pod CREATE.  ``namespace`` is the request's namespace; ``dra_claims``:
    NVIDIA requests become DRA claims (rule 4b)."""
    if not isinstance(pod, dict):
        return _error(400, "cannot decode pod: request.object is not a JSON object")
    spec = pod.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return _error(400, "cannot decode pod: spec is not a JSON object")
    try:
        pod_device_requests(pod, vendors=rules.vendors)
    except ProtocolError as exc:
        return _error(400, f"cannot decode pod: {exc}", key=exc.key, value=exc.value)
    if not spec.get("containers"):
        return _denied("pod has no containers")
    if ObjectView(pod).labels.get(keys.WEBHOOK_IGNORE_LABEL) == keys.WEBHOOK_IGNORE_VALUE:
        return _allowed("pod is labelled to be ignored")
    other = _other_scheduler(spec, rules)
    if other is not None:
        return _allowed(f"pod already has different scheduler assigned: {other}")

    # Only the container lists are edited; every other part of the spec stays shared with the
    # original, so the diff below skips it by identity.
    mutated = dict(pod)
    mutated_spec = mutated["spec"] = dict(spec)
    for key in ("initContainers", "containers"):
        if type(spec.get(key)) is list:
            mutated_spec[key] = copy_json(spec[key])
    annotations = ObjectView(pod).annotations
    try:
        scan = _mutate_containers(mutated_spec, rules, annotations)
    except (_InvalidRequestError, VendorRuleError) as exc:
        return _error(500, exc.message, **exc.detail)
    except ProtocolError as exc:
        return _error(400, f"cannot decode pod: {exc}", key=exc.key, value=exc.value)
    if scan.has_devices and scan.privileged is not None:
        return _denied(f"container {scan.privileged} is privileged", container=scan.privileged)
    if scan.has_nvidia and rules.nvidia.runtime_class_name and spec.get("runtimeClassName") is None:
        mutated_spec["runtimeClassName"] = rules.nvidia.runtime_class_name
    if scan.edits.runtime_class and mutated_spec.get("runtimeClassName") is None:
        mutated_spec["runtimeClassName"] = scan.edits.runtime_class
    _annotate(mutated, annotations, scan.edits)
    conversion = Conversion()
    nvidia = rules.nvidia_row
    if dra_claims and scan.has_nvidia and nvidia is not None:
        try:
            conversion = convert_pod(
                mutated_spec, namespace=namespace, annotations=annotations, vendor=nvidia
            )
        except ConversionError as exc:
            return _error(500, exc.message, **exc.detail)
    # Claims are allocated by whatever scheduler the pod names (kube-scheduler's
    # DynamicResources plugin, Volcano, ...): only devices left to our extender reroute it.
    routed = scan.has_other if conversion.containers else scan.has_devices
    if scan.has_devices and rules.scheduler_name:
        node = spec.get("nodeName")
        if node:
            # Also for claims: a pod bound by name skips the scheduler that allocates them.
            return _denied("pod has node assigned", nodeName=node)
        if routed:
            mutated_spec["schedulerName"] = rules.scheduler_name
    if scan.has_devices and not spec.get("nodeName"):
        _drop_placement(mutated, annotations, rules.placement)
    if rules.capacity_totals:
        try:
            write_totals(mutated_spec, rules.nvidia_row)
        except ProtocolError as exc:
            return _error(400, f"cannot decode pod: {exc}", key=exc.key, value=exc.value)
    if scan.has_devices and quota is not None and quota.has_limits(namespace):
        denial = _quota_denial(mutated, namespace, rules, quota)
        if denial is not None:
            return denial
    ops = diff(pod, mutated)
    if not ops:
        return Decision("allowed", pod=pod, warnings=conversion.warnings)
    return Decision(
        "mutated",
        patch=tuple(ops),
        pod=mutated,
        templates=conversion.templates,
        warnings=conversion.warnings,
    )
