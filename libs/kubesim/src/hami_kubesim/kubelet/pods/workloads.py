"""The containers of a simulated node as HAMi-core sees them: each running container whose
``Allocate`` answer names a shared cache keeps its region file current, as ``libvgpu.so`` inside
it would, so the node's vGPU monitor has something real to read.

Pure part: :func:`plan_workloads` (which containers of a pod play, where their region files lie
on the host, their devices, limits and priority, from the allocation record) and
:func:`usage_at` (the made-up but plausible usage of one container at one tick: one process;
per device, memory a stable share of the limit — 20 to 90 %, fixed per pod, container and
device — with a small wobble; SM utilisation moving over time within 0-100 and never above the
container's SM limit).

I/O part: :class:`Workloads`, run by the kubelet stand-in beside its other loops. It creates a
region with :class:`~hami_kubesim.hamicore.RegionWriter` as soon as a container plays, and every
``interval`` seconds writes each container's usage and a kernel launch. When the pod is deleted
or stops, its writers are closed and the files left where they are, as a real node leaves them
until the monitor's resync removes them. All file work runs in one worker thread at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import struct
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import structlog

from hami_kubesim.hamicore import (
    RegionWriter,
    devices_from_env,
    priority_from_env,
    region_for_allocation,
)
from hami_kubesim.kubelet.status import ContainerAllocation, PodAllocation

__all__ = [
    "DEFAULT_INTERVAL_S",
    "MEMORY_SHARE",
    "ProcessUsage",
    "Workload",
    "Workloads",
    "plan_workloads",
    "usage_at",
]

log = structlog.get_logger(__name__)

DEFAULT_INTERVAL_S: Final = 1.0
"""How often a playing container's usage is written."""

MEMORY_SHARE: Final = (0.20, 0.90)
"""The share of its limit a device's memory use stays within."""

_WOBBLE: Final = 0.02
"""How far memory use moves around its container's share (of the limit)."""
_NO_LIMIT_BASE: Final = 1 << 30
"""What a device without a memory limit uses its share of."""
_PLAYED_KINDS: Final = frozenset({"app", "sidecar"})
"""Init containers have finished by the time a pod runs."""


@dataclass(frozen=True, slots=True)
class Workload:
    """One container running one CUDA process under HAMi-core."""

    pod_uid: str
    namespace: str
    pod: str
    container: str
    region: Path
    """The region file on the host."""
    devices: tuple[tuple[str, int, int], ...]
    """``(uuid, limit_bytes, sm_limit)`` per device, in the container's order."""
    priority: int

    @property
    def key(self) -> tuple[str, str]:
        return (self.pod_uid, self.container)

    @property
    def pid(self) -> int:
        """The process's pid inside the container (stable per container)."""
        return 100 + int(_fraction(self, "pid") * 30000)

    @property
    def hostpid(self) -> int:
        return 100_000 + int(_fraction(self, "hostpid") * 3_000_000)


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    """What the process uses at one tick, one entry per device."""

    used_bytes: tuple[int, ...]
    sm_util: tuple[int, ...]
    context_bytes: tuple[int, ...]
    module_bytes: tuple[int, ...]
    buffer_bytes: tuple[int, ...]


