"""AWS Neuron devices (``AWSNeuron``): whole devices in contiguous runs, or NeuronCores of one.

A Neuron device registers ``count`` = its NeuronCores and ``totalcore`` = the bitmask of them
(``2^cores − 1``: ``0b11`` for two cores); what pods hold of it is the OR — equally the sum, the
masks being disjoint — of the masks they were granted, so ``usedcores`` *is* HAMi's
``awsusageinfo`` and no other per-pod state is needed.

* ``nums > 1`` — a run of ``nums`` devices with consecutive indices, all idle and healthy (and
  passing the pod's UUID selectors).  On an Inferentia node (the ``AWSNodeType`` custominfo of
  the first device contains ``inf`` or ``Inf``) the run may start anywhere, lowest start first;
  elsewhere only runs of 1, 4, 8 or 16 devices starting at a multiple of their length.  Each
  device is granted whole (its memory and full core mask).  No run, or no ``AWSNodeType`` →
  ``NumaNotFit`` counted once over the node's devices.
* ``nums == 1`` — HAMi's loop from the end of the policy order: health (``CardNotHealth``),
  type (``CardTypeMismatch``), UUID (``CardUuidMismatch``), ``count <= used``
  (``CardTimeSlicingExhausted``), mutex and ``used > 0`` (``ExclusiveDeviceAllocateConflict``),
  free core bits fewer than ``coresreq`` (``CardInsufficientCore``); the first device passing
  all is granted the lowest ``coresreq`` free bits as its core mask (first user of a two-core
  device asking one core: ``0b01``, the second: the complement ``0b10``) and no memory.  A
  request of 0 cores (``aws.amazon.com/neuron: 1``: a whole device) asks every core of the
  device, as HAMi's request of the device's core count does.

HAMi matches its runs' list positions to device indices; this module reads the registered
``index`` directly, which is what HAMi's positions stand for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import reasons as why
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.common import Tally, selected_out

__all__ = ["AWS_NEURON", "NODE_TYPE_KEY", "core_mask", "fit", "free_core_bits", "run_starts"]

AWS_NEURON: Final = "AWSNeuron"
NODE_TYPE_KEY: Final = "AWSNodeType"
"""custominfo key: the node's ``node.kubernetes.io/instance-type`` label."""
_ALIGNED_RUNS: Final = (1, 4, 8, 16)


def free_core_bits(dev: DeviceUsage) -> int:
    """NeuronCores of ``dev`` no pod holds."""
    return (dev.totalcore & ~dev.usedcores).bit_count()


def core_mask(dev: DeviceUsage, cores: int) -> int:
    """The mask of the lowest ``cores`` free core bits of ``dev``."""
    free = dev.totalcore & ~dev.usedcores
    mask = 0
    while cores > 0 and free:
        lowest = free & -free
        mask |= lowest
        free ^= lowest
        cores -= 1
    return mask


def run_starts(node_type: str, devices: int, count: int) -> range:
    """First indices at which a run of ``count`` devices may start on a node of ``devices``."""
    if "inf" in node_type or "Inf" in node_type:
        return range(devices - count + 1)
    if count not in _ALIGNED_RUNS:
        return range(0)
    return range(0, devices - count + 1, count)


def _run(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    node_type = devices[0].custom.get(NODE_TYPE_KEY) if devices else None
    if node_type is not None:
        by_index = {dev.index: dev for dev in reversed(devices)}
        for start in run_starts(node_type, len(devices), request.nums):
            run = [by_index.get(i) for i in range(start, start + request.nums)]
            if all(dev is not None and _idle(dev, request, ctx) for dev in run):
                return FitResult(
                    ok=True,
                    devices=tuple(
                        ContainerDevice(dev.uuid, request.type, dev.totalmem, dev.totalcore)
                        for dev in run
                        if dev is not None
                    ),
                )
    tally = Tally(len(devices))
    tally.add(why.NUMA_NOT_FIT)
    return tally.failure()


def _idle(dev: DeviceUsage, request: ContainerDeviceRequest, ctx: FitContext) -> bool:
    return dev.used == 0 and not selected_out(dev, request, ctx)


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """Whole devices in a run when ``nums > 1``, else cores of one device (see the module doc)."""
    if request.nums <= 0:
        return FitResult(ok=True)
    if request.nums > 1:
        return _run(devices, request, ctx)
    tally = Tally(len(devices))
    for dev in reversed(devices):
        refusal = selected_out(dev, request, ctx)
        if refusal:
            tally.add(refusal)
        elif dev.count <= dev.used:
            tally.add(why.CARD_TIME_SLICING_EXHAUSTED)
        elif ctx.mutex and dev.used > 0:
            tally.add(why.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT)
        elif free_core_bits(dev) < (cores := request.coresreq or dev.count):
            tally.add(why.CARD_INSUFFICIENT_CORE)
        else:
            mask = core_mask(dev, cores)
            return FitResult(ok=True, devices=(ContainerDevice(dev.uuid, request.type, 0, mask),))
    return tally.failure()
