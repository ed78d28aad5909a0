"""Each non-NVIDIA vendor's admission rules (HAMi's ``MutateAdmission`` per vendor), pure.

:class:`VendorRuleSet` is built once from the device config and the enabled vendor rows;
:func:`mutate_container` applies every vendor's rule to one container (editing it in place),
collects what the pod itself must get (:class:`PodEdits`: annotations, a runtime class) and
says whether the container asks for any of these vendors' devices.  A request a vendor refuses
raises :class:`VendorRuleError` with HAMi's words.

The rules (contract §1 "Webhook", HAMi's ``pkg/device/<vendor>``):

* **Ascend** (per enabled chip): a container without the chip's count while the chip has
  ``overwriteEnv`` gets ``ASCEND_VISIBLE_DEVICES=""`` (only when it asks for no Ascend chip at
  all; HAMi sets it per chip, blanking a container that uses another chip); ``Ascend910C`` with
  ``superPod``: a count of 1 becomes 2 (limits, and requests where set), another odd count is
  refused ``Ascend910C device request must be 1 or 2*n, got N``; the ``-core`` resource only
  with ``huawei.com/vnpu-mode: hami-core``; otherwise (template mode) memory rounds up to the
  smallest template that holds it, else to ``memoryAllocatable`` when it is within
  ``memoryCapacity``, else ``<memory resource> <v> is invalid``; more than one NPU with less
  than a whole card is refused ``vNPU not supported for multiple devices`` (a 910C superPod
  module, two NPUs, counts as one); the rounded memory (``memoryAllocatable`` when none was
  asked) is written to limits and requests (with a ``memoryFactor`` above 1 it is checked in
  MiB and left as written); the chip's ``runtimeClassName`` goes to a pod without one.
* **Iluvatar** (per enabled chip): count > 1 → the core limit is ``count × 100``; env
  ``SOL_CONTINER_NAME`` (HAMi's spelling) = the container's name unless already set.
* **Moore Threads**: count ≤ 0 refused ``<count> must be greater than 0``; count > 1 → cores
  ``16 × count``, memory ``96 × count`` (``96`` = ``memoryPerCard[0]``) and the pod annotation
  ``mthreads.com/request-gpu-num``; count 1 without memory → 16 / 96; a memory that is not a
  legal slice (2, 4, 8, 16, 32, 64 or a card size) is refused ``sGPU memory request value is
  invalid, valid values are [2, 4, 8, 16, 32, 64, 96]``.
* **Kunlunxin vXPU**: memory rounds up to 24576, 49152, else 98304 (limits and requests).
* **MetaX sGPU**: ``metax-tech.com/sgpu-app-class`` must be ``online``/``offline`` and asks for
  one device; unless online, ``metax-tech.com/sgpu-qos-policy`` defaults to ``best-effort`` and
  must be one of the three policies.
* **AWS Neuron**: counts and cores must be whole, positive and in range; cores above a device's
  two must be a multiple of two (HAMi's webhook knows no node, so it uses the default).
* **Enflame DRS**: the slice count must be positive; memory positive and core in (0, 100]; each
  given only in limits or only in requests is copied to the other.

Resources are read from limits, then requests (HAMi reads most of these from limits only).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hami_kube.objects import ContainerView
from hami_protocol import keys
from hami_protocol.config.ascend import AscendChipConfig
from hami_protocol.config.device import DeviceConfig
from hami_protocol.request.quantity import as_integer, json_quantity
from hami_protocol.vendor.table import (
    AWS_NEURON,
    ENFLAME_DRS,
    KUNLUN_VXPU,
    METAX_SGPU,
    MTHREADS,
    Vendor,
)
from hami_webhook.edits import (
    Sections,
    add_env_if_absent,
    present,
    raw_value,
    sections,
    set_env,
    set_limit,
    set_quantity,
    value,
)

__all__ = [
    "ASCEND_910C",
    "HAMI_CORE_MODE",
    "KUNLUN_VXPU_SIZES",
    "MTHREADS_CORES_PER_CARD",
    "MTHREADS_SLICES",
    "PodEdits",
    "VendorRuleError",
    "VendorRuleSet",
    "mutate_container",
    "vendor_rule_set",
]

ASCEND_910C: Final = "Ascend910C"
HAMI_CORE_MODE: Final = "hami-core"
KUNLUN_VXPU_SIZES: Final = (24576, 49152)
KUNLUN_VXPU_MAX: Final = 98304
MTHREADS_CORES_PER_CARD: Final = 16
MTHREADS_SLICES: Final = (2, 4, 8, 16, 32, 64)
"""Moore Threads memory slices below a whole card (512 MiB units)."""
METAX_APP_ONLINE: Final = "online"
INT32_MAX: Final = 2**31 - 1
AWS_DEFAULT_CORES_PER_DEVICE: Final = 2


class VendorRuleError(Exception):
    """A container's request breaks a vendor's admission rule (HAMi answers with code 500)."""

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AscendRule:
    vendor: Vendor
    chip: AscendChipConfig


@dataclass(frozen=True, slots=True)
class VendorRuleSet:
    """What the vendor rules depend on: the enabled rows and their config sections."""

    ascend: tuple[AscendRule, ...] = ()
    iluvatar: tuple[Vendor, ...] = ()
    mthreads: Vendor | None = None
    mthreads_memory_per_card: tuple[int, ...] = (96,)
    kunlun_vxpu: Vendor | None = None
    metax_sgpu: Vendor | None = None
    aws_neuron: Vendor | None = None
    enflame_drs: Vendor | None = None

    @property
    def ascend_counts(self) -> tuple[str, ...]:
        return tuple(rule.vendor.count_resource for rule in self.ascend)


def vendor_rule_set(config: DeviceConfig, vendors: tuple[Vendor, ...]) -> VendorRuleSet:
    """The rules of the vendors in ``vendors`` (Ascend/Iluvatar only when their rows exist)."""
    by_word = {row.common_word: row for row in vendors}
    ascend = tuple(
        AscendRule(by_word[chip.common_word], chip)
        for chip in config.vnpus.configs
        if chip.common_word in by_word and by_word[chip.common_word].fit == "ascend"
    )
    iluvatar = tuple(
        by_word[chip.common_word] for chip in config.iluvatars if chip.common_word in by_word
    )
    return VendorRuleSet(
        ascend=ascend,
        iluvatar=iluvatar,
        mthreads=by_word.get(MTHREADS),
        mthreads_memory_per_card=config.mthreads.memory_per_card or (96,),
        kunlun_vxpu=by_word.get(KUNLUN_VXPU),
        metax_sgpu=by_word.get(METAX_SGPU),
        aws_neuron=by_word.get(AWS_NEURON),
        enflame_drs=by_word.get(ENFLAME_DRS),
    )


@dataclass(slots=True)
class PodEdits:
    """What the pod (not one container) must get; applied once every container passed."""

    annotations: dict[str, str] = field(default_factory=dict)
    """Set (overwriting) on the pod."""
    default_annotations: dict[str, str] = field(default_factory=dict)
    """Set only where the pod has none."""
    runtime_class: str | None = None
    """The first vendor runtime class asked for; set only when the pod names none."""

    def annotation(self, pod_annotations: Mapping[str, str], key: str) -> str | None:
        """``key`` as the pod will hold it after these edits."""
        if key in self.annotations:
            return self.annotations[key]
        if key in pod_annotations:
            return pod_annotations[key]
        return self.default_annotations.get(key)


def mutate_container(
    ctr: dict[str, Any],
    pod_annotations: Mapping[str, str],
    rules: VendorRuleSet,
    edits: PodEdits,
) -> bool:
    """Apply every vendor's rule to ``ctr``; whether it asks for one of these vendors."""
    found = False
    for ascend in rules.ascend:
        found |= _ascend(ctr, pod_annotations, ascend, rules, edits)
    for row in rules.iluvatar:
        found |= _iluvatar(ctr, row)
    if rules.mthreads is not None:
        found |= _mthreads(ctr, rules.mthreads, rules.mthreads_memory_per_card, edits)
    if rules.kunlun_vxpu is not None:
        found |= _kunlun_vxpu(ctr, rules.kunlun_vxpu)
    if rules.metax_sgpu is not None:
        found |= _metax_sgpu(ctr, rules.metax_sgpu, pod_annotations, edits)
    if rules.aws_neuron is not None:
        found |= _aws_neuron(ctr, rules.aws_neuron)
    if rules.enflame_drs is not None:
        found |= _enflame_drs(ctr, rules.enflame_drs)
    return found


