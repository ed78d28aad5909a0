"""A stand-in for HAMi-core inside a container: it keeps the container's shared region file as the
real ``libvgpu.so`` does, so the vGPU monitor can be tested and demonstrated without a GPU.

:class:`RegionWriter` creates ``<uuid4>.cache`` with the whole image from
:func:`~hami_protocol.region.codec.encode_region`, maps it ``MAP_SHARED`` read-write, and from
then on writes single fields at the layout's offsets (process slots, kernel launches), so another
mapping of the same file (the monitor's) sees each write, and reads back what the monitor wrote.
Process slots are managed as HAMi-core does: a new process takes slot ``procnum`` (filled before
``procnum`` grows); a removed one is replaced by the last slot.

:func:`region_for_allocation`, :func:`devices_from_env` and :func:`priority_from_env` read a
container's Allocate answer (env and mounts, HAMi ``plugin/server.go``) the way HAMi-core does:
where the region file lies on the host, its devices and limits, its task priority.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import BinaryIO, Final, Self

from hami_protocol.pod import envs as env_names
from hami_protocol.region.codec import SharedRegion, decode_region, encode_region
from hami_protocol.region.feedback import FeedbackField, field_offset
from hami_protocol.region.layout import (
    DEVICE_MEMORY_FORMAT,
    DEVICE_UTIL_FORMAT,
    MAX_DEVICES,
    MAX_PROCS,
    V0,
    V1,
    RegionLayout,
    RegionVersion,
)

__all__ = [
    "DEFAULT_PRIORITY",
    "RegionWriter",
    "devices_from_env",
    "priority_from_env",
    "region_for_allocation",
]

DEFAULT_PRIORITY: Final = 1
"""HAMi-core's task priority when ``CUDA_TASK_PRIORITY`` is not set."""

_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_MEMORY = struct.Struct(DEVICE_MEMORY_FORMAT)
_UTIL = struct.Struct(DEVICE_UTIL_FORMAT)
_RECENT_KERNEL_LAUNCHED: Final = 2
"""What HAMi-core stores in ``recentKernel`` at each launch; the monitor counts it down."""


