"""A stand-in for the few ``pynvml`` calls the nvml backend makes, driven by the test.

GPUs are plain records; a test can make any call fail for one GPU (``failures``), queue NVML
events (``events``), describe NVLinks (``FakeGpu.nvlinks``) and common PCIe ancestors
(``ancestors``), and read what was called (``calls``).  Constants and error classes mirror
nvidia-ml-py's names and values.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_UNKNOWN = 999
EVENT_SINGLE_BIT_ECC = 0x1
EVENT_DOUBLE_BIT_ECC = 0x2
EVENT_XID_CRITICAL = 0x8
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 18
NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


@dataclass
class FakeGpu:
    uuid: str
    name: str
    total: int
    bus_id: bytes
    used: int = 0
    utilization: tuple[int, int] = (0, 0)
    supported_events: int = 0xF
    nvlinks: list[tuple[bytes, int, bool]] | None = None
    """Per link: remote bus id, remote device type, enabled; None: the GPU has no NVLink (every
    link call answers NOT_SUPPORTED)."""


@dataclass
class FakeNvml:
    """Module-like object: pass it as ``NvmlBackend(nvml=FakeNvml(...))``."""

    gpus: list[FakeGpu]
    failures: dict[tuple[str, int], int] = field(default_factory=dict)
    """``(call name, gpu index) -> NVML error value`` to raise."""
    init_error: int | None = None
    events: queue.Queue[Any] = field(default_factory=queue.Queue)
    calls: list[str] = field(default_factory=list)
    ancestors: dict[frozenset[int], int] = field(default_factory=dict)
    """Common PCIe ancestor level of a pair of GPU indexes (default ``NVML_TOPOLOGY_SYSTEM``)."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    NVMLError = NVMLError
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_TOPOLOGY_INTERNAL = NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE = NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE = NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE = NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM = NVML_TOPOLOGY_SYSTEM
    # pynvml's names, kept as they are so the backend reads them like the real module.
    nvmlEventTypeSingleBitEccError = EVENT_SINGLE_BIT_ECC  # noqa: N815
    nvmlEventTypeDoubleBitEccError = EVENT_DOUBLE_BIT_ECC  # noqa: N815
    nvmlEventTypeXidCriticalError = EVENT_XID_CRITICAL  # noqa: N815

    def _record(self, name: str, index: int | None = None) -> None:
        with self._lock:
            self.calls.append(name)
        if index is not None and (name, index) in self.failures:
            raise NVMLError(self.failures[(name, index)])

    # --- library ---
    def nvmlInit(self) -> None:
        self._record("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self._record("nvmlShutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._record("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._record("nvmlDeviceGetHandleByIndex", index)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        self._record("nvmlDeviceGetUUID", handle)
        return self.gpus[handle].uuid

    def nvmlDeviceGetName(self, handle: int) -> str:
        self._record("nvmlDeviceGetName", handle)
        return self.gpus[handle].name

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        self._record("nvmlDeviceGetMemoryInfo", handle)
        gpu = self.gpus[handle]
        return SimpleNamespace(total=gpu.total, used=gpu.used, free=gpu.total - gpu.used)

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        self._record("nvmlDeviceGetPciInfo", handle)
        return SimpleNamespace(busId=self.gpus[handle].bus_id)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        self._record("nvmlDeviceGetUtilizationRates", handle)
        gpu_util, mem_util = self.gpus[handle].utilization
        return SimpleNamespace(gpu=gpu_util, memory=mem_util)

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        """These GPUs are not MIG-capable (fake_pynvml_mig models MIG)."""
        self._record("nvmlDeviceGetMigMode", handle)
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    # --- topology ---
    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        self._record("nvmlDeviceGetTopologyCommonAncestor", first)
        return self.ancestors.get(frozenset((first, second)), NVML_TOPOLOGY_SYSTEM)

    def _link(self, name: str, handle: int, link: int) -> tuple[bytes, int, bool]:
        self._record(name, handle)
        links = self.gpus[handle].nvlinks
        if links is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(links):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return links[link]

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        enabled = self._link("nvmlDeviceGetNvLinkState", handle, link)[2]
        return NVML_FEATURE_ENABLED if enabled else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> Any:
        return SimpleNamespace(
            busId=self._link("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)[0]
        )

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        return self._link("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)[1]

    # --- events ---
    def nvmlEventSetCreate(self) -> str:
        self._record("nvmlEventSetCreate")
        return "event-set"

    def nvmlEventSetFree(self, event_set: str) -> None:
        self._record("nvmlEventSetFree")

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        self._record("nvmlDeviceGetSupportedEventTypes", handle)
        return self.gpus[handle].supported_events

    def nvmlDeviceRegisterEvents(self, handle: int, mask: int, event_set: str) -> None:
        self._record("nvmlDeviceRegisterEvents", handle)

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> Any:
        try:
            item = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(NVML_ERROR_TIMEOUT) from None
        if isinstance(item, NVMLError):
            raise item
        return item

    def push_xid(self, handle: int, xid: int) -> None:
        self.events.put(SimpleNamespace(device=handle, eventType=EVENT_XID_CRITICAL, eventData=xid))

    def push_event(self, handle: int, event_type: int, data: int) -> None:
        self.events.put(SimpleNamespace(device=handle, eventType=event_type, eventData=data))
