"""The node's current GPUs (after ``filterdevices``) and change notification.

One :class:`Inventory` per process: the backend task replaces the list, every reader (the
kubelet's ListAndWatch streams, the registration loop, Allocate, metrics) reads it.  Waiters take
:attr:`Inventory.changed` *before* reading the list, so no change can slip between the read and
the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from hami_deviceplugin.backends.base import Gpu
from hami_deviceplugin.register import visible_gpus
from hami_deviceplugin.replicas import replica_owners
from hami_protocol.node_config import FilterDevices

__all__ = ["Inventory"]


class Inventory:
    def __init__(self, gpus: Iterable[Gpu], *, filters: FilterDevices, split: int) -> None:
        self._filters = filters
        self._split = split
        self._gpus = visible_gpus(gpus, filters)
        self._owners = replica_owners(self._gpus, split=split)
        self._version = 0
        self._changed = asyncio.Event()
        self._listeners: list[Callable[[tuple[Gpu, ...]], None]] = []

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self._gpus

    @property
    def version(self) -> int:
        return self._version

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next change (a new event object after each change)."""
        return self._changed

    @property
    def replica_owners(self) -> Mapping[str, str]:
        """Advertised replica ID → GPU UUID."""
        return self._owners

    def uuids(self) -> frozenset[str]:
        return frozenset(gpu.uuid for gpu in self._gpus)

    def subscribe(self, listener: Callable[[tuple[Gpu, ...]], None]) -> None:
        """Call ``listener(gpus)`` now and after every change (it must not block)."""
        self._listeners.append(listener)
        listener(self._gpus)

    def replace(self, gpus: Iterable[Gpu]) -> bool:
        """Adopt a new list from the backend; True (and notify) when the visible list changed."""
        visible = visible_gpus(gpus, self._filters)
        if visible == self._gpus:
            return False
        self._gpus = visible
        self._owners = replica_owners(visible, split=self._split)
        self._version += 1
        fired, self._changed = self._changed, asyncio.Event()
        fired.set()
        for listener in self._listeners:
            listener(visible)
        return True