class RegionWriter:
    """One container's shared region, written as HAMi-core writes it.  Not thread-safe."""

    def __init__(self, path: Path, file: BinaryIO, region: mmap.mmap, layout: RegionLayout) -> None:
        self._path = path
        self._file = file
        self._mm = region
        self._layout = layout

    @classmethod
    def create(
        cls,
        path: Path,
        *,
        version: RegionVersion = RegionVersion.V1,
        devices: Sequence[tuple[str, int, int]],
        priority: int = DEFAULT_PRIORITY,
        owner_pid: int = 1,
    ) -> RegionWriter:
        """Create (or replace) the region file at ``path`` for ``devices`` — ``(uuid,
        limit_bytes, sm_limit)`` each — and map it.  The parent directory must exist."""
        if len(devices) > MAX_DEVICES:
            raise ValueError(f"{len(devices)} devices > {MAX_DEVICES}")
        spare = MAX_DEVICES - len(devices)
        v1 = version is RegionVersion.V1
        image = encode_region(
            SharedRegion(
                version=version,
                major_version=1 if v1 else 0,
                minor_version=0,
                sm_init_flag=0,
                owner_pid=owner_pid,
                num=len(devices),
                uuids=tuple(uuid for uuid, _, _ in devices) + ("",) * spare,
                limits=tuple(limit for _, limit, _ in devices) + (0,) * spare,
                sm_limits=tuple(sm for _, _, sm in devices) + (0,) * spare,
                procs=(),
                utilization_switch=0,
                recent_kernel=0,
                priority=priority,
                last_kernel_time=0,
            )
        )
        # Written aside and renamed: a monitor scanning the directory never sees half a file.
        staging = path.with_name(f".{path.name}.new")
        staging.write_bytes(image)
        os.replace(staging, path)
        file = path.open("r+b")
        try:
            region = mmap.mmap(
                file.fileno(),
                len(image),
                flags=mmap.MAP_SHARED,
                prot=mmap.PROT_READ | mmap.PROT_WRITE,
            )
        except BaseException:
            file.close()
            raise
        return cls(path, file, region, V1 if v1 else V0)

    @property
    def path(self) -> Path:
        return self._path

    @property
    def layout(self) -> RegionLayout:
        return self._layout

    # --- fields -----------------------------------------------------------------------------------
    def _get(self, offset: int) -> int:
        value: int = _I32.unpack_from(self._mm, offset)[0]
        return value

    def _set(self, offset: int, value: int) -> None:
        _I32.pack_into(self._mm, offset, value)

    @property
    def recent_kernel(self) -> int:
        return self._get(field_offset(self._layout, FeedbackField.RECENT_KERNEL))

    @property
    def utilization_switch(self) -> int:
        return self._get(field_offset(self._layout, FeedbackField.UTILIZATION_SWITCH))

    @property
    def procnum(self) -> int:
        return self._get(self._layout.procnum)

    @property
    def num(self) -> int:
        count: int = struct.unpack_from("<Q", self._mm, self._layout.num)[0]
        return count

    def read(self) -> SharedRegion:
        """The whole region as it is now."""
        with memoryview(self._mm) as view:
            return decode_region(view)

    # --- processes --------------------------------------------------------------------------------
    def _slot(self, index: int) -> int:
        return self._layout.procs + index * self._layout.proc_size

    def _find(self, pid: int) -> int | None:
        at = self._layout.proc_pid
        return next((i for i in range(self.procnum) if self._get(self._slot(i) + at) == pid), None)

    def set_process(
        self,
        pid: int,
        *,
        used_bytes: Sequence[int],
        sm_util: Sequence[int],
        context_bytes: Sequence[int] | None = None,
        module_bytes: Sequence[int] | None = None,
        buffer_bytes: Sequence[int] | None = None,
        hostpid: int | None = None,
    ) -> None:
        """Add or update the slot of ``pid`` (status 1): per device index its memory
        (``used.total`` = ``used_bytes``) and SM utilisation; devices not given read 0.
        ``hostpid`` None keeps the slot's (0 for a new one)."""
        given = {
            "used_bytes": used_bytes,
            "sm_util": sm_util,
            "context_bytes": context_bytes or (),
            "module_bytes": module_bytes or (),
            "buffer_bytes": buffer_bytes or (),
        }
        num = self.num
        for name, values in given.items():
            if len(values) > num:
                raise ValueError(f"{name} has {len(values)} entries, the region {num} devices")
        layout = self._layout
        index = self._find(pid)
        fresh = index is None
        if index is None:
            index = self.procnum
            if index >= MAX_PROCS:
                raise ValueError(f"all {MAX_PROCS} process slots are taken")
        slot = self._slot(index)

        def at(values: Sequence[int], device: int) -> int:
            return values[device] if device < len(values) else 0

        self._set(slot + layout.proc_pid, pid)
        if hostpid is not None or fresh:
            self._set(slot + layout.proc_hostpid, hostpid or 0)
        for d in range(MAX_DEVICES):
            _MEMORY.pack_into(
                self._mm,
                slot + layout.proc_used + d * layout.device_memory_size,
                at(given["context_bytes"], d),
                at(given["module_bytes"], d),
                at(given["buffer_bytes"], d),
                0,
                at(used_bytes, d),
            )
            _UTIL.pack_into(
                self._mm,
                slot + layout.proc_device_util + d * layout.device_util_size,
                0,
                0,
                at(sm_util, d),
            )
        self._set(slot + layout.proc_status, 1)
        if fresh:
            # Last, so a reader never counts a slot still being filled.
            self._set(layout.procnum, index + 1)

    def remove_process(self, pid: int) -> None:
        """Free the slot of ``pid``: the last slot moves into it (KeyError if none)."""
        index = self._find(pid)
        if index is None:
            raise KeyError(pid)
        last = self.procnum - 1
        size = self._layout.proc_size
        if index != last:
            start = self._slot(last)
            self._mm[self._slot(index) : self._slot(index) + size] = self._mm[start : start + size]
        self._set(self._layout.procnum, last)
        self._mm[self._slot(last) : self._slot(last) + size] = bytes(size)

    def launch_kernel(self, now: float | None = None) -> None:
        """A kernel launch: ``recentKernel`` = 2 unless the monitor has blocked the task (-1);
        v1 also records the launch time (unix seconds)."""
        rk = field_offset(self._layout, FeedbackField.RECENT_KERNEL)
        if self._get(rk) >= 0:
            self._set(rk, _RECENT_KERNEL_LAUNCHED)
        if self._layout.last_kernel_time is not None:
            stamp = int(now if now is not None else time.time())
            _I64.pack_into(self._mm, self._layout.last_kernel_time, stamp)

    # --- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        if not self._mm.closed:
            self._mm.close()
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# --- the Allocate answer --------------------------------------------------------------------------
def region_for_allocation(
    host_root: Path, mounts: Sequence[tuple[str, str]], envs: Mapping[str, str]
) -> Path | None:
    """Where the container's region file lies under ``host_root``: its
    ``CUDA_DEVICE_MEMORY_SHARED_CACHE`` path taken through the deepest of ``mounts``
    (``(container_path, host_path)`` pairs) that holds it.  None when the container has no
    shared cache, or the cache is not on a host mount (no monitor could see it)."""
    cache = envs.get(env_names.CUDA_DEVICE_MEMORY_SHARED_CACHE, "")
    if not cache:
        return None
    inside = _absolute(cache)
    best: tuple[PurePosixPath, PurePosixPath] | None = None
    for container_path, host_path in mounts:
        mount = _absolute(container_path)
        if inside.is_relative_to(mount) and (best is None or len(mount.parts) > len(best[0].parts)):
            best = (mount, _absolute(host_path))
    if best is None:
        return None
    on_host = best[1] / inside.relative_to(best[0])
    return host_root.joinpath(*on_host.parts[1:])


