"""The ``sysfs`` NIC source: RDMA NICs discovered under ``--sysfs-root``, rescanned for changes.

Discovery is :func:`hami_deviceplugin.rdma.discovery.discover_nics`, run in a worker thread.  Every
``poll_interval`` seconds the tree is scanned again; a list that differs (a port went down, VFs
were created) is reported.  A missing ``bus/pci/devices`` directory at start is an error (sysfs
is not mounted where we were told); later scans never fail.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from hami_deviceplugin.gpu.backends.base import BackendError
from hami_deviceplugin.rdma.discovery import discover_nics
from hami_deviceplugin.rdma.nics import Nic

__all__ = ["SysfsNicSource"]


class SysfsNicSource:
    def __init__(self, sysfs_root: Path, *, poll_interval: float = 10.0) -> None:
        self._root = sysfs_root
        self._poll = poll_interval
        self._nics: tuple[Nic, ...] = ()

    @property
    def name(self) -> str:
        return "sysfs"

    async def open(self) -> tuple[Nic, ...]:
        devices = self._root / "bus" / "pci" / "devices"
        if not await asyncio.to_thread(devices.is_dir):
            raise BackendError(f"RDMA discovery: {devices} is not a directory")
        self._nics = await asyncio.to_thread(discover_nics, self._root)
        return self._nics

    async def updates(self) -> AsyncIterator[tuple[Nic, ...]]:
        while True:
            await asyncio.sleep(self._poll)
            nics = await asyncio.to_thread(discover_nics, self._root)
            if nics != self._nics:
                self._nics = nics
                yield nics
