"""The pod annotations vendor device plugins read besides HAMi's device lists.

HAMi's scheduler writes, with a placement, values each vendor's own plugin consumes
(hami-extensions §1.2 ``P``):

* Cambricon (``MLU``): ``CAMBRICON_DSMLU_ASSIGNED`` = ``false`` and ``CAMBRICON_DSMLU_PROFILE`` =
  ``<index>_<cores>_<memory / 256>`` of the first container's first MLU;
* Moore Threads: ``mthreads.com/gpu-index`` (device indices, comma-joined),
  ``mthreads.com/predicate-time`` (unix ns) and ``mthreads.com/predicate-node``;
* Ascend (``Ascend…`` words): ``huawei.com/<word>`` = JSON ``[{"UUID","temp","memory","core"}]``
  per device of the pod (``temp``: the chip's smallest template whose memory covers the grant —
  :attr:`BindFacts.ascend_templates`, HAMi's ``trimMemory`` — empty above every template, a
  whole card, or in hami-core mode) and
  ``predicate-time`` (unix s);
* Kunlun whole XPUs (``kunlun``): ``BAIDU_COM_DEVICE_IDX`` = comma-joined device indices;
* AWS Neuron (``AWSNeuron``): ``AWS_NEURON_IDS`` — the device indices, or for a pod asking
  NeuronCores (:attr:`BindFacts.aws_core_resource`) the core indices
  ``cores_per_device × index + bit`` of every bit of each grant's core mask — comma-joined;
  ``NEURON_RESOURCE_TYPE`` (the core resource, core requests only), ``NEURON_ALLOC_TIME`` (unix
  ns), ``NEURON_ALLOCATED`` = ``false``, ``aws.amazon.com/predicate-node``;
* MetaX sGPU (``Metax-SGPU``): ``metax-tech.com/gpu-devices-allocated`` = JSON, per container
  (init first, ``[]`` for one without sGPUs) the list ``[{"uuid","compute","vRam"}]`` of its
  grants, and ``metax-tech.com/predicate-time`` (unix ns);
* Enflame DRS (``Enflame``): ``enflame.com/gcu-assigned`` = ``false``,
  ``enflame.com/gcu-assigned-time`` (unix ns), ``assigned-containers`` = JSON
  ``{container: {"allocated": false, "request": S, "profileID", "profileName"}}``, and — comma-
  joined over the containers in order — ``enflame.com/gcu-assigned-index`` (device index),
  ``…-id`` (device id), ``…-minor`` (the device's minor) and ``enflame.com/gcu-request-size``
  (the profile's slices S).  A grant's profile is the node's profile with the grant's memory
  (GB × 1024) and core share (:attr:`BindFacts.drs_profiles`).

A device's index is the number after the last ``-`` of its id: HAMi's ids for capacity-synthesised
devices end so (``<node>-cambricon-mlu-3``), and its builders read the index the same way; an id
without one reads as index 0.

:func:`vendor_pod_annotations` is the one entry point: ``(word, pod devices of that word, node,
unix seconds[, facts]) → annotations`` (empty for vendors that write nothing more).
:class:`BindFacts` carries what some builders need beyond the devices (container names, Ascend
templates, AWS cores per device, Enflame profiles and minors); its defaults suit the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from hami_protocol import keys
from hami_protocol.pod.devices import ContainerDevice, ContainerDevices

__all__ = [
    "ASCEND_PREDICATE_TIME",
    "CAMBRICON_DSMLU_ASSIGNED",
    "CAMBRICON_DSMLU_PROFILE",
    "KUNLUN_DEVICE_IDX",
    "MTHREADS_GPU_INDEX",
    "MTHREADS_PREDICATE_NODE",
    "MTHREADS_PREDICATE_TIME",
    "NO_BIND_FACTS",
    "BindFacts",
    "DrsGrantProfile",
    "ascend_annotations",
    "ascend_template",
    "awsneuron_annotations",
    "cambricon_annotations",
    "device_index",
    "drs_grant_profile",
    "enflame_drs_annotations",
    "kunlun_annotations",
    "metax_sgpu_annotations",
    "mthreads_annotations",
    "vendor_pod_annotations",
    "writes_annotations",
]

CAMBRICON_DSMLU_ASSIGNED: Final = "CAMBRICON_DSMLU_ASSIGNED"
CAMBRICON_DSMLU_PROFILE: Final = "CAMBRICON_DSMLU_PROFILE"
CAMBRICON_MEMORY_UNIT_MIB: Final = 256
MTHREADS_GPU_INDEX: Final = "mthreads.com/gpu-index"
MTHREADS_PREDICATE_TIME: Final = "mthreads.com/predicate-time"
MTHREADS_PREDICATE_NODE: Final = "mthreads.com/predicate-node"
ASCEND_PREDICATE_TIME: Final = "predicate-time"
ASCEND_RESOURCE_PREFIX: Final = "huawei.com/"
KUNLUN_DEVICE_IDX: Final = "BAIDU_COM_DEVICE_IDX"

_NS: Final = 1_000_000_000
_MIB_PER_GB: Final = 1024


@dataclass(frozen=True, slots=True)
class DrsGrantProfile:
    """One Enflame DRS profile of the node, as the annotations name it."""

    name: str
    """``<S>g.<M>gb``."""
    profile_id: str
    slices: int
    memory_gb: int
    core_percent: int


def _no_text() -> Mapping[str, str]:
    return MappingProxyType({})


@dataclass(frozen=True, slots=True)
class BindFacts:
    """What some vendors' annotations need besides the devices (module doc)."""

    containers: tuple[str, ...] = ()
    """Container names, init containers first (the order of the pod's device lists)."""
    now_ns: int | None = None
    """The time in unix ns (default: the call's ``now_unix`` × 10⁹)."""
    ascend_templates: tuple[tuple[str, int], ...] = ()
    """Ascend: the chip's templates as ``(name, memory MiB)``."""
    ascend_hami_core: bool = False
    """Ascend: the pod runs in hami-core mode (no template: ``temp`` empty)."""
    aws_core_resource: str = ""
    """AWS Neuron: the core resource name when the pod asks NeuronCores (empty: whole devices)."""
    aws_cores_per_device: Mapping[str, int] = field(default_factory=dict, hash=False)
    """AWS Neuron: device id → its NeuronCores."""
    drs_profiles: tuple[DrsGrantProfile, ...] = ()
    """Enflame DRS: the node's profiles."""
    drs_minors: Mapping[str, str] = field(default_factory=_no_text, hash=False)
    """Enflame DRS: device id → its ``minor``."""


