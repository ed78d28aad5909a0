"""Devices synthesised from node capacity, as HAMi's ``GetNodeDevices`` does for the vendors
whose device plugins register no HAMi annotation (Cambricon, Moore Threads, MetaX whole GPUs,
Kunlunxin whole XPUs, Enflame whole GCUs, AWS Neuron).

Pure: :func:`synthesize` takes the node's name, its ``status.capacity`` and labels, and a row
whose :attr:`~hami_protocol.vendor.model.Vendor.capacity` says how (see
:class:`~hami_protocol.vendor.model.CapacitySpec`).  IDs are HAMi's exactly
(``<node>-cambricon-mlu-<i>``, ``<node>-mthreads-<i>``, ``<node>-metax-<i>``,
``<node>-kunlun-<i>``, ``<node>-GCU-<i>``, ``<node>-AWSNeuron-<i>``).

A node without the vendor's resource (absent or 0) has none of its devices: ``()``.  A quantity
that does not parse or is not a whole number, or a memory resource missing beside a core
count that needs it, raises :class:`ProtocolError` naming the resource, so the scheduler can
report that vendor on that node and keep the rest.

Two deliberate differences from HAMi: AWS Neuron's cores per device are computed per node
(HAMi caches the first node's figure for the whole process), and a node with neuron devices
but no core capacity gets the default two cores per device for ``Count`` as well as for the
bitmask (HAMi leaves ``Count`` 0 there, which makes the devices unusable).
"""

from __future__ import annotations

from collections.abc import Mapping

from hami_protocol import keys
from hami_protocol.errors import ValidationError
from hami_protocol.node.registry import EMPTY_CUSTOM_INFO, DeviceInfo, custom_info
from hami_protocol.request.quantity import INT32_MAX, as_integer, json_quantity
from hami_protocol.vendor.model import CapacitySpec, Vendor

__all__ = ["AWS_NODE_TYPE", "capacity_integer", "synthesize", "synthesize_spec"]

AWS_NODE_TYPE = "AWSNodeType"
"""Custom-info key of AWS Neuron devices: the node's ``node.kubernetes.io/instance-type``."""

_MAX_DEVICES = 4096
"""More devices than any node has; a larger capacity is refused rather than materialised."""


def capacity_integer(capacity: Mapping[str, object], resource: str | None) -> int:
    """The whole-number capacity of ``resource`` (0 when absent); ProtocolError if malformed."""
    if not resource:
        return 0
    raw = capacity.get(resource)
    if raw is None:
        return 0
    value = json_quantity(raw, key=resource)
    number = as_integer(value)
    if number is None or number < 0:
        raise ValidationError(resource, raw, "node capacity must be a non-negative whole number")
    return number


def synthesize(
    vendor: Vendor,
    node_name: str,
    capacity: Mapping[str, object],
    labels: Mapping[str, str] | None = None,
) -> tuple[DeviceInfo, ...]:
    """The devices of ``vendor`` on node ``node_name``; ``()`` when the vendor is not
    capacity-inventoried or the node has none."""
    if vendor.capacity is None:
        return ()
    return synthesize_spec(vendor.capacity, node_name, capacity, labels or {})


def synthesize_spec(
    spec: CapacitySpec,
    node_name: str,
    capacity: Mapping[str, object],
    labels: Mapping[str, str],
) -> tuple[DeviceInfo, ...]:
    units = capacity_integer(capacity, spec.units_resource)
    if units == 0:
        return ()
    if spec.strategy == "per-unit":
        return _per_unit(spec, node_name, units, capacity)
    _check_count(spec.units_resource, units, units)
    if spec.strategy == "awsneuron":
        return _awsneuron(spec, node_name, units, capacity, labels)
    return tuple(
        _device(
            spec,
            node_name,
            i,
            count=spec.count,
            devmem=spec.devmem,
            devcore=spec.devcore,
            numa=1 if spec.split_numa and i >= units // 2 else 0,
        )
        for i in range(units)
    )


def _check_count(resource: str, raw: object, devices: int) -> None:
    if devices > _MAX_DEVICES:
        raise ValidationError(resource, raw, f"node capacity means {devices} devices (too many)")


def _per_unit(
    spec: CapacitySpec, node_name: str, units: int, capacity: Mapping[str, object]
) -> tuple[DeviceInfo, ...]:
    devices = -(-units // spec.units_per_device)
    _check_count(spec.units_resource, units, devices)
    if not spec.memory_resource or capacity.get(spec.memory_resource) is None:
        raise ValidationError(
            spec.memory_resource or spec.units_resource,
            None,
            f"node has {spec.units_resource} capacity {units} but no memory capacity",
        )
    memory = capacity_integer(capacity, spec.memory_resource)
    devmem = memory * spec.memory_unit_mib * spec.units_per_device // units
    if devmem > INT32_MAX:
        raise ValidationError(
            spec.memory_resource, capacity.get(spec.memory_resource), "memory per device overflows"
        )
    return tuple(
        _device(spec, node_name, i, count=spec.count, devmem=devmem, devcore=spec.devcore)
        for i in range(devices)
    )


def _awsneuron(
    spec: CapacitySpec,
    node_name: str,
    devices: int,
    capacity: Mapping[str, object],
    labels: Mapping[str, str],
) -> tuple[DeviceInfo, ...]:
    cores = capacity_integer(capacity, spec.cores_resource) // devices
    per_device = cores if cores > 0 else spec.default_cores_per_device
    if per_device > 30:
        raise ValidationError(
            spec.cores_resource or spec.units_resource, cores, "too many NeuronCores per device"
        )
    info = custom_info({AWS_NODE_TYPE: labels.get(keys.AWS_INSTANCE_TYPE_LABEL, "")})
    return tuple(
        _device(
            spec,
            node_name,
            i,
            count=per_device,
            devmem=0,
            devcore=(1 << per_device) - 1,
            info=info,
        )
        for i in range(devices)
    )


def _device(
    spec: CapacitySpec,
    node_name: str,
    index: int,
    *,
    count: int,
    devmem: int,
    devcore: int,
    numa: int = 0,
    info: Mapping[str, object] | None = None,
) -> DeviceInfo:
    return DeviceInfo(
        id=f"{node_name}-{spec.id_infix}-{index}",
        index=index,
        count=count,
        devmem=devmem,
        devcore=devcore,
        type=spec.device_type,
        numa=numa,
        health=True,
        device_vendor=spec.device_vendor,
        custom_info=info or EMPTY_CUSTOM_INFO,
    )
