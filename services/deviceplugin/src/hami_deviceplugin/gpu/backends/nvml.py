"""The ``nvml`` backend: real GPUs through nvidia-ml-py (``pynvml``).

Discovery (one thread call): ``nvmlInit``, ``nvmlDeviceGetCount``, then per index
``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetName``,
``nvmlDeviceGetMemoryInfo`` (total) and ``nvmlDeviceGetPciInfo`` (``busId``); NUMA node and PCIe
placement come from sysfs.  A GPU whose UUID cannot be read cannot be advertised and is skipped;
any other NVML error on one GPU marks that GPU unhealthy (with the reason) instead of stopping the
process.  Memory that NVML reports as not supported (unified-memory GPUs) is taken from
``preConfiguredDeviceMemory``, or the GPU is skipped when that is 0, as HAMi does.

Health (the kubelet device plugin's rules): an NVML event set with ``XidCriticalError`` (and the
ECC events, which are then ignored) for every GPU, waited on in a thread with a short timeout.  A
critical Xid not in the ignored list marks its GPU unhealthy for good; an error while waiting, or
an event whose GPU cannot be identified, marks every GPU unhealthy.  A GPU whose event types
cannot be read or registered is unhealthy (it cannot be watched).  Ignored Xids by default: 13,
31, 43, 45, 68, 109 (application errors, not device faults).  ``DP_DISABLE_HEALTHCHECKS``:
``all`` or ``xids`` switch the checks off, a comma list of numbers adds ignored Xids;
``DP_ENABLE_HEALTHCHECKS``: a comma list of numbers removes Xids from the ignored list.

Links between GPUs (for the topology pair scores) are read by
:mod:`hami_deviceplugin.gpu.backends.nvml_links` at every :meth:`NvmlBackend.links` call.

Every NVML call runs in a worker thread; the module object is injected so tests can pass a
stand-in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import structlog

from hami_deviceplugin.devices.sysfs import pcie_placement, read_numa_node
from hami_deviceplugin.errors import BackendError
from hami_deviceplugin.gpu.backends.base import Gpu, GpuUsage
from hami_deviceplugin.gpu.backends.nvml_links import LinkedGpu, read_link_table
from hami_deviceplugin.gpu.mig.nvml_control import NvmlMigControl, read_capability
from hami_protocol.errors import ValidationError
from hami_protocol.topology.layout import normalize_pci_bus_id
from hami_protocol.topology.links import LinkTable

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "HealthChecks",
    "NvmlBackend",
    "parse_health_env",
]

log = structlog.get_logger(__name__)

T = TypeVar("T")

MIB: Final = 1024 * 1024
DEFAULT_IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})


@dataclass(frozen=True, slots=True)
class HealthChecks:
    """Which NVML health checks run; see the module docstring for the environment variables."""

    enabled: bool = True
    ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS


def _xid_list(text: str, variable: str) -> set[int]:
    numbers: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        if not item:
            continue
        try:
            numbers.add(int(item))
        except ValueError:
            raise ValueError(f"{variable}: {item!r} is not an Xid number") from None
    return numbers


def parse_health_env(disable: str | None, enable: str | None) -> HealthChecks:
    """``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS`` → :class:`HealthChecks`.

    Raises ``ValueError`` for a list item that is not a number (rather than ignoring it).
    """
    disabled = (disable or "").strip().lower()
    if disabled in {"all", "xids"} or "xids" in disabled.split(","):
        return HealthChecks(enabled=False)
    ignored = set(DEFAULT_IGNORED_XIDS) | _xid_list(disabled, "DP_DISABLE_HEALTHCHECKS")
    ignored -= _xid_list(enable or "", "DP_ENABLE_HEALTHCHECKS")
    return HealthChecks(enabled=True, ignored_xids=frozenset(ignored))


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


@dataclass(slots=True)
class _Probe:
    gpu: Gpu
    handle: Any


class NvmlBackend:
    """GPUs from NVML; ``nvml`` is the ``pynvml`` module (or a stand-in with the same calls)."""

    def __init__(
        self,
        *,
        sysfs_root: Path,
        nvml: Any = None,
        health: HealthChecks | None = None,
        preconfigured_memory_mib: int = 0,
        event_wait_ms: int = 1000,
    ) -> None:
        self._nvml = nvml
        self._sysfs = sysfs_root
        self._health = health or HealthChecks()
        self._preconfigured = preconfigured_memory_mib
        self._wait_ms = event_wait_ms
        self._probes: list[_Probe] = []
        self._initialised = False
        self._event_set: Any = None
        self._inflight: set[asyncio.Future[Any]] = set()
        self._closed = False
        self._link_problems: set[str] = set()

    @property
    def name(self) -> str:
        return "nvml"

    # --- threads ------------------------------------------------------------------------------
    async def _call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in a worker thread; the future survives our cancellation (see close)."""
        future = asyncio.get_running_loop().run_in_executor(None, fn)
        self._inflight.add(future)
        future.add_done_callback(self._inflight.discard)
        return await asyncio.shield(future)

    # --- discovery ----------------------------------------------------------------------------
    def _module(self) -> Any:
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - the package is a dependency
                raise BackendError(f"nvidia-ml-py is not installed: {exc}") from exc
            self._nvml = pynvml
        return self._nvml

    def _discover(self) -> tuple[Gpu, ...]:
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise BackendError(f"NVML initialisation failed: {exc}") from exc
        self._initialised = True
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            raise BackendError(f"NVML cannot count GPUs: {exc}") from exc
        probes: list[_Probe] = []
        for index in range(count):
            probe = self._probe(nvml, index)
            if probe is not None:
                probes.append(probe)
        self._probes = probes
        return tuple(probe.gpu for probe in probes)

    def _probe(self, nvml: Any, index: int) -> _Probe | None:
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as exc:
            log.error("GPU skipped: NVML cannot identify it", index=index, error=str(exc))
            return None
        problems: list[str] = []
        model = ""
        try:
            model = _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            problems.append(f"name: {exc}")
        memory_mib = 0
        try:
            memory_mib = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // MIB
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) != nvml.NVML_ERROR_NOT_SUPPORTED:
                problems.append(f"memory: {exc}")
            elif self._preconfigured > 0:
                memory_mib = self._preconfigured
            else:
                log.error(
                    "GPU skipped: NVML reports no memory size and preConfiguredDeviceMemory is 0",
                    uuid=uuid,
                    index=index,
                )
                return None
        gpu = Gpu(uuid=uuid, index=index, model=model, memory_mib=memory_mib)
        try:
            gpu = dataclasses.replace(gpu, mig=read_capability(nvml, handle))
        except nvml.NVMLError as exc:
            log.warning(
                "MIG profiles unreadable; GPU treated as not MIG-capable", uuid=uuid, error=str(exc)
            )
        try:
            raw_bus_id = _text(nvml.nvmlDeviceGetPciInfo(handle).busId)
            bus_id = normalize_pci_bus_id(raw_bus_id)
        except nvml.NVMLError as exc:
            problems.append(f"PCI info: {exc}")
        except ValidationError as exc:
            problems.append(f"PCI bus id: {exc.reason}")
        else:
            placement = pcie_placement(self._sysfs, bus_id)
            gpu = dataclasses.replace(
                gpu,
                pci_bus_id=bus_id,
                numa=read_numa_node(self._sysfs, bus_id),
                pcie_switch=placement.pcie_switch,
                pcie_root=placement.pcie_root,
            )
        if problems:
            reason = "NVML error: " + "; ".join(problems)
            log.warning("GPU marked unhealthy", uuid=uuid, index=index, reason=reason)
            gpu = dataclasses.replace(gpu, healthy=False, reason=reason)
        return _Probe(gpu=gpu, handle=handle)

    async def open(self) -> tuple[Gpu, ...]:
        return await self._call(self._discover)

    def mig_control(self) -> NvmlMigControl:
        """MIG on these GPUs (after :meth:`open`)."""
        return NvmlMigControl(self._module())

    def current(self) -> tuple[Gpu, ...]:
        return tuple(probe.gpu for probe in self._probes)

    # --- health -------------------------------------------------------------------------------
    def _mark(self, uuids: set[str] | None, reason: str) -> bool:
        """Mark the GPUs in ``uuids`` (all when None) unhealthy; True when anything changed."""
        changed = False
        for probe in self._probes:
            if (uuids is None or probe.gpu.uuid in uuids) and probe.gpu.healthy:
                probe.gpu = dataclasses.replace(probe.gpu, healthy=False, reason=reason)
                changed = True
                log.warning("GPU marked unhealthy", uuid=probe.gpu.uuid, reason=reason)
        return changed

    def _create_event_set(self) -> set[str]:
        """Create the event set and register every GPU; returns the UUIDs that cannot be
        watched."""
        nvml = self._nvml
        self._event_set = nvml.nvmlEventSetCreate()
        wanted = (
            nvml.nvmlEventTypeXidCriticalError
            | nvml.nvmlEventTypeDoubleBitEccError
            | nvml.nvmlEventTypeSingleBitEccError
        )
        unwatched: set[str] = set()
        for probe in self._probes:
            try:
                supported = int(nvml.nvmlDeviceGetSupportedEventTypes(probe.handle))
                nvml.nvmlDeviceRegisterEvents(probe.handle, wanted & supported, self._event_set)
            except nvml.NVMLError as exc:
                log.warning("GPU health cannot be watched", uuid=probe.gpu.uuid, error=str(exc))
                unwatched.add(probe.gpu.uuid)
        return unwatched

    def _wait_event(self) -> tuple[str, int] | None:
        """One bounded wait: ``None`` on timeout, ``("", 0)`` on a wait error, else
        ``(uuid or "", xid)`` of a critical Xid event ("" when the GPU cannot be identified)."""
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait(self._event_set, self._wait_ms)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                return None
            log.error("NVML event wait failed", error=str(exc))
            return ("", 0)
        if int(data.eventType) != int(nvml.nvmlEventTypeXidCriticalError):
            return None
        xid = int(data.eventData)
        if xid in self._health.ignored_xids:
            log.info("ignored Xid event", xid=xid)
            return None
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
        except nvml.NVMLError:
            uuid = ""
        return (uuid, xid)

    async def updates(self) -> AsyncIterator[tuple[Gpu, ...]]:
        if not self._health.enabled or not self._probes:
            await asyncio.Future()  # nothing to watch: wait for cancellation
        unwatched = await self._call(self._create_event_set)
        if unwatched and self._mark(unwatched, "health events cannot be watched"):
            yield self.current()
        while not self._closed:
            outcome = await self._call(self._wait_event)
            if outcome is None:
                continue
            uuid, xid = outcome
            if xid == 0:
                changed = self._mark(None, "NVML event wait failed")
            elif not uuid:
                changed = self._mark(None, f"critical Xid {xid} on an unidentified GPU")
            else:
                changed = self._mark({uuid}, f"critical Xid {xid}")
            if changed:
                yield self.current()

    # --- usage --------------------------------------------------------------------------------
    def _sample(self) -> dict[str, GpuUsage]:
        nvml = self._nvml
        figures: dict[str, GpuUsage] = {}
        for probe in self._probes:
            used: int | None = None
            gpu_util: float | None = None
            mem_util: float | None = None
            with contextlib.suppress(nvml.NVMLError):
                used = int(nvml.nvmlDeviceGetMemoryInfo(probe.handle).used)
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(probe.handle)
                gpu_util, mem_util = float(rates.gpu), float(rates.memory)
            except nvml.NVMLError:
                pass
            figures[probe.gpu.uuid] = GpuUsage(used, gpu_util, mem_util)
        return figures

    async def usage(self) -> Mapping[str, GpuUsage]:
        if not self._probes or self._closed:
            return {}
        return await self._call(self._sample)

    # --- links --------------------------------------------------------------------------------
    async def links(self) -> LinkTable:
        if len(self._probes) < 2 or self._closed:
            return {}
        gpus = [LinkedGpu(p.gpu.uuid, p.gpu.pci_bus_id, p.handle) for p in self._probes]
        return await self._call(lambda: read_link_table(self._nvml, gpus, self._link_problems))

    # --- shutdown -----------------------------------------------------------------------------
    def _shutdown(self) -> None:
        nvml = self._nvml
        if self._event_set is not None:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except nvml.NVMLError as exc:
                log.warning("NVML event set free failed", error=str(exc))
            self._event_set = None
        if self._initialised:
            try:
                nvml.nvmlShutdown()
            except nvml.NVMLError as exc:
                log.warning("NVML shutdown failed", error=str(exc))
            self._initialised = False

    async def close(self) -> None:
        """Stop watching and shut NVML down.

        A wait in flight still uses the event set; it returns within the wait timeout.  A call
        still running a second after that (a driver call that hangs) is left to its thread and
        NVML is not shut down under it: the process is ending anyway.
        """
        self._closed = True
        if self._inflight:
            _, busy = await asyncio.wait(set(self._inflight), timeout=self._wait_ms / 1000 + 1)
            if busy:
                log.warning(
                    "NVML calls still running at shutdown; NVML left as it is", calls=len(busy)
                )
                return
        await asyncio.to_thread(self._shutdown)