def _fraction(workload: Workload, *what: object) -> float:
    """A number in [0, 1) fixed by the pod, the container and ``what``."""
    seed = "/".join((workload.pod_uid, workload.container, *(str(w) for w in what)))
    digest = hashlib.sha256(seed.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def usage_at(workload: Workload, tick: int) -> ProcessUsage:
    """The container's usage at ``tick`` (a deterministic function of both)."""
    low, high = MEMORY_SHARE
    used: list[int] = []
    util: list[int] = []
    for index, (_, limit, sm_limit) in enumerate(workload.devices):
        base = limit or _NO_LIMIT_BASE
        share = low + (high - low) * _fraction(workload, index, "memory")
        phase = 2 * math.pi * _fraction(workload, index, "phase")
        share += _WOBBLE * math.sin(0.5 * tick + phase)
        used.append(int(base * min(max(share, low), high)))
        ceiling = sm_limit if 0 < sm_limit < 100 else 100
        level = 0.5 + 0.45 * math.sin(0.8 * tick + phase)
        util.append(min(ceiling, max(0, round(ceiling * level))))
    context = tuple(u // 16 for u in used)
    module = tuple(u // 32 for u in used)
    return ProcessUsage(
        used_bytes=tuple(used),
        sm_util=tuple(util),
        context_bytes=context,
        module_bytes=module,
        buffer_bytes=tuple(u - c - m for u, c, m in zip(used, context, module, strict=True)),
    )


def _container_workload(
    host_root: Path, allocation: PodAllocation, container: ContainerAllocation
) -> Workload | None:
    mounts = [(m.container_path, m.host_path) for r in container.resources for m in r.mounts]
    envs = container.envs
    region = region_for_allocation(host_root, mounts, envs)
    if region is None:
        return None
    devices = devices_from_env(envs)
    if not devices:
        return None
    return Workload(
        pod_uid=allocation.uid,
        namespace=allocation.namespace,
        pod=allocation.name,
        container=container.name,
        region=region,
        devices=devices,
        priority=priority_from_env(envs),
    )


def plan_workloads(
    host_root: Path, allocation: PodAllocation
) -> tuple[tuple[Workload, ...], tuple[str, ...]]:
    """The containers of ``allocation`` that play (app containers and sidecars whose
    ``Allocate`` answer names a shared cache on a host mount and at least one device), and a
    message per container whose env HAMi-core could not read."""
    workloads: list[Workload] = []
    problems: list[str] = []
    for container in allocation.containers:
        if container.kind not in _PLAYED_KINDS:
            continue
        try:
            workload = _container_workload(host_root, allocation, container)
        except ValueError as error:
            problems.append(f"{allocation.namespace}/{allocation.name} {container.name}: {error}")
            continue
        if workload is not None:
            workloads.append(workload)
    return tuple(workloads), tuple(problems)


class Workloads:
    """The playing containers of one node; :meth:`run` writes their regions until cancelled.

    :meth:`play` and :meth:`stop` are called on the event loop (from the stand-in's pod
    handlers); the writers are touched only in the worker thread, one step at a time.
    """

    def __init__(self, host_root: Path, *, node: str, interval: float = DEFAULT_INTERVAL_S):
        if not interval > 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self.host_root = host_root
        self.node = node
        self.interval = interval
        self._wanted: dict[tuple[str, str], Workload] = {}
        self._pods: set[str] = set()
        """UIDs of the pods whose containers were planned (playing or not)."""
        self._writers: dict[tuple[str, str], RegionWriter] = {}
        self._failed: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._wake = asyncio.Event()
        self.ticks = 0
        """Steps finished (each wrote every playing container's usage once)."""

    @property
    def wanted(self) -> Mapping[tuple[str, str], Workload]:
        """The containers that should be playing, by ``(pod uid, container)``."""
        return dict(self._wanted)

    @property
    def playing(self) -> frozenset[tuple[str, str]]:
        """The containers whose region is open now."""
        with self._lock:
            return frozenset(self._writers)

    def play(self, allocation: PodAllocation) -> None:
        """The pod runs: its containers that use HAMi-core start playing (again a no-op)."""
        if allocation.uid in self._pods:
            return
        self._pods.add(allocation.uid)
        workloads, problems = plan_workloads(self.host_root, allocation)
        for problem in problems:
            log.warning("container env not readable by HAMi-core", node=self.node, error=problem)
        for workload in workloads:
            self._wanted[workload.key] = workload
        if workloads:
            self._wake.set()

    def stop(self, pod_uid: str) -> None:
        """The pod stopped or is gone: its containers stop writing."""
        self._pods.discard(pod_uid)
        gone = [key for key in self._wanted if key[0] == pod_uid]
        for key in gone:
            del self._wanted[key]
        if gone:
            self._wake.set()

    async def run(self) -> None:
        """Step at once after each change and every ``interval`` seconds until cancelled; the
        writers are closed on the way out."""
        try:
            while True:
                self._wake.clear()
                wanted, tick = dict(self._wanted), self.ticks
                await asyncio.to_thread(self._step, wanted, tick, time.time())
                self.ticks += 1
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval):
                        await self._wake.wait()
        finally:
            await asyncio.to_thread(self.close)

    # --- the worker thread ------------------------------------------------------------------
    def _step(self, wanted: Mapping[tuple[str, str], Workload], tick: int, now: float) -> None:
        with self._lock:
            for key in [k for k in self._writers if k not in wanted]:
                self._writers.pop(key).close()
            self._failed &= wanted.keys()
            for key, workload in wanted.items():
                if key in self._failed:
                    continue
                try:
                    self._write(workload, tick, now)
                except (OSError, ValueError, struct.error) as error:
                    self._failed.add(key)
                    broken = self._writers.pop(key, None)
                    if broken is not None:
                        broken.close()
                    log.warning(
                        "cannot keep the container's shared region",
                        node=self.node,
                        pod=f"{workload.namespace}/{workload.pod}",
                        container=workload.container,
                        path=str(workload.region),
                        error=str(error),
                    )

    def _write(self, workload: Workload, tick: int, now: float) -> None:
        writer = self._writers.get(workload.key)
        if writer is None:
            workload.region.parent.mkdir(parents=True, exist_ok=True)
            writer = RegionWriter.create(
                workload.region, devices=workload.devices, priority=workload.priority
            )
            self._writers[workload.key] = writer
        usage = usage_at(workload, tick)
        writer.set_process(
            workload.pid,
            used_bytes=usage.used_bytes,
            sm_util=usage.sm_util,
            context_bytes=usage.context_bytes,
            module_bytes=usage.module_bytes,
            buffer_bytes=usage.buffer_bytes,
            hostpid=workload.hostpid,
        )
        writer.launch_kernel(now)

    def close(self) -> None:
        """Close every writer (the files stay)."""
        with self._lock:
            for writer in self._writers.values():
                writer.close()
            self._writers.clear()