NO_BIND_FACTS: Final = BindFacts()

Builder = Callable[[str, Sequence[ContainerDevices], str, int, BindFacts], dict[str, str]]


def device_index(uuid: str) -> int:
    """The index HAMi reads from a device id: the number after its last ``-`` (else 0)."""
    tail = uuid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _devices(pod: Sequence[ContainerDevices]) -> list[ContainerDevice]:
    return [device for container in pod for device in container]


def _indices(pod: Sequence[ContainerDevices]) -> str:
    return ",".join(str(device_index(device.uuid)) for device in _devices(pod))


def _now_ns(now_unix: int, facts: BindFacts) -> int:
    return now_unix * _NS if facts.now_ns is None else facts.now_ns


def cambricon_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    devices = _devices(pod)
    if not devices:
        return {}
    first = devices[0]
    profile = (
        f"{device_index(first.uuid)}_{first.usedcores}_{first.usedmem // CAMBRICON_MEMORY_UNIT_MIB}"
    )
    return {CAMBRICON_DSMLU_ASSIGNED: "false", CAMBRICON_DSMLU_PROFILE: profile}


def mthreads_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    if not _devices(pod):
        return {}
    return {
        MTHREADS_GPU_INDEX: _indices(pod),
        MTHREADS_PREDICATE_TIME: str(_now_ns(now_unix, facts)),
        MTHREADS_PREDICATE_NODE: node,
    }


def ascend_template(memory: int, facts: BindFacts) -> str:
    """The template a grant of ``memory`` MiB stands for — the smallest whose memory covers it,
    as HAMi's ``trimMemory`` — ``""`` above every template (a whole card) or in hami-core
    mode."""
    if facts.ascend_hami_core:
        return ""
    fitting = [(size, name) for name, size in facts.ascend_templates if memory <= size]
    return min(fitting)[1] if fitting else ""


def ascend_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    devices = _devices(pod)
    if not devices:
        return {}
    record = [
        {
            "UUID": d.uuid,
            "temp": ascend_template(d.usedmem, facts),
            "memory": d.usedmem,
            "core": d.usedcores,
        }
        for d in devices
    ]
    return {
        f"{ASCEND_RESOURCE_PREFIX}{word}": json.dumps(record, separators=(",", ":")),
        ASCEND_PREDICATE_TIME: str(now_unix),
    }


def kunlun_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    return {KUNLUN_DEVICE_IDX: _indices(pod)} if _devices(pod) else {}


def _mask_bits(mask: int) -> list[int]:
    return [bit for bit in range(mask.bit_length()) if mask >> bit & 1]


