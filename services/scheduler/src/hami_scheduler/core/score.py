"""Scores and orders: the device score, the GPU-policy device order and the node policy.

Device score (HAMi ``ComputeScore``)::

    10 × (w_slot·(req+Used)/Count + w_core·(cores+Usedcores)/Totalcore
          + w_mem·(mem+Usedmem)/Totalmem)

0 when Count, Totalcore or Totalmem is 0.  ``req/cores/mem`` count only requests whose ``type``
equals the device *model* exactly (quirk Q2): requests carry the vendor word (``NVIDIA``) and
devices their model (``NVIDIA-Tesla T4``), so on real nodes the score reflects existing usage.

Device order (:func:`sort_devices`): the fit consumes the list **from the end**, so the device
that should be tried first sorts last.

* ``binpack``: score ascending, then NUMA ascending (busiest device tried first);
* ``spread`` and anything else (``topology-aware``): score descending, then NUMA ascending;
* ``mutex``: ``Used`` descending, then NUMA ascending (idle devices tried first);
* with numa-bind: NUMA groups stay contiguous — binpack: NUMA descending then score ascending;
  otherwise NUMA ascending then score descending;
* a comma chain, or bare ``numa``: its ``binpack``/``spread``/``numa`` entries as keys in written
  order (``numa`` = NUMA ascending), ``numa`` moved first under numa-bind, spread when the chain
  names no sort key, device index as the final tie-break.

Remaining ties keep registration order (a stable sort; Go's sort is stable at these sizes).

Node policy (:func:`node_better`): ``binpack`` prefers the highest node score (most used node),
``spread`` the lowest.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from hami_protocol.pod.policy import GpuPolicy, NodePolicy, ScoringWeights
from hami_protocol.request.containers import PERCENTAGE_UNSET, ContainerDeviceRequest
from hami_scheduler.core.usage.device import DeviceUsage

__all__ = ["DEFAULT_WEIGHTS", "device_score", "node_better", "sort_devices"]

DEFAULT_WEIGHTS: Final = ScoringWeights()
_WEIGHT: Final = 10.0


def device_score(
    dev: DeviceUsage,
    requests: Iterable[ContainerDeviceRequest] = (),
    weights: ScoringWeights = DEFAULT_WEIGHTS,
) -> float:
    """HAMi's device score for ``dev`` given one container's requests (see the module doc)."""
    if not (dev.count and dev.totalcore and dev.totalmem):
        return 0.0
    wanted = cores = mem = 0
    for request in requests:
        if request.type != dev.type:
            continue
        wanted += 1
        cores += request.coresreq
        pct = request.mem_percentagereq
        if pct not in (0, PERCENTAGE_UNSET):
            mem += dev.totalmem * pct // 100
        else:
            mem += request.memreq
    return _WEIGHT * (
        weights.slot * (wanted + dev.used) / dev.count
        + weights.core * (cores + dev.usedcores) / dev.totalcore
        + weights.memory * (mem + dev.usedmem) / dev.totalmem
    )


def _chain(policy: GpuPolicy, numa_bind: bool) -> tuple[str, ...]:
    chain: list[str] = []
    for entry in policy.sort_keys:
        if entry not in chain:
            chain.append(entry)
    if not chain:
        chain = ["spread"]
    if numa_bind and chain[0] != "numa":
        chain = ["numa", *(entry for entry in chain if entry != "numa")]
    return tuple(chain)


def _chain_key(chain: tuple[str, ...], dev: DeviceUsage, score: float) -> tuple[float | int, ...]:
    parts: list[float | int] = []
    for entry in chain:
        if entry == "binpack":
            parts.append(score)
        elif entry == "spread":
            parts.append(-score)
        else:
            parts.append(dev.numa)
    parts.append(dev.index)
    return tuple(parts)


def sort_devices(
    devices: Sequence[DeviceUsage],
    scores: Sequence[float],
    policy: GpuPolicy,
    *,
    numa_bind: bool = False,
) -> list[DeviceUsage]:
    """``devices`` in the policy's order (``scores[i]`` belongs to ``devices[i]``)."""
    entries = policy.entries
    pairs = list(zip(devices, scores, strict=True))
    if len(entries) > 1 or entries == ("numa",):
        chain = _chain(policy, numa_bind)
        pairs.sort(key=lambda pair: _chain_key(chain, pair[0], pair[1]))
    elif entries == ("mutex",):
        pairs.sort(key=lambda pair: (-pair[0].used, pair[0].numa))
    elif entries == ("binpack",):
        if numa_bind:
            pairs.sort(key=lambda pair: (-pair[0].numa, pair[1]))
        else:
            pairs.sort(key=lambda pair: (pair[1], pair[0].numa))
    elif numa_bind:
        pairs.sort(key=lambda pair: (pair[0].numa, -pair[1]))
    else:
        pairs.sort(key=lambda pair: (-pair[1], pair[0].numa))
    return [dev for dev, _ in pairs]


def node_better(candidate: float, incumbent: float, policy: NodePolicy) -> bool:
    """Whether a node scoring ``candidate`` beats one scoring ``incumbent`` (ties: incumbent)."""
    if policy == "spread":
        return candidate < incumbent
    return candidate > incumbent
