"""Pod scheduling-policy annotations and the node cordon list.

:func:`parse_pod_policy` reads every per-pod policy annotation into one frozen :class:`PodPolicy`.
Rules (as HAMi applies them):

* ``hami.io/node-scheduler-policy``: ``binpack`` or ``spread`` (trimmed, case-sensitive).
* ``hami.io/gpu-scheduler-policy``: ``binpack``, ``spread``, ``topology-aware``, ``mutex``,
  ``numa`` or a comma chain of them (``binpack,numa``); entries trimmed.
  An unrecognised or empty policy annotation is ignored: the scheduler's configured default stands
  and a warning is recorded (HAMi >= v2.10 behaviour; older HAMi sorted such pods as spread).
* ``hami.io/device-scoring-weights``: exactly ``slot=<n>,core=<n>,memory=<n>`` in any order;
  anything else raises :class:`ValidationError` (the scheduler fails the Filter call).
* Type selectors: comma lists matched as case-insensitive substrings of the device model;
  UUID selectors: comma lists matched exactly.  Items are trimmed, empty items skipped, and an
  empty list means "no constraint".
* ``nvidia.com/numa-bind``: Go ``ParseBool``; an unreadable value is false (with a warning).
* ``nvidia.com/vgpu-mode``: a device is accepted iff the annotation value contains its mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from hami_protocol import keys
from hami_protocol._goparse import INT64_MAX, parse_go_bool, parse_go_int
from hami_protocol.errors import ValidationError

__all__ = [
    "GPU_POLICY_NAMES",
    "NVIDIA_SELECTOR_KEYS",
    "SPREAD",
    "GpuPolicy",
    "NodePolicy",
    "PodPolicy",
    "ScoringWeights",
    "SelectorKeys",
    "mode_allowed",
    "parse_device_cordon",
    "parse_gpu_policy",
    "parse_list",
    "parse_node_policy",
    "parse_pod_policy",
    "parse_scoring_weights",
    "type_allowed",
    "uuid_allowed",
]

NodePolicy = Literal["binpack", "spread"]
GPU_POLICY_NAMES: Final = frozenset({"binpack", "spread", "topology-aware", "mutex", "numa"})
_SORT_KEYS: Final = frozenset({"binpack", "spread", "numa"})


@dataclass(frozen=True, slots=True)
class GpuPolicy:
    """A validated GPU policy: its entries in written order (one entry unless it is a chain)."""

    entries: tuple[str, ...]

    @property
    def sort_keys(self) -> tuple[str, ...]:
        """The entries that order devices (``binpack``/``spread``/``numa``), in order."""
        return tuple(entry for entry in self.entries if entry in _SORT_KEYS)

    @property
    def mutex(self) -> bool:
        return "mutex" in self.entries

    @property
    def topology_aware(self) -> bool:
        return "topology-aware" in self.entries

    @property
    def text(self) -> str:
        """The canonical annotation spelling (``binpack,numa``)."""
        return ",".join(self.entries)


SPREAD: Final = GpuPolicy(("spread",))


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """Weights of the slot / core / memory terms of the device score."""

    slot: int = 1
    core: int = 1
    memory: int = 1


@dataclass(frozen=True, slots=True)
class SelectorKeys:
    """Where one vendor keeps its device selectors (``None``: the vendor has no such key)."""

    use_type: str | None
    nouse_type: str | None
    use_uuid: str | None
    nouse_uuid: str | None
    numa_bind: str | None = None
    vgpu_mode: str | None = None


NVIDIA_SELECTOR_KEYS: Final = SelectorKeys(
    use_type=keys.NVIDIA_USE_GPUTYPE,
    nouse_type=keys.NVIDIA_NOUSE_GPUTYPE,
    use_uuid=keys.NVIDIA_USE_GPUUUID,
    nouse_uuid=keys.NVIDIA_NOUSE_GPUUUID,
    numa_bind=keys.NVIDIA_NUMA_BIND,
    vgpu_mode=keys.NVIDIA_VGPU_MODE,
)


def parse_list(value: str | None) -> tuple[str, ...]:
    """A comma list: items trimmed, empty items dropped, order kept."""
    if not value:
        return ()
    return tuple(item for item in (part.strip() for part in value.split(",")) if item)


def parse_device_cordon(value: str | None) -> frozenset[str]:
    """The UUIDs in a ``hami.io/device-cordon`` value (``"dev-1, "`` → ``{"dev-1"}``)."""
    return frozenset(parse_list(value))


def type_allowed(model: str, *, use: tuple[str, ...], nouse: tuple[str, ...]) -> bool:
    """Whether a device model passes the use/nouse type lists (case-insensitive substrings)."""
    folded = model.upper()
    if use and not any(item.upper() in folded for item in use):
        return False
    return not any(item.upper() in folded for item in nouse)


def uuid_allowed(uuid: str, *, use: tuple[str, ...], nouse: tuple[str, ...]) -> bool:
    """Whether a device UUID passes the use/nouse UUID lists (exact match)."""
    if use and uuid not in use:
        return False
    return uuid not in nouse


def mode_allowed(mode: str, vgpu_mode: str | None) -> bool:
    """Whether a device of ``mode`` is acceptable; ``None`` (no annotation) accepts all."""
    return vgpu_mode is None or mode in vgpu_mode


def parse_node_policy(value: str, *, key: str = keys.NODE_SCHEDULER_POLICY) -> NodePolicy:
    """``binpack`` or ``spread`` (trimmed); anything else raises :class:`ValidationError`."""
    name = value.strip()
    if name == "binpack":
        return "binpack"
    if name == "spread":
        return "spread"
    raise ValidationError(key, value, "node policy must be 'binpack' or 'spread'")


def parse_gpu_policy(value: str, *, key: str = keys.GPU_SCHEDULER_POLICY) -> GpuPolicy:
    """A policy or comma chain of known names; anything else raises :class:`ValidationError`."""
    entries = tuple(part.strip() for part in value.split(","))
    unknown = [entry for entry in entries if entry not in GPU_POLICY_NAMES]
    if unknown:
        raise ValidationError(
            key, value, f"unknown GPU policy {unknown[0]!r} (known: {sorted(GPU_POLICY_NAMES)})"
        )
    return GpuPolicy(entries)


def parse_scoring_weights(value: str, *, key: str = keys.DEVICE_SCORING_WEIGHTS) -> ScoringWeights:
    """``slot=<n>,core=<n>,memory=<n>``: all three, any order, non-negative, not all zero."""
    parts = value.split(",")
    if len(parts) != 3:
        raise ValidationError(key, value, "expected slot, core and memory weights")
    weights: dict[str, int] = {}
    for part in parts:
        name, sep, number = part.strip().partition("=")
        name = name.strip()
        if not sep:
            raise ValidationError(key, value, "expected key=value entries")
        if name in weights:
            raise ValidationError(key, value, f"duplicate {name!r} weight")
        weight = parse_go_int(number.strip(), low=-INT64_MAX - 1, high=INT64_MAX)
        if weight is None:
            raise ValidationError(key, value, f"{name!r} weight must be an integer")
        if weight < 0:
            raise ValidationError(key, value, f"{name!r} weight must not be negative")
        if name not in ("slot", "core", "memory"):
            raise ValidationError(key, value, f"unknown weight {name!r}")
        weights[name] = weight
    if not any(weights.values()):
        raise ValidationError(key, value, "at least one weight must be positive")
    return ScoringWeights(**weights)


@dataclass(frozen=True, slots=True)
class PodPolicy:
    """Every policy knob a pod set, with defaults applied."""

    node_policy: NodePolicy = "binpack"
    gpu_policy: GpuPolicy = SPREAD
    scoring_weights: ScoringWeights = ScoringWeights()
    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    numa_bind: bool = False
    vgpu_mode: str | None = None
    warnings: tuple[str, ...] = ()
    """Annotations that were ignored, one human-readable line each (for events and logs)."""

    def type_allowed(self, model: str) -> bool:
        return type_allowed(model, use=self.use_types, nouse=self.nouse_types)

    def uuid_allowed(self, uuid: str) -> bool:
        return uuid_allowed(uuid, use=self.use_uuids, nouse=self.nouse_uuids)

    def mode_allowed(self, mode: str) -> bool:
        return mode_allowed(mode, self.vgpu_mode)


def parse_pod_policy(
    annotations: Mapping[str, str],
    *,
    default_node_policy: NodePolicy = "binpack",
    default_gpu_policy: GpuPolicy = SPREAD,
    selector_keys: SelectorKeys = NVIDIA_SELECTOR_KEYS,
) -> PodPolicy:
    """Collect a pod's policy annotations.  Only invalid scoring weights raise."""
    warnings: list[str] = []

    node_policy = default_node_policy
    if (raw := annotations.get(keys.NODE_SCHEDULER_POLICY)) is not None:
        try:
            node_policy = parse_node_policy(raw)
        except ValidationError as exc:
            warnings.append(f"ignored {exc}; using {default_node_policy!r}")

    gpu_policy = default_gpu_policy
    if (raw := annotations.get(keys.GPU_SCHEDULER_POLICY)) is not None:
        try:
            gpu_policy = parse_gpu_policy(raw)
        except ValidationError as exc:
            warnings.append(f"ignored {exc}; using {default_gpu_policy.text!r}")

    weights = ScoringWeights()
    if (raw := annotations.get(keys.DEVICE_SCORING_WEIGHTS)) is not None:
        weights = parse_scoring_weights(raw)

    def listed(key: str | None) -> tuple[str, ...]:
        return parse_list(annotations.get(key)) if key else ()

    numa_bind = False
    if selector_keys.numa_bind and (raw := annotations.get(selector_keys.numa_bind)) is not None:
        parsed = parse_go_bool(raw.strip())
        if parsed is None:
            warnings.append(f"ignored {selector_keys.numa_bind}={raw!r}: not a boolean")
        numa_bind = bool(parsed)

    vgpu_mode = annotations.get(selector_keys.vgpu_mode) if selector_keys.vgpu_mode else None
    return PodPolicy(
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        scoring_weights=weights,
        use_types=listed(selector_keys.use_type),
        nouse_types=listed(selector_keys.nouse_type),
        use_uuids=listed(selector_keys.use_uuid),
        nouse_uuids=listed(selector_keys.nouse_uuid),
        numa_bind=numa_bind,
        vgpu_mode=vgpu_mode,
        warnings=tuple(warnings),
    )
