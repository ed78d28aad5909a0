"""The stand-in pynvml with MIG: GPUs modelled from the fake backend's profile tables, answering
the ctypes-array calls as NVML does (arrays filled, counts written through the pointer).

GPU-instance handles are ``(gpu index + 1) * 1000 + gi``, compute-instance handles
``gi handle * 100 + ci + 1``: plain integers, as ``c_void_p`` arrays hold them.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from hami_deviceplugin.gpu.mig.model import MigCapability, overlaps
from hami_protocol.node.registry import MigPlacement

from ..fake_pynvml import NVML_ERROR_NOT_SUPPORTED, FakeNvml, NVMLError

NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23


class Placement(ctypes.Structure):
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclass
class MigGpu:
    capability: MigCapability
    current: int = 1
    pending: int = 1
    reset_required: bool = False
    gpu_instances: dict[int, tuple[int, MigPlacement]] = field(default_factory=dict)
    """gi id → (profile id, placement)."""
    compute_instances: dict[int, int] = field(default_factory=dict)
    """gi id → ci id."""
    processes: list[int] = field(default_factory=list)
    serial: int = 0


@dataclass
class FakeMigNvml(FakeNvml):
    mig: dict[int, MigGpu] = field(default_factory=dict)
    """GPU index → its MIG."""

    c_nvmlGpuInstancePlacement_t = Placement  # noqa: N815
    c_nvmlGpuInstance_t = ctypes.c_void_p  # noqa: N815
    c_nvmlComputeInstance_t = ctypes.c_void_p  # noqa: N815
    NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12

    def _gpu(self, name: str, handle: int) -> MigGpu:
        self._record(name, handle)
        found = self.mig.get(handle)
        if found is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return found

    @staticmethod
    def _split(gi_handle: int) -> tuple[int, int]:
        return gi_handle // 1000 - 1, gi_handle % 1000

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        self._record("nvmlDeviceGetHandleByUUID")
        return next(n for n, gpu in enumerate(self.gpus) if gpu.uuid == uuid)

    def nvmlDeviceGetMigMode(self, handle: int) -> list[int]:
        gpu = self._gpu("nvmlDeviceGetMigMode", handle)
        return [gpu.current, gpu.pending]

    def nvmlDeviceSetMigMode(self, handle: int, mode: int) -> int:
        gpu = self._gpu("nvmlDeviceSetMigMode", handle)
        gpu.pending = mode
        if not gpu.reset_required:
            gpu.current = mode
        return 0

    def nvmlDeviceGetAttributes(self, handle: int) -> Any:
        return SimpleNamespace(
            multiprocessorCount=self._gpu("attributes", handle).capability.full_sms
        )

    def _spec(self, gpu: MigGpu, profile_id: int) -> Any:
        for spec in gpu.capability.profiles:
            if spec.profile_id == profile_id:
                return spec
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: int, profile: int) -> Any:
        spec = self._spec(self._gpu("nvmlDeviceGetGpuInstanceProfileInfo", handle), profile)
        return SimpleNamespace(
            id=spec.profile_id,
            sliceCount=spec.slice_count,
            instanceCount=spec.instance_count,
            multiprocessorCount=spec.sm_count,
            memorySizeMB=spec.memory_mb,
            name=f"MIG {spec.name}".encode(),
        )

    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: int, profile: int, spots: Any, count: Any
    ) -> int:
        spec = self._spec(self._gpu("possible placements", handle), profile)
        for n, spot in enumerate(spec.placements):
            spots[n].start, spots[n].size = spot.start, spot.size
        count.contents.value = len(spec.placements)
        return 0

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: int, profile: int, spot: Any) -> int:
        gpu = self._gpu("nvmlDeviceCreateGpuInstanceWithPlacement", handle)
        spec = self._spec(gpu, profile)
        placement = MigPlacement(spot.contents.start, spot.contents.size)
        if not gpu.current or placement not in spec.placements:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        if any(overlaps(p, placement) for _, p in gpu.gpu_instances.values()):
            raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = next(n for n in range(1, 64) if n not in gpu.gpu_instances)
        gpu.gpu_instances[gi] = (profile, placement)
        return (handle + 1) * 1000 + gi

    def nvmlGpuInstanceGetInfo(self, gi_handle: int) -> Any:
        index, gi = self._split(gi_handle)
        profile, placement = self.mig[index].gpu_instances[gi]
        return SimpleNamespace(id=gi, profileId=profile, placement=placement)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, gi_handle: int, profile: int, engines: int
    ) -> Any:
        return SimpleNamespace(id=profile, instanceCount=1)

    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle: int, profile: int) -> int:
        index, gi = self._split(gi_handle)
        self._record("nvmlGpuInstanceCreateComputeInstance", index)
        gpu = self.mig[index]
        if gi in gpu.compute_instances:
            raise NVMLError(NVML_ERROR_INSUFFICIENT_RESOURCES)
        gpu.compute_instances[gi] = 0
        return gi_handle * 100 + 1

    def nvmlComputeInstanceGetInfo(self, ci_handle: int) -> Any:
        return SimpleNamespace(id=ci_handle % 100 - 1)

    def nvmlGpuInstanceGetComputeInstances(
        self, gi_handle: int, profile: int, items: Any, count: Any
    ) -> int:
        index, gi = self._split(gi_handle)
        present = gi in self.mig[index].compute_instances
        if present:
            items[0] = gi_handle * 100 + 1
        count.contents.value = int(present)
        return 0

    def nvmlDeviceGetGpuInstances(self, handle: int, profile: int, items: Any, count: Any) -> int:
        gpu = self._gpu("nvmlDeviceGetGpuInstances", handle)
        found = sorted(gi for gi, (p, _) in gpu.gpu_instances.items() if p == profile)
        for n, gi in enumerate(found):
            items[n] = (handle + 1) * 1000 + gi
        count.contents.value = len(found)
        return 0

    def nvmlDeviceGetGpuInstanceById(self, handle: int, gi: int) -> int:
        if gi not in self._gpu("nvmlDeviceGetGpuInstanceById", handle).gpu_instances:
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return (handle + 1) * 1000 + gi

    def nvmlComputeInstanceDestroy(self, ci_handle: int) -> int:
        index, gi = self._split(ci_handle // 100)
        self._record("nvmlComputeInstanceDestroy", index)
        del self.mig[index].compute_instances[gi]
        return 0

    def nvmlGpuInstanceDestroy(self, gi_handle: int) -> int:
        index, gi = self._split(gi_handle)
        self._record("nvmlGpuInstanceDestroy", index)
        gpu = self.mig[index]
        if gi in gpu.compute_instances:
            raise NVMLError(NVML_ERROR_IN_USE)
        del gpu.gpu_instances[gi]
        return 0

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: int) -> int:
        self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: int, index: int) -> Any:
        gpu = self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        devices = sorted(gpu.compute_instances.items())
        if index >= len(devices):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        gi, ci = devices[index]
        uuid = f"MIG-{self.gpus[handle].uuid[4:12]}-{gi}-{ci}"
        return SimpleNamespace(gi=gi, ci=ci, uuid=uuid)

    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return int(device.gi)

    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return int(device.ci)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        if isinstance(handle, SimpleNamespace):
            return str(handle.uuid)
        return super().nvmlDeviceGetUUID(handle)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[int]:
        if isinstance(handle, SimpleNamespace):
            return []
        return list(self.mig[handle].processes) if handle in self.mig else []

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[int]:
        return []