def _read(ctr: dict[str, Any]) -> Sections:
    return sections(ContainerView(ctr))


def _name(ctr: dict[str, Any]) -> str:
    name = ctr.get("name")
    return name if isinstance(name, str) else ""


# -- Ascend --------------------------------------------------------------------------------------


def ascend_memory(chip: AscendChipConfig, memory: int) -> int:
    """HAMi's ``trimMemory``: the smallest template ≥ ``memory``, else ``memoryAllocatable``
    when ``memory`` ≤ ``memoryCapacity``, else 0 (invalid)."""
    for template in chip.templates:
        if memory <= template.memory:
            return template.memory
    if memory <= chip.memory_capacity:
        return chip.memory_allocatable
    return 0


def _ascend(
    ctr: dict[str, Any],
    pod_annotations: Mapping[str, str],
    rule: AscendRule,
    rules: VendorRuleSet,
    edits: PodEdits,
) -> bool:
    vendor, chip = rule.vendor, rule.chip
    where = _read(ctr)
    count = value(where, vendor.count_resource)
    if count is None:
        if chip.overwrite_env and not any(present(where, n) for n in rules.ascend_counts):
            set_env(ctr, keys.ASCEND_VISIBLE_DEVICES_ENV, "")
        return False
    container = _name(ctr)
    if chip.common_word == ASCEND_910C and chip.super_pod:
        if count == 1:
            set_limit(ctr, vendor.count_resource, 2)
            if vendor.count_resource in where[1]:
                set_quantity(ctr, "requests", vendor.count_resource, "2")
        elif count % 2:
            raise VendorRuleError(
                f"Ascend910C device request must be 1 or 2*n, got {count}",
                container=container,
                resource=vendor.count_resource,
                value=count,
            )
    hami_core = pod_annotations.get(keys.ASCEND_VNPU_MODE) == HAMI_CORE_MODE
    if not hami_core and present(where, chip.resource_core_name):
        raise VendorRuleError(
            f"{chip.resource_core_name} is only supported in {HAMI_CORE_MODE} mode "
            f"(pod annotation {keys.ASCEND_VNPU_MODE}: {HAMI_CORE_MODE})",
            container=container,
            resource=chip.resource_core_name,
        )
    if chip.runtime_class_name and edits.runtime_class is None:
        edits.runtime_class = chip.runtime_class_name
    if hami_core:
        return True
    memory_name = vendor.memory_resource
    memory = value(where, memory_name)
    factor = max(chip.memory_factor, 1)
    trimmed = chip.memory_allocatable
    if memory is not None:
        trimmed = ascend_memory(chip, memory * factor)
        if trimmed <= 0:
            raise VendorRuleError(
                f"{memory_name} {memory} is invalid",
                container=container,
                resource=memory_name,
                value=memory,
            )
    # One Ascend910C module is two NPUs: asking for it (1, made 2 above, or 2) is one device.
    module = 2 if chip.common_word == ASCEND_910C and chip.super_pod else 1
    if count > module and trimmed != chip.memory_allocatable:
        raise VendorRuleError(
            "vNPU not supported for multiple devices",
            container=container,
            resource=memory_name,
            value=memory,
        )
    # With a memoryFactor the request is in coarser units than the templates; it is checked but
    # left as written (rewriting it rounded would not be stable under re-admission).
    if memory_name and trimmed > 0 and factor == 1:
        set_quantity(ctr, "limits", memory_name, str(trimmed))
        set_quantity(ctr, "requests", memory_name, str(trimmed))
    return True


