"""How each vendor's device plugin meets HAMi: one frozen :class:`Profile` per common word.

A profile is the vendor's row of :mod:`hami_protocol.vendor.table` (resources, where the
inventory comes from — ``register-json``/``register-colon`` with a handshake, ``capacity``, or the
vendor's own annotation — the pod device lists and the node lock) plus what only the plugin
stand-in needs: how the plugin tells that a pod waits for it (HAMi's ``bind-phase``, Cambricon's
``CAMBRICON_DSMLU_ASSIGNED``, Enflame's ``gcu-assigned``, AWS's ``NEURON_ALLOCATED``), the
handshake text it writes (Ascend's ``Reported_<2006.01.02 15:04:05>``), the device shape it
defaults to, and which other pod annotations it reads.  Facts from
``contracts/hami-extensions.md`` §0–§1.  Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from hami_protocol import keys
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.vendor.table import NVIDIA, Vendor, vendors_from_config

__all__ = [
    "ASCEND_FAMILY",
    "BindMarker",
    "HandshakeStyle",
    "Profile",
    "VendorUnknownError",
    "known_words",
    "profile_for",
]

HandshakeStyle = Literal["reported", "ascend"]
"""``Reported <2006-01-02 15:04:05>`` (HAMi's vendor plugins) or Ascend's
``Reported_<2006.01.02 15:04:05>``."""

ASCEND_FAMILY: Final = "Ascend"


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
    row: Vendor
    marker: BindMarker | None = None
    handshake_style: HandshakeStyle = "reported"
    default_type: str = ""
    default_memory_mib: int = 0
    default_cores: int = 100
    pod_key_prefixes: tuple[str, ...] = ()
    """Other pod annotations the plugin reads, by prefix (``CAMBRICON_``, ``NEURON_`` …)."""
    checks_cores: bool = True
    """Whether a device's cores bound the sum of its holders' cores (AWS counts a bitmask and
    Enflame DRS slices instead)."""
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def word(self) -> str:
        return self.row.common_word

    @property
    def inventory(self) -> str:
        return self.row.inventory

    @property
    def count_resource(self) -> str:
        return self.row.count_resource

    @property
    def memory_resource(self) -> str | None:
        return self.row.memory_resource

    @property
    def cores_resource(self) -> str | None:
        return self.row.cores_resource

    @property
    def memory_unit_mib(self) -> int:
        return self.row.memory_scale

    @property
    def register_key(self) -> str | None:
        """The node annotation holding the inventory (HAMi's register or the vendor's own)."""
        return self.row.register_key or self.row.inventory_key

    @property
    def handshake_key(self) -> str | None:
        return self.row.handshake_key

    @property
    def to_allocate_key(self) -> str | None:
        return self.row.devices_to_allocate_key

    @property
    def allocated_key(self) -> str | None:
        return self.row.devices_allocated_key

    @property
    def lock_key(self) -> str | None:
        return self.row.node_lock_key

    def device_id(self, node: str, index: int) -> str:
        """What a capacity-synthesised device is called (``<node>-<infix>-<i>``)."""
        infix = self.row.capacity.id_infix if self.row.capacity else self.word
        return f"{node}-{infix}-{index}"


def _rows() -> tuple[Vendor, ...]:
    config = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    rows = vendors_from_config(config, enable_ascend=True, enable_iluvatar=True)
    return tuple(row for row in rows if row.common_word != NVIDIA)


_ROWS: Final = {row.common_word: row for row in _rows()}

# What each plugin does beyond its row: the shape of its default device and how it knows a pod.
_EXTRAS: Final[Mapping[str, Mapping[str, object]]] = {
    "DCU": {"default_type": "DCU-Z100", "default_memory_mib": 65520},
    "AMD": {
        "default_type": "AMD_Instinct_MI300X_VF",
        "default_memory_mib": 196608,
        "default_cores": 304,
    },
    "MLU": {
        "marker": BindMarker(keys.CAMBRICON_DSMLU_ASSIGNED, "false", "true"),
        "pod_key_prefixes": ("CAMBRICON_",),
        "default_memory_mib": 24576,
    },
    "Mthreads": {
        "default_type": "MTT S4000",
        "default_memory_mib": 49152,
        "default_cores": 16,
        "pod_key_prefixes": ("mthreads.com/",),
    },
    "Metax-GPU": {"default_memory_mib": 65536},
    "Metax-SGPU": {"default_type": "MXC500", "default_memory_mib": 65536},
    "kunlun": {"default_memory_mib": 98304, "pod_key_prefixes": (keys.KUNLUN_DEVICE_IDX,)},
    "XPU": {"default_type": "KunlunXPU-P800", "default_memory_mib": 98304},
    "GCU": {"default_memory_mib": 100},
    "Enflame": {
        "marker": BindMarker(keys.ENFLAME_GCU_ASSIGNED, "false", "true"),
        "default_memory_mib": 49152,
        "checks_cores": False,
        "pod_key_prefixes": (keys.ENFLAME_ASSIGNED_CONTAINERS,),
    },
    "AWSNeuron": {
        "marker": BindMarker(keys.AWS_NEURON_ALLOCATED, "false", "true"),
        "default_cores": 2,
        "checks_cores": False,
        "pod_key_prefixes": ("AWS_", "NEURON_"),
    },
    "Biren": {"default_type": "Biren-BR106", "default_memory_mib": 65536},
    "Vastai": {"default_type": "Vastai-VA1L", "default_memory_mib": 16384},
}


def profile_for(word: str) -> Profile:
    """The profile of common word ``word``; :class:`VendorUnknownError` when none answers."""
    row = _ROWS.get(word)
    if row is None:
        raise VendorUnknownError(word)
    base = Profile(
        row=row,
        marker=_HAMI_BIND if row.node_lock_key == keys.NODE_LOCK else None,
        default_type=row.capacity.device_type if row.capacity else word,
    )
    if word.startswith(ASCEND_FAMILY):
        return replace(
            base,
            handshake_style="ascend",
            default_memory_mib=65536,
            pod_key_prefixes=(keys.ASCEND_PREDICATE_TIME,),
        )
    extras = _EXTRAS.get(word)
    if extras is None:  # an Iluvatar chip
        return replace(base, default_memory_mib=32768)
    return replace(base, **extras)  # type: ignore[arg-type]


def known_words() -> tuple[str, ...]:
    """Every common word a stand-in exists for (the chart's Ascend and Iluvatar chips too)."""
    return tuple(_ROWS)
