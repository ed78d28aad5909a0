"""The backend a process's flags name (``--device-backend nvml|fake``), shared by the device
plugin and the vGPU monitor."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from hami_deviceplugin.gpu.backends.base import Backend
from hami_deviceplugin.gpu.backends.fake import FakeBackend
from hami_deviceplugin.gpu.backends.nvml import HealthChecks, NvmlBackend

__all__ = ["BackendKind", "choose_backend"]

BackendKind = Literal["nvml", "fake"]


def choose_backend(
    kind: BackendKind,
    *,
    sysfs_root: Path,
    fake_devices: Path | None = None,
    fake_poll_interval_s: float = 1.0,
    health: HealthChecks | None = None,
    preconfigured_memory_mib: int = 0,
) -> Backend:
    """``fake``: the GPUs of ``fake_devices`` (required), re-read every ``fake_poll_interval_s``;
    ``nvml``: real GPUs, with ``health`` checks."""
    if kind == "fake":
        if fake_devices is None:
            raise ValueError("the fake backend needs a fake devices file")
        return FakeBackend(fake_devices, sysfs_root=sysfs_root, poll_interval=fake_poll_interval_s)
    return NvmlBackend(
        sysfs_root=sysfs_root, health=health, preconfigured_memory_mib=preconfigured_memory_mib
    )