# -- Iluvatar ------------------------------------------------------------------------------------


def _iluvatar(ctr: dict[str, Any], vendor: Vendor) -> bool:
    where = _read(ctr)
    count = value(where, vendor.count_resource)
    if count is None:
        return False
    if count > 1 and vendor.cores_resource:
        set_limit(ctr, vendor.cores_resource, count * 100)
    name = _name(ctr)
    if name:
        add_env_if_absent(ctr, keys.ILUVATAR_CONTAINER_NAME_ENV, name)
    return True


# -- Moore Threads -------------------------------------------------------------------------------


def mthreads_legal_memory(memory_per_card: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(sorted({*MTHREADS_SLICES, *memory_per_card}))


def _mthreads(
    ctr: dict[str, Any], vendor: Vendor, memory_per_card: tuple[int, ...], edits: PodEdits
) -> bool:
    where = _read(ctr)
    count = value(where, vendor.count_resource)
    if count is None:
        return False
    container = _name(ctr)
    if count <= 0:
        raise VendorRuleError(
            f"{vendor.count_resource} must be greater than 0",
            container=container,
            resource=vendor.count_resource,
            value=count,
        )
    card = memory_per_card[0]
    cores, memory = vendor.cores_resource, vendor.memory_resource
    if count > 1:
        if cores:
            set_limit(ctr, cores, count * MTHREADS_CORES_PER_CARD)
        if memory:
            set_limit(ctr, memory, count * card)
        edits.annotations[keys.MTHREADS_REQUEST_GPU_NUM] = str(count)
        return True
    asked = value(where, memory)
    if asked is None:
        if cores:
            set_limit(ctr, cores, MTHREADS_CORES_PER_CARD)
        if memory:
            set_limit(ctr, memory, card)
        return True
    legal = mthreads_legal_memory(memory_per_card)
    if asked not in legal:
        shown = ", ".join(str(size) for size in legal)
        raise VendorRuleError(
            f"sGPU memory request value is invalid, valid values are [{shown}]",
            container=container,
            resource=memory,
            value=asked,
        )
    return True


# -- Kunlunxin vXPU ------------------------------------------------------------------------------


def kunlun_vxpu_memory(memory: int) -> int:
    """HAMi's ``trimMemory``: 24576, 49152, else 98304 MiB."""
    for size in KUNLUN_VXPU_SIZES:
        if memory <= size:
            return size
    return KUNLUN_VXPU_MAX


def _kunlun_vxpu(ctr: dict[str, Any], vendor: Vendor) -> bool:
    where = _read(ctr)
    if not present(where, vendor.count_resource):
        return False
    memory = value(where, vendor.memory_resource)
    if memory is not None and vendor.memory_resource:
        text = str(kunlun_vxpu_memory(memory))
        set_quantity(ctr, "limits", vendor.memory_resource, text)
        set_quantity(ctr, "requests", vendor.memory_resource, text)
    return True


# -- MetaX sGPU ----------------------------------------------------------------------------------


def _metax_sgpu(
    ctr: dict[str, Any], vendor: Vendor, pod_annotations: Mapping[str, str], edits: PodEdits
) -> bool:
    where = _read(ctr)
    count = value(where, vendor.count_resource)
    if count is None:
        return False
    container = _name(ctr)
    app_class = edits.annotation(pod_annotations, keys.METAX_SGPU_APP_CLASS)
    if app_class is not None:
        if app_class not in keys.METAX_APP_CLASSES:
            raise VendorRuleError(
                f"{keys.METAX_SGPU_APP_CLASS} must be set one of [online, offline]",
                container=container,
                annotation=keys.METAX_SGPU_APP_CLASS,
                value=app_class,
            )
        if count != 1:
            raise VendorRuleError(
                "app-class pod must request single device", container=container, value=count
            )
    if app_class != METAX_APP_ONLINE:
        qos = edits.annotation(pod_annotations, keys.METAX_SGPU_QOS_POLICY)
        if qos is None:
            edits.default_annotations[keys.METAX_SGPU_QOS_POLICY] = keys.METAX_QOS_BEST_EFFORT
        elif qos not in keys.METAX_QOS_POLICIES:
            raise VendorRuleError(
                f"{keys.METAX_SGPU_QOS_POLICY} must be set one of "
                f"[{', '.join(keys.METAX_QOS_POLICIES)}]",
                container=container,
                annotation=keys.METAX_SGPU_QOS_POLICY,
                value=qos,
            )
    return True


# -- AWS Neuron ----------------------------------------------------------------------------------


def _whole(where: Sections, name: str, maximum: int, container: str) -> int:
    raw = raw_value(where, name)
    number = as_integer(json_quantity(raw, key=name))
    if number is None:
        raise VendorRuleError(f"{name} must be an integer", container=container, value=raw)
    if number <= 0:
        raise VendorRuleError(f"{name} must be greater than 0", container=container, value=raw)
    if number > maximum:
        raise VendorRuleError(f"{name} must not exceed {maximum}", container=container, value=raw)
    return number


def _aws_neuron(ctr: dict[str, Any], vendor: Vendor) -> bool:
    where = _read(ctr)
    container = _name(ctr)
    if present(where, vendor.count_resource):
        _whole(where, vendor.count_resource, INT32_MAX, container)
        return True
    cores_name = vendor.cores_resource
    if not cores_name or not present(where, cores_name):
        return False
    per_device = AWS_DEFAULT_CORES_PER_DEVICE
    cores = _whole(where, cores_name, INT32_MAX * per_device, container)
    if cores > per_device and cores % per_device:
        raise VendorRuleError(
            f"{cores_name} must be 1 or a multiple of {per_device}, got {cores}",
            container=container,
            value=cores,
        )
    return True


# -- Enflame DRS ---------------------------------------------------------------------------------


def _mirror(ctr: dict[str, Any], where: Sections, name: str) -> None:
    """Copy ``name`` into whichever of limits/requests lacks it (HAMi's DRS webhook)."""
    limits, requests = where
    raw = limits.get(name, requests.get(name))
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        return
    text = raw if isinstance(raw, str) else str(raw)
    if name not in limits:
        set_quantity(ctr, "limits", name, text)
    if name not in requests:
        set_quantity(ctr, "requests", name, text)


def _enflame_drs(ctr: dict[str, Any], vendor: Vendor) -> bool:
    where = _read(ctr)
    container = _name(ctr)
    count_name = vendor.count_resource
    count = value(where, count_name)
    if count is not None:
        if count <= 0:
            raise VendorRuleError(
                f"{count_name} must be greater than 0", container=container, value=count
            )
        _mirror(ctr, where, count_name)
        return True
    memory_name, core_name = vendor.memory_resource, vendor.cores_resource
    memory, core = value(where, memory_name), value(where, core_name)
    if memory is None and core is None:
        return False
    if memory is not None and memory <= 0:
        raise VendorRuleError(
            f"{memory_name} must be greater than 0", container=container, value=memory
        )
    if core is not None and not 0 < core <= 100:
        raise VendorRuleError(
            f"{core_name} must be in range (0,100]", container=container, value=core
        )
    for name in (memory_name, core_name):
        if name and present(where, name):
            _mirror(ctr, _read(ctr), name)
    return True
