"""Free capacity as a user needs it: the largest piece on one card beside the total.

A card's *free* memory and cores are its capacity minus what the scheduler has allocated on it,
counted only where a new pod could go: a healthy card, not cordoned
(``hami.io/device-cordon``), with a share slot left (``used < count``).  Anything else has
nothing free, whatever its memory says — a full card's 2 GiB cannot be handed out.

*Fragmented* (per node, and for the cluster): the free memory added up would hold a reference
request but no single card's free memory does.  The reference is a quarter of the largest card
(:data:`REFERENCE_SHARE`): a common slice size, and one a user of that hardware would ask for.

:func:`node_summary` is remembered per :class:`~hami_scheduler.core.NodeUsage` version
(:meth:`~hami_scheduler.core.NodeUsage.derived`), so the cluster summary of an unchanged
5,000-node fleet costs a dictionary lookup per node; a vendor filter computes it afresh over the
matching cards only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, NamedTuple

from hami_scheduler.core import DeviceUsage, NodeUsage

__all__ = [
    "REFERENCE_SHARE",
    "Summary",
    "add",
    "card_free",
    "node_summary",
    "summarise",
]

REFERENCE_SHARE: Final = 4
"""The fragmentation flag's reference request: 1/4 of the largest card's memory."""

_KEY: Final = ("gpumap", "summary")


class Summary(NamedTuple):
    """Capacity, allocation and free capacity over a set of cards (MiB; percent points).

    A tuple, so a fleet's summaries fold without a conversion each (:func:`add`)."""

    devices: int = 0
    total_memory: int = 0
    allocated_memory: int = 0
    free_memory: int = 0
    largest_memory: int = 0
    total_cores: int = 0
    allocated_cores: int = 0
    free_cores: int = 0
    largest_cores: int = 0
    largest_card: int = 0
    """The largest card's memory (the reference request is a share of it)."""

    @property
    def reference(self) -> int:
        """The memory request the fragmentation flag tests (0: no card)."""
        return self.largest_card // REFERENCE_SHARE

    @property
    def fragmented(self) -> bool:
        """The free total holds the reference request, no single card's free memory does."""
        need = self.reference
        return need > 0 and self.free_memory >= need > self.largest_memory


def card_free(device: DeviceUsage, cordoned: bool) -> tuple[int, int]:
    """``(memory, cores)`` a new pod could still get on ``device`` (see the module doc)."""
    if cordoned or not device.health or device.used >= device.count:
        return 0, 0
    return max(device.totalmem - device.usedmem, 0), max(device.totalcore - device.usedcores, 0)


def summarise(devices: Iterable[DeviceUsage], cordon: frozenset[str]) -> Summary:
    """The :class:`Summary` of ``devices`` (``cordon``: the node's cordoned UUIDs)."""
    rows = []
    for device in devices:
        mem, cores = card_free(device, device.uuid in cordon)
        used_mem, used_cores = device.usedmem, device.usedcores
        total_mem, total_cores = device.totalmem, device.totalcore
        rows.append(
            Summary(
                1, total_mem, used_mem, mem, mem, total_cores, used_cores, cores, cores, total_mem
            )
        )
    return _fold(rows)


def node_summary(node: NodeUsage, keep: Callable[[DeviceUsage], bool] | None = None) -> Summary:
    """The node's :class:`Summary` over every card (remembered per node version), or over the
    cards ``keep`` accepts (computed each time)."""
    if keep is None:
        return node.derived(_KEY, lambda: summarise(node.devices, node.layout.cordon))
    return summarise(filter(keep, node.devices), node.layout.cordon)


def add(summaries: Iterable[Summary]) -> Summary:
    """Several nodes' summaries as one (the largest pieces are the largest of any node)."""
    return _fold(summaries)


def _fold(rows: Iterable[Summary]) -> Summary:
    """Rows of :class:`Summary` fields as one: the largest pieces by maximum, the rest summed."""
    count = total_mem = alloc_mem = free_mem = big_mem = 0
    total_cores = alloc_cores = free_cores = big_cores = big_card = 0
    for n, t_mem, a_mem, f_mem, b_mem, t_cores, a_cores, f_cores, b_cores, card in rows:
        count += n
        total_mem += t_mem
        alloc_mem += a_mem
        free_mem += f_mem
        big_mem = max(big_mem, b_mem)
        total_cores += t_cores
        alloc_cores += a_cores
        free_cores += f_cores
        big_cores = max(big_cores, b_cores)
        big_card = max(big_card, card)
    return Summary(
        count,
        total_mem,
        alloc_mem,
        free_mem,
        big_mem,
        total_cores,
        alloc_cores,
        free_cores,
        big_cores,
        big_card,
    )
