"""The shape of a vendor row: :class:`Vendor` and, for vendors whose devices the scheduler
synthesises from node capacity, :class:`CapacitySpec`.

Rows are data; what differs between vendors beyond data is named by a small strategy word
(:attr:`Vendor.inventory`, :attr:`Vendor.health`, :attr:`Vendor.fit`,
:attr:`CapacitySpec.strategy`) that the scheduler maps to code.  Rows are built in
:mod:`hami_protocol.vendor.rows` and collected by
:func:`hami_protocol.vendor.table.vendors_from_config`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "CAPACITY_STRATEGIES",
    "FIT_STRATEGIES",
    "HEALTH_RULES",
    "INVENTORY_SOURCES",
    "CapacitySpec",
    "CapacityStrategy",
    "FitStrategy",
    "HealthRule",
    "InventorySource",
    "RegisterEncoding",
    "Vendor",
]

RegisterEncoding = Literal["json", "colon"]

InventorySource = Literal["register-json", "register-colon", "capacity", "vendor-annotation"]
"""Where a node's devices of this vendor come from:

* ``register-json`` / ``register-colon``: the vendor's device plugin writes
  :attr:`Vendor.register_key` (HAMi's JSON or colon encoding, :mod:`hami_protocol.node.registry`);
* ``capacity``: the scheduler synthesises them from ``status.capacity``
  (:attr:`Vendor.capacity`, :func:`hami_protocol.vendor.capacity.synthesize`);
* ``vendor-annotation``: the vendor's own node annotation :attr:`Vendor.inventory_key`, decoded
  by :func:`hami_protocol.vendor.annotations.decode_inventory`.
"""
INVENTORY_SOURCES: Final = ("register-json", "register-colon", "capacity", "vendor-annotation")

HealthRule = Literal["handshake", "capacity", "always", "reported"]
"""How HAMi decides the vendor's devices on a node are usable:

* ``handshake``: :attr:`Vendor.handshake_key` (``Requesting_<time>`` / ``Reported_<time>``;
  NVIDIA additionally watches its register annotation and allocatable count);
* ``capacity``: healthy iff the node's capacity of :attr:`Vendor.count_resource` is > 0 (AMD,
  Enflame GCU, MetaX whole GPU; AMD's cleanup deletes the register annotation);
* ``always``: HAMi never marks them unhealthy (Cambricon, Mthreads, Kunlun whole, AWS Neuron,
  Enflame DRS);
* ``reported``: each device's own ``healthy`` field in the vendor annotation (MetaX sGPU).
"""
HEALTH_RULES: Final = ("handshake", "capacity", "always", "reported")

FitStrategy = Literal[
    "nvidia",
    "standard",
    "ascend",
    "amd",
    "count-only",
    "exclusive",
    "kunlun",
    "kunlun-vxpu",
    "awsneuron",
    "enflame-drs",
    "metax-sgpu",
    "vastai",
]
"""The fit loop HAMi runs for the vendor (contract §0 "Standard Fit loop" and §1 "F")."""
FIT_STRATEGIES: Final = (
    "nvidia",
    "standard",
    "ascend",
    "amd",
    "count-only",
    "exclusive",
    "kunlun",
    "kunlun-vxpu",
    "awsneuron",
    "enflame-drs",
    "metax-sgpu",
    "vastai",
)

CapacityStrategy = Literal["per-unit", "per-device", "awsneuron"]
"""How capacity becomes devices:

* ``per-unit``: ``ceil(capacity(units_resource) / units_per_device)`` devices, memory split
  evenly: ``Devmem = capacity(memory_resource) × memory_unit_mib × units_per_device /
  capacity(units_resource)`` (Cambricon, Mthreads);
* ``per-device``: ``capacity(units_resource)`` devices with fixed figures (MetaX GPU, Kunlun
  whole, Enflame GCU);
* ``awsneuron``: ``capacity(units_resource)`` devices, each with
  ``capacity(cores_resource) / n`` NeuronCores: ``Count`` = cores, ``Devcore`` = the bitmask
  ``2^cores − 1``, ``Devmem`` 0.
"""
CAPACITY_STRATEGIES: Final = ("per-unit", "per-device", "awsneuron")


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    """The parameters HAMi's ``GetNodeDevices`` uses to synthesise a vendor's devices."""

    strategy: CapacityStrategy
    id_infix: str
    """Device IDs are ``<node>-<id_infix>-<i>`` (``cambricon-mlu``, ``mthreads``, ``metax``,
    ``kunlun``, ``GCU``, ``AWSNeuron``)."""
    device_type: str
    """``Type`` of every synthesised device."""
    units_resource: str
    """Capacity resource counted: devices (``per-device``, ``awsneuron``) or core units
    (``per-unit``: ``cambricon.com/mlu.smlu.vcore``, ``mthreads.com/sgpu-core``)."""
    memory_resource: str | None = None
    """Capacity resource holding the node's memory in :attr:`memory_unit_mib` (``per-unit``)."""
    cores_resource: str | None = None
    """Capacity resource holding the node's NeuronCores (``awsneuron``)."""
    units_per_device: int = 1
    count: int = 1
    """``Count`` (tasks per device); ignored by ``awsneuron`` (cores per device)."""
    devmem: int = 0
    """Fixed ``Devmem``; ignored by ``per-unit`` (derived) and ``awsneuron`` (0)."""
    devcore: int = 100
    """``Devcore``; ignored by ``awsneuron`` (the core bitmask)."""
    memory_unit_mib: int = 1
    split_numa: bool = False
    """NUMA 1 for the upper half of the devices (``i ≥ n // 2``; Kunlun's 8-slot board)."""
    device_vendor: str = ""
    """``devicevendor`` HAMi sets on the synthesised devices (empty where it sets none)."""
    default_cores_per_device: int = 2
    """``awsneuron``: cores per device when the core capacity is missing or zero."""


@dataclass(frozen=True, slots=True)
class Vendor:
    """One device vendor (or one chip family sharing a common word)."""

    common_word: str
    """Registry key and the ``Type`` written in pod device lists (``NVIDIA``, ``MLU``, ...)."""
    count_resource: str
    memory_resource: str | None = None
    memory_percentage_resource: str | None = None
    cores_resource: str | None = None
    priority_resource: str | None = None
    devices_to_allocate_key: str | None = None
    devices_allocated_key: str | None = None
    register_key: str | None = None
    """The HAMi register annotation; ``None`` for capacity- and vendor-annotation inventories."""
    register_encoding: RegisterEncoding | None = None
    handshake_key: str | None = None
    node_lock_key: str | None = None
    use_uuid_key: str | None = None
    nouse_uuid_key: str | None = None
    use_type_key: str | None = None
    nouse_type_key: str | None = None
    memory_unit_mib: int = 1
    """MiB per unit of ``memory_resource`` (MLU and Iluvatar 256, Mthreads 512, MetaX sGPU 1024)."""
    memory_factor: int = 1
    """Extra multiplier an operator sets so users may request memory in coarser units."""
    default_memory: int = 0
    """MiB assumed when a container names neither memory nor a percentage (NVIDIA only)."""
    default_cores: int = 0
    limits_only: bool = False
    """Read ``resources.limits`` only (AMD); others fall back to ``resources.requests``."""
    inventory: InventorySource = "register-json"
    inventory_key: str | None = None
    """The vendor's own node annotation when :attr:`inventory` is ``vendor-annotation``."""
    capacity: CapacitySpec | None = None
    """Synthesis parameters when :attr:`inventory` is ``capacity``."""
    health: HealthRule = "handshake"
    fit: FitStrategy = "standard"
    legacy_use_uuid_key: str | None = None
    """A second selector pair HAMi also honours (Kunlun: ``baidu.com/use-gpuuuid``)."""
    legacy_nouse_uuid_key: str | None = None

    @property
    def memory_scale(self) -> int:
        """MiB per unit of :attr:`memory_resource` as requests and quota limits count it: the
        vendor's unit times the memory factor (contract §0: HAMi scales quota limits by
        ``MemoryFactor``; requests and usage are MiB, so the limit takes the unit too)."""
        return self.memory_unit_mib * max(self.memory_factor, 1)

    @property
    def supports_percentage(self) -> bool:
        return self.memory_percentage_resource is not None

    @property
    def managed_resources(self) -> tuple[str, ...]:
        """The resource names that make a container this vendor's (priority excluded)."""
        names = (
            self.count_resource,
            self.memory_resource,
            self.memory_percentage_resource,
            self.cores_resource,
        )
        return tuple(name for name in names if name)

    @property
    def pod_device_keys(self) -> tuple[str, ...]:
        """The pod annotations that carry this vendor's device lists (to-allocate first)."""
        return tuple(k for k in (self.devices_to_allocate_key, self.devices_allocated_key) if k)
