"""The node's current GPUs (after ``filterdevices``), as a
:class:`~hami_deviceplugin.devices.change_feed.ChangeFeed`.

One :class:`Inventory` per process: the backend task replaces the list, every reader (the
kubelet's ListAndWatch streams, the registration loop, Allocate, metrics) reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hami_deviceplugin.devices.change_feed import ChangeFeed
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.replicas import replica_owners
from hami_deviceplugin.node.register import visible_gpus
from hami_protocol.config.node import FilterDevices

__all__ = ["Inventory"]


class Inventory(ChangeFeed[tuple[Gpu, ...]]):
    def __init__(self, gpus: Iterable[Gpu], *, filters: FilterDevices, split: int) -> None:
        visible = visible_gpus(gpus, filters)
        super().__init__(visible)
        self._filters = filters
        self._split = split
        self._owners = replica_owners(visible, split=split)

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return self._value

    @property
    def replica_owners(self) -> Mapping[str, str]:
        """Advertised replica ID → GPU UUID."""
        return self._owners

    def uuids(self) -> frozenset[str]:
        return frozenset(gpu.uuid for gpu in self._value)

    def replace(self, gpus: Iterable[Gpu]) -> bool:
        """Adopt a new list from the backend; True (and notify) when the visible list changed."""
        visible = visible_gpus(gpus, self._filters)
        if visible == self._value:
            return False
        self._owners = replica_owners(visible, split=self._split)
        self._publish(visible)
        return True
