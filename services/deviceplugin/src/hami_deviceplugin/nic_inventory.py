"""The node's current RDMA NICs and change notification (the NIC twin of :mod:`.inventory`).

The NIC source task replaces the list; the RDMA plugin's ListAndWatch streams, the registration
loop, the RDMA Allocate path and the metrics read it.  Waiters take :attr:`NicInventory.changed`
*before* reading the list, so no change can slip between the read and the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from hami_deviceplugin.nics import Nic, NicFunction, function_index

__all__ = ["NicInventory"]


def _ordered(nics: Iterable[Nic]) -> tuple[Nic, ...]:
    return tuple(sorted(nics, key=lambda nic: (nic.info.minor, nic.id)))


class NicInventory:
    def __init__(self, nics: Iterable[Nic]) -> None:
        self._nics = _ordered(nics)
        self._functions = function_index(self._nics)
        self._version = 0
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[tuple[Nic, ...]], None]] = []

    @property
    def nics(self) -> tuple[Nic, ...]:
        return self._nics

    @property
    def version(self) -> int:
        return self._version

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change (a new event object after each change)."""
        return self._changed

    @property
    def functions(self) -> Mapping[str, NicFunction]:
        """PF and VF bus id → the function (what a container can be given)."""
        return self._functions

    def subscribe(self, listener: Callable[[tuple[Nic, ...]], None]) -> None:
        """Call ``listener(nics)`` now and after every change (it must not block)."""
        self._listeners.append(listener)
        listener(self._nics)

    def replace(self, nics: Iterable[Nic]) -> bool:
        """Adopt a new list from the source; True (and notify) when it changed."""
        ordered = _ordered(nics)
        if ordered == self._nics:
            return False
        self._nics = ordered
        self._functions = function_index(ordered)
        self._version += 1
        fired, self._changed = self._changed, asyncio.Event()
        fired.set()
        for listener in self._listeners:
            listener(ordered)
        return True