def awsneuron_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    devices = _devices(pod)
    if not devices:
        return {}
    ids: list[str] = []
    for device in devices:
        index = device_index(device.uuid)
        if not facts.aws_core_resource:
            ids.append(str(index))
            continue
        per_device = facts.aws_cores_per_device.get(device.uuid, 0)
        ids += [str(per_device * index + bit) for bit in _mask_bits(device.usedcores)]
    written = {
        keys.AWS_NEURON_IDS: ",".join(ids),
        keys.AWS_NEURON_ALLOC_TIME: str(_now_ns(now_unix, facts)),
        keys.AWS_NEURON_ALLOCATED: "false",
        keys.AWS_NEURON_PREDICATE_NODE: node,
    }
    if facts.aws_core_resource:
        written[keys.AWS_NEURON_RESOURCE_TYPE] = facts.aws_core_resource
    return written


def metax_sgpu_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    if not _devices(pod):
        return {}
    allocated = [
        [{"uuid": d.uuid, "compute": d.usedcores, "vRam": d.usedmem} for d in container]
        for container in pod
    ]
    return {
        keys.METAX_GPU_DEVICES_ALLOCATED: json.dumps(allocated, separators=(",", ":")),
        keys.METAX_PREDICATE_TIME: str(_now_ns(now_unix, facts)),
    }


def drs_grant_profile(device: ContainerDevice, facts: BindFacts) -> DrsGrantProfile | None:
    """The node's DRS profile a grant stands for: its memory and core share, first in order."""
    for profile in facts.drs_profiles:
        if (
            profile.memory_gb * _MIB_PER_GB == device.usedmem
            and profile.core_percent == device.usedcores
        ):
            return profile
    return None


def enflame_drs_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    if not _devices(pod):
        return {}
    assigned: dict[str, dict[str, object]] = {}
    indices: list[str] = []
    ids: list[str] = []
    minors: list[str] = []
    sizes: list[str] = []
    for position, container in enumerate(pod):
        for device in container:
            profile = drs_grant_profile(device, facts)
            slices = profile.slices if profile is not None else 0
            name = facts.containers[position] if position < len(facts.containers) else ""
            assigned[name or str(position)] = {
                "allocated": False,
                "request": slices,
                "profileID": profile.profile_id if profile is not None else "",
                "profileName": profile.name if profile is not None else "",
            }
            index = device_index(device.uuid)
            indices.append(str(index))
            ids.append(device.uuid)
            minors.append(facts.drs_minors.get(device.uuid, str(index)))
            sizes.append(str(slices))
    return {
        keys.ENFLAME_GCU_ASSIGNED: "false",
        keys.ENFLAME_GCU_ASSIGNED_TIME: str(_now_ns(now_unix, facts)),
        keys.ENFLAME_ASSIGNED_CONTAINERS: json.dumps(assigned, separators=(",", ":")),
        keys.ENFLAME_GCU_ASSIGNED_INDEX: ",".join(indices),
        keys.ENFLAME_GCU_ASSIGNED_ID: ",".join(ids),
        keys.ENFLAME_GCU_ASSIGNED_MINOR: ",".join(minors),
        keys.ENFLAME_GCU_REQUEST_SIZE: ",".join(sizes),
    }


_BY_WORD: Final[Mapping[str, Builder]] = {
    "MLU": cambricon_annotations,
    "Mthreads": mthreads_annotations,
    "kunlun": kunlun_annotations,
    "AWSNeuron": awsneuron_annotations,
    "Metax-SGPU": metax_sgpu_annotations,
    "Enflame": enflame_drs_annotations,
}
_BY_PREFIX: Final[tuple[tuple[str, Builder], ...]] = (("Ascend", ascend_annotations),)


def vendor_pod_annotations(
    word: str,
    pod: Sequence[ContainerDevices],
    *,
    node: str,
    now_unix: int,
    facts: BindFacts = NO_BIND_FACTS,
) -> dict[str, str]:
    """The annotations vendor ``word``'s plugin reads for the pod's devices (module doc)."""
    builder = _BY_WORD.get(word)
    if builder is None:
        builder = next((b for prefix, b in _BY_PREFIX if word.startswith(prefix)), None)
    return {} if builder is None else builder(word, pod, node, now_unix, facts)


def writes_annotations(word: str) -> bool:
    """Whether vendor ``word``'s plugin reads annotations :func:`vendor_pod_annotations` writes."""
    return word in _BY_WORD or any(word.startswith(prefix) for prefix, _ in _BY_PREFIX)
