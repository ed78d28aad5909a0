"""How each vendor's device plugin meets HAMi: one frozen :class:`Profile` per common word.

A profile says where the plugin publishes its inventory (``register``: a ``hami.io`` register
annotation, JSON or colon, with a handshake; ``capacity``: kubelet resources the scheduler turns
into devices; ``annotation``: the vendor's own node annotation), which kubelet resources it
serves, which pod annotations it reads at ``Allocate`` (the ``-devices-to-allocate`` list it
consumes, or only the ``-allocated`` one), how it tells that a pod is waiting for it (HAMi's
``bind-phase``, Cambricon's ``CAMBRICON_DSMLU_ASSIGNED``, Enflame's ``gcu-assigned``) and which
node lock it releases.  Facts from ``contracts/hami-extensions.md`` §0–§1.

Rows come from :mod:`hami_protocol.vendor.table` where it has one (keys, resources); the vendors
the table does not list yet get their keys from the :mod:`hami_protocol.keys` patterns, and the
few vendor-specific names below (``_KUNLUN_ALLOCATED`` …) until the table carries them.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final, Literal

from hami_protocol import keys
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.pod.vendor_annotations import (
    ASCEND_PREDICATE_TIME,
    CAMBRICON_DSMLU_ASSIGNED,
)
from hami_protocol.vendor.table import Vendor, vendor_by_word, vendors_from_config

__all__ = [
    "ASCEND_FAMILY",
    "BindMarker",
    "HandshakeStyle",
    "InventorySource",
    "Profile",
    "VendorUnknownError",
    "known_words",
    "profile_for",
    "vendor_resources",
]

InventorySource = Literal["register", "capacity", "annotation"]
HandshakeStyle = Literal["reported", "ascend"]
"""``Reported <2006-01-02 15:04:05>`` (HAMi's vendor plugins) or Ascend's
``Reported_<2006.01.02 15:04:05>``."""

ASCEND_FAMILY: Final = "Ascend"

# Not in the vendor table yet (contracts/hami-extensions.md §1).
_KUNLUN_ALLOCATED: Final = "hami.io/kunlun-allocated"
_ENFLAME_DRS_CAPACITY: Final = "enflame.com/gcu-drs-capacity"
_ENFLAME_ASSIGNED: Final = "enflame.com/gcu-assigned"
_NEURON_ALLOCATED: Final = "NEURON_ALLOCATED"


class VendorUnknownError(ValueError):
    """No vendor plugin stand-in answers to this common word."""


@dataclass(frozen=True, slots=True)
class BindMarker:
    """The pod annotation a plugin reads to know a pod waits for it, and what it writes once the
    pod's devices are all given."""

    key: str
    waiting: str
    done: str


_HAMI_BIND: Final = BindMarker(keys.BIND_PHASE, keys.BIND_PHASE_ALLOCATING, keys.BIND_PHASE_SUCCESS)


@dataclass(frozen=True, slots=True)
class Profile:
    word: str
    """The vendor's common word (the ``Type`` family of its devices)."""
    inventory: InventorySource
    count_resource: str
    memory_resource: str | None = None
    memory_unit_mib: int = 1
    cores_resource: str | None = None
    register_key: str | None = None
    """The node annotation holding the inventory (register or the vendor's own)."""
    encoding: Literal["json", "colon", "vendor"] = "json"
    handshake_key: str | None = None
    handshake_style: HandshakeStyle = "reported"
    to_allocate_key: str | None = None
    allocated_key: str | None = None
    lock_key: str | None = None
    marker: BindMarker | None = None
    id_word: str = ""
    """What capacity-synthesized device IDs carry: ``<node>-<id_word>-<i>``."""
    default_type: str = ""
    default_memory_mib: int = 0
    default_cores: int = 100
    pod_key_prefixes: tuple[str, ...] = ()
    """Other pod annotations the plugin reads, by prefix (``CAMBRICON_``, ``NEURON_`` …)."""
    checks_cores: bool = True
    """Whether a device's cores bound the sum of its holders' cores (AWS counts a bitmask and
    Enflame DRS slices instead)."""

    def device_id(self, node: str, index: int) -> str:
        return f"{node}-{self.id_word}-{index}"


def _rows() -> tuple[Vendor, ...]:
    config = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    return vendors_from_config(config, enable_ascend=True, enable_iluvatar=True)


_ROWS: Final = _rows()


def _from_row(word: str, **extra: object) -> Profile:
    row = vendor_by_word(_ROWS, word)
    if row is None:
        raise VendorUnknownError(word)
    base = Profile(
        word=word,
        inventory="register",
        count_resource=row.count_resource,
        memory_resource=row.memory_resource,
        memory_unit_mib=row.memory_unit_mib * row.memory_factor,
        cores_resource=row.cores_resource,
        register_key=row.register_key,
        encoding=row.register_encoding or "json",
        handshake_key=row.handshake_key,
        to_allocate_key=row.devices_to_allocate_key,
        allocated_key=row.devices_allocated_key,
        lock_key=row.node_lock_key,
        marker=_HAMI_BIND if row.node_lock_key == keys.NODE_LOCK else None,
        default_type=word,
    )
    return replace(base, **extra)  # type: ignore[arg-type]


def _fixed() -> dict[str, Profile]:
    return {
        "DCU": _from_row("DCU", default_type="DCU-Z100", default_memory_mib=65520),
        "AMD": _from_row(
            "AMD",
            default_type="AMD_Instinct_MI300X_VF",
            default_memory_mib=196608,
            default_cores=304,
        ),
        "MLU": _from_row(
            "MLU",
            inventory="capacity",
            encoding="vendor",
            marker=BindMarker(CAMBRICON_DSMLU_ASSIGNED, "false", "true"),
            pod_key_prefixes=("CAMBRICON_",),
            id_word="cambricon-mlu",
            default_type="MLU",
            default_memory_mib=24576,
        ),
        "Mthreads": _from_row(
            "Mthreads",
            inventory="capacity",
            encoding="vendor",
            id_word="mthreads",
            default_type="MTT S4000",
            default_memory_mib=49152,
            default_cores=16,
        ),
        "Metax-GPU": _from_row(
            "Metax-GPU",
            inventory="capacity",
            encoding="vendor",
            id_word="metax",
            default_type="Metax-GPU",
            default_memory_mib=65536,
        ),
        "Metax-SGPU": _from_row(
            "Metax-SGPU",
            inventory="annotation",
            encoding="vendor",
            default_type="MXC500",
            default_memory_mib=65536,
        ),
        "kunlun": Profile(
            word="kunlun",
            inventory="capacity",
            count_resource="kunlunxin.com/xpu",
            allocated_key=_KUNLUN_ALLOCATED,
            pod_key_prefixes=("BAIDU_COM_",),
            encoding="vendor",
            id_word="kunlun",
            default_type="kunlun",
            default_memory_mib=98304,
        ),
        "XPU": Profile(
            word="XPU",
            inventory="register",
            count_resource="kunlunxin.com/vxpu",
            memory_resource="kunlunxin.com/vxpu-memory",
            register_key=keys.word_register_key("xpu"),
            handshake_key=keys.node_handshake_key("xpu"),
            to_allocate_key=keys.devices_to_allocate_key("xpu"),
            allocated_key=keys.devices_allocated_key("xpu"),
            lock_key=keys.NODE_LOCK,
            marker=_HAMI_BIND,
            default_type="KunlunXPU-P800",
            default_memory_mib=98304,
        ),
        "GCU": Profile(
            word="GCU",
            inventory="capacity",
            count_resource="enflame.com/gcu",
            to_allocate_key=keys.devices_to_allocate_key("enflame-gcu"),
            allocated_key=keys.devices_allocated_key("enflame-gcu"),
            encoding="vendor",
            id_word="GCU",
            default_type="GCU",
            default_memory_mib=100,
        ),
        "Enflame": Profile(
            word="Enflame",
            inventory="annotation",
            count_resource="enflame.com/drs-gcu",
            register_key=_ENFLAME_DRS_CAPACITY,
            encoding="vendor",
            allocated_key=keys.devices_allocated_key("enflame-vgpu"),
            marker=BindMarker(_ENFLAME_ASSIGNED, "false", "true"),
            id_word="enflame-drs",
            default_type="Enflame",
            default_memory_mib=49152,
            checks_cores=False,
        ),
        "AWSNeuron": Profile(
            word="AWSNeuron",
            inventory="capacity",
            count_resource="aws.amazon.com/neuron",
            cores_resource="aws.amazon.com/neuroncore",
            allocated_key=keys.devices_allocated_key("aws-neuron"),
            marker=BindMarker(_NEURON_ALLOCATED, "false", "true"),
            pod_key_prefixes=("AWS_", "NEURON_"),
            encoding="vendor",
            id_word="AWSNeuron",
            default_type="AWSNeuron",
            default_cores=2,
            checks_cores=False,
        ),
        "Biren": Profile(
            word="Biren",
            inventory="register",
            count_resource="birentech.com/gpu",
            register_key=keys.node_register_key("biren"),
            handshake_key=keys.node_handshake_key("biren"),
            to_allocate_key=keys.devices_to_allocate_key("Biren"),
            allocated_key=keys.devices_allocated_key("Biren"),
            lock_key=keys.NODE_LOCK,
            marker=_HAMI_BIND,
            default_type="Biren-BR106",
            default_memory_mib=65536,
        ),
        "Vastai": Profile(
            word="Vastai",
            inventory="register",
            count_resource="vastaitech.com/va",
            register_key=keys.node_register_key("va"),
            handshake_key=keys.node_handshake_key("va"),
            to_allocate_key=keys.devices_to_allocate_key("Vastai"),
            allocated_key=keys.devices_allocated_key("Vastai"),
            lock_key=keys.NODE_LOCK,
            marker=_HAMI_BIND,
            default_type="Vastai-VA1L",
            default_memory_mib=16384,
        ),
    }


_FIXED: Final = _fixed()


def _family(word: str) -> Profile | None:
    """Ascend and Iluvatar chips: one row per configured common word."""
    row = vendor_by_word(_ROWS, word)
    if row is None:
        return None
    if word.startswith(ASCEND_FAMILY):
        return _from_row(
            word,
            handshake_style="ascend",
            default_memory_mib=65536,
            pod_key_prefixes=(ASCEND_PREDICATE_TIME,),
        )
    if row.register_encoding == "colon":
        return _from_row(word, default_memory_mib=32768)
    return None


def profile_for(word: str) -> Profile:
    """The profile of common word ``word``; :class:`VendorUnknown` when none answers to it."""
    found = _FIXED.get(word) or _family(word)
    if found is None:
        raise VendorUnknownError(word)
    return found


def known_words() -> tuple[str, ...]:
    """Every common word a stand-in exists for (the chart's Ascend and Iluvatar chips too)."""
    family = [
        row.common_word
        for row in _ROWS
        if row.common_word not in _FIXED and _family(row.common_word)
    ]
    return (*_FIXED, *family)


def profiles_by_allocated_key() -> Mapping[str, Profile]:
    return {p.allocated_key: p for p in map(profile_for, known_words()) if p.allocated_key}


def vendor_resources() -> tuple[str, ...]:
    """Every container resource a vendor stand-in serves or the scheduler reads, sorted."""
    names: set[str] = set()
    for word in known_words():
        profile = profile_for(word)
        names.update(
            n
            for n in (profile.count_resource, profile.memory_resource, profile.cores_resource)
            if n
        )
    return tuple(sorted(names))