def _absolute(path: str) -> PurePosixPath:
    pure = PurePosixPath(path)
    if not pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"path {path!r} must be absolute, without '..'")
    return pure


_MEMORY_LIMIT = re.compile(r"(\d+)([kKmMgG]?)")
_UNITS: Final = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _memory_limit(name: str, text: str) -> int:
    if not text:
        return 0
    match = _MEMORY_LIMIT.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{name}={text!r} is not a size (<n>, <n>k, <n>m or <n>g)")
    return int(match[1]) * _UNITS[match[2].lower()]


def _int(name: str, text: str, default: int) -> int:
    if not text.strip():
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def devices_from_env(envs: Mapping[str, str]) -> tuple[tuple[str, int, int], ...]:
    """``(uuid, limit_bytes, sm_limit)`` per device of ``NVIDIA_VISIBLE_DEVICES``, in order:
    ``CUDA_DEVICE_MEMORY_LIMIT_<i>`` (``<n>m`` is MiB; unset = 0, no limit) and the one
    ``CUDA_DEVICE_SM_LIMIT`` (unset = 0).  ``none``/``void``/unset → no devices."""
    visible = envs.get(env_names.NVIDIA_VISIBLE_DEVICES, "").strip()
    if visible in ("", "none", "void"):
        return ()
    uuids = [uuid.strip() for uuid in visible.split(",") if uuid.strip()]
    if "all" in uuids:
        raise ValueError("NVIDIA_VISIBLE_DEVICES=all names no device")
    if len(uuids) > MAX_DEVICES:
        raise ValueError(f"{len(uuids)} devices > {MAX_DEVICES}")
    sm_limit = _int(env_names.CUDA_DEVICE_SM_LIMIT, envs.get(env_names.CUDA_DEVICE_SM_LIMIT, ""), 0)
    devices = []
    for index, uuid in enumerate(uuids):
        name = env_names.cuda_device_memory_limit(index)
        devices.append((uuid, _memory_limit(name, envs.get(name, "")), sm_limit))
    return tuple(devices)


def priority_from_env(envs: Mapping[str, str]) -> int:
    """``CUDA_TASK_PRIORITY`` (0 is the highest); :data:`DEFAULT_PRIORITY` when unset."""
    name = env_names.CUDA_TASK_PRIORITY
    return _int(name, envs.get(name, ""), DEFAULT_PRIORITY)
