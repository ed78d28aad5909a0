"""The node's current RDMA NICs, as a
:class:`~hami_deviceplugin.devices.change_feed.ChangeFeed` (the NIC twin of
:mod:`hami_deviceplugin.gpu.inventory`).

The NIC source task replaces the list; the RDMA plugin's ListAndWatch streams, the registration
loop, the RDMA Allocate path and the metrics read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami_deviceplugin.devices.change_feed import ChangeFeed
from hami_deviceplugin.rdma.nics import Nic, NicFunction, function_index

__all__ = ["NicInventory"]


def _ordered(nics: Iterable[Nic]) -> tuple[Nic, ...]:
    return tuple(sorted(nics, key=lambda nic: (nic.info.minor, nic.id)))


class NicInventory(ChangeFeed[tuple[Nic, ...]]):
    def __init__(self, nics: Iterable[Nic]) -> None:
        ordered = _ordered(nics)
        super().__init__(ordered)
        self._functions = function_index(ordered)

    @property
    def nics(self) -> tuple[Nic, ...]:
        return self._value

    @property
    def functions(self) -> Mapping[str, NicFunction]:
        """PF and VF bus id → the function (what a container can be given)."""
        return self._functions

    def replace(self, nics: Iterable[Nic]) -> bool:
        """Adopt a new list from the source; True (and notify) when it changed."""
        ordered = _ordered(nics)
        if ordered == self._value:
            return False
        self._functions = function_index(ordered)
        self._publish(ordered)
        return True
