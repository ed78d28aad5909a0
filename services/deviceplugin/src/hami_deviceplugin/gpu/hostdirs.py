"""The host filesystem as Allocate sees it: HAMi-core's files under ``HOOK_PATH`` and the
directories a container needs before it starts.

Every host path is taken relative to ``root`` (``--host-root``): ``/`` in a DaemonSet that mounts
the host paths at the same place, a temporary directory in tests and the demo.  With no root the
plugin touches no files: directories are not created and the plain ``libvgpu.so`` is mounted.

Per container (HAMi): ``<hook>/vgpu/containers/<pod uid>_<container>`` is deleted and created
again empty with mode 0777 (HAMi-core writes its shared cache there), ``/tmp/vgpulock`` is created
with mode 0777 when missing.  The host library is ``<hook>/vgpu/libvgpu.so.<plugin version>`` when
that file exists, else ``<hook>/vgpu/libvgpu.so``.  All file work runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_deviceplugin.gpu.plan import ContainerGrant, HookLayout

__all__ = ["HostDirs"]

_MODE = 0o777


class HostDirs:
    def __init__(self, root: Path | None, *, plugin_version: str) -> None:
        self._root = root
        self._version = plugin_version

    @property
    def root(self) -> Path | None:
        return self._root

    def local(self, host_path: str) -> Path:
        """Where ``host_path`` is in this process's view (under the root)."""
        if self._root is None:
            raise ValueError("no host root configured")
        relative = PurePosixPath(host_path)
        if not relative.is_absolute() or ".." in relative.parts:
            raise ValueError(f"host path {host_path!r} must be absolute, without '..'")
        return self._root.joinpath(*relative.parts[1:])

    def _inspect(self, hook_path: str) -> HookLayout:
        plain = HookLayout(hook_path=hook_path)
        vgpu = plain.vgpu_dir
        versioned = f"{vgpu}/libvgpu.so.{self._version}"
        library = versioned if self.local(versioned).is_file() else ""
        return HookLayout(
            hook_path=hook_path,
            libvgpu_host_path=library,
            license=self.local(f"{vgpu}/license").exists(),
        )

    async def layout(self, hook_path: str) -> HookLayout:
        """What the host offers under ``hook_path`` (read per allocation: files may appear later,
        e.g. from the vgpu-init hook)."""
        if self._root is None:
            return HookLayout(hook_path=hook_path)
        try:
            return await asyncio.to_thread(self._inspect, hook_path)
        except (OSError, ValueError) as exc:
            raise AllocateError(FailureKind.HOST, f"cannot inspect {hook_path}: {exc}") from exc

    def _prepare(self, fresh: Iterable[str], shared: Iterable[str]) -> None:
        for host_path in fresh:
            path = self.local(host_path)
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, _MODE)
        for host_path in shared:
            path = self.local(host_path)
            if not path.is_dir():
                path.mkdir(parents=True, exist_ok=True)
                os.chmod(path, _MODE)

    async def prepare(self, grants: Iterable[ContainerGrant]) -> None:
        """Create the directories the grants mount; :class:`AllocateError` when impossible."""
        if self._root is None:
            return
        listed = list(grants)
        fresh = [path for grant in listed for path in grant.fresh_dirs]
        shared = sorted({path for grant in listed for path in grant.shared_dirs})
        try:
            await asyncio.to_thread(self._prepare, fresh, shared)
        except (OSError, ValueError) as exc:
            raise AllocateError(
                FailureKind.HOST, f"cannot prepare host directories: {exc}"
            ) from exc
