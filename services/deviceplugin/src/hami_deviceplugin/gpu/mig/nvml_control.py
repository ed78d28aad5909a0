"""MIG on real GPUs through NVML (nvidia-ml-py), no ``nvidia-smi``.

Reading: ``nvmlDeviceGetMigMode`` (current and pending), per GPU-instance profile
``nvmlDeviceGetGpuInstanceProfileInfo`` (v2: name, slices, memory, SMs, instance count) and
``nvmlDeviceGetGpuInstancePossiblePlacements``; the instances through
``nvmlDeviceGetGpuInstances`` / ``nvmlGpuInstanceGetInfo`` and their compute instances through
``nvmlGpuInstanceGetComputeInstanceProfileInfo(…, SHARED)`` / ``nvmlGpuInstanceGetComputeInstances``
/ ``nvmlComputeInstanceGetInfo``; MIG UUIDs by walking ``nvmlDeviceGetMaxMigDeviceCount`` /
``nvmlDeviceGetMigDeviceHandleByIndex`` (``GetGpuInstanceId``, ``GetComputeInstanceId``,
``GetUUID``).  Changing: ``nvmlDeviceSetMigMode``, ``nvmlDeviceCreateGpuInstanceWithPlacement``
then ``nvmlGpuInstanceCreateComputeInstance`` (same slice count, shared engines), destroyed in
reverse on any error; ``nvmlComputeInstanceDestroy`` / ``nvmlGpuInstanceDestroy``.

Every call runs in a worker thread.  ``nvml`` is the ``pynvml`` module (or a stand-in with the
same calls and the ctypes types it hands out).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
from collections.abc import Callable
from typing import Any, Final, TypeVar

from hami_deviceplugin.errors import MigError
from hami_deviceplugin.gpu.mig.model import (
    MigCapability,
    MigInstance,
    MigMode,
    MigProfileSpec,
    MigState,
)
from hami_protocol.node.registry import MigPlacement

__all__ = ["NvmlMigControl", "read_capability"]

T = TypeVar("T")

_CI_PROFILE_FOR_SLICES: Final = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}
"""``NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE`` by slice count."""
_GI_PROFILE_COUNT: Final = 0x12
_ENGINE_SHARED: Final = 0x0
_MIG_ENABLE: Final = 1


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _profile_name(raw: object) -> str:
    name = _text(raw).strip()
    return name[4:] if name.startswith("MIG ") else name


def _profiles(nvml: Any, handle: Any) -> list[tuple[MigProfileSpec, Any]]:
    """The GPU-instance profiles the GPU offers, with NVML's info objects."""
    found: list[tuple[MigProfileSpec, Any]] = []
    seen: set[int] = set()
    for profile in range(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", _GI_PROFILE_COUNT)):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile)
        except nvml.NVMLError:
            continue  # a profile this GPU does not have
        if int(info.id) in seen or int(info.instanceCount) == 0:
            continue
        seen.add(int(info.id))
        count = ctypes.c_uint(int(info.instanceCount))
        spots = (nvml.c_nvmlGpuInstancePlacement_t * int(info.instanceCount))()
        nvml.nvmlDeviceGetGpuInstancePossiblePlacements(
            handle, int(info.id), spots, ctypes.pointer(count)
        )
        placements = tuple(
            MigPlacement(int(spots[n].start), int(spots[n].size)) for n in range(count.value)
        )
        spec = MigProfileSpec(
            name=_profile_name(info.name),
            profile_id=int(info.id),
            slice_count=int(info.sliceCount),
            memory_mb=int(info.memorySizeMB),
            sm_count=int(info.multiprocessorCount),
            instance_count=int(info.instanceCount),
            placements=placements,
        )
        found.append((spec, info))
    return found


def read_capability(nvml: Any, handle: Any) -> MigCapability | None:
    """What the GPU offers for MIG (blocking); None when it is not MIG-capable."""
    try:
        nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError:
        return None
    profiles = [spec for spec, _ in _profiles(nvml, handle)]
    if not profiles:
        return None
    try:
        full = int(nvml.nvmlDeviceGetAttributes(handle).multiprocessorCount)
    except nvml.NVMLError:
        full = 0
    # In MIG mode the parent's attributes may describe less than the whole GPU; the full GPU has
    # at least the SMs of its biggest profile.
    full = max(full, *(p.sm_count for p in profiles))
    return MigCapability(full_sms=full, profiles=tuple(profiles))


class NvmlMigControl:
    """:class:`~hami_deviceplugin.gpu.mig.control.MigControl` over NVML (initialised by the
    backend that hands this out)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml

    async def _call(self, fn: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(fn)
        except self._nvml.NVMLError as exc:
            raise MigError(f"NVML: {exc}") from None

    def _handle(self, gpu_uuid: str) -> Any:
        return self._nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)

    # --- reading (worker threads) -------------------------------------------------------------
    def _mode(self, handle: Any) -> MigMode:
        current, pending = self._nvml.nvmlDeviceGetMigMode(handle)
        if int(current) == _MIG_ENABLE:
            return "enabled"
        return "pending" if int(pending) == _MIG_ENABLE else "disabled"

    def _mig_uuids(self, handle: Any) -> dict[tuple[int, int], str]:
        nvml = self._nvml
        found: dict[tuple[int, int], str] = {}
        for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
            try:
                device = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except nvml.NVMLError:
                continue  # no MIG device at this index
            gi = int(nvml.nvmlDeviceGetGpuInstanceId(device))
            ci = int(nvml.nvmlDeviceGetComputeInstanceId(device))
            found[(gi, ci)] = _text(nvml.nvmlDeviceGetUUID(device))
        return found

    def _compute_instances(self, gpu_instance: Any, slices: int) -> list[Any]:
        nvml = self._nvml
        profile = _CI_PROFILE_FOR_SLICES.get(slices)
        if profile is None:
            return []
        info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
            gpu_instance, profile, _ENGINE_SHARED
        )
        size = max(int(info.instanceCount), 1)
        count = ctypes.c_uint(0)
        items = (nvml.c_nvmlComputeInstance_t * size)()
        nvml.nvmlGpuInstanceGetComputeInstances(
            gpu_instance, int(info.id), items, ctypes.pointer(count)
        )
        return [items[n] for n in range(count.value)]

    def _state(self, gpu_uuid: str) -> MigState:
        nvml = self._nvml
        handle = self._handle(gpu_uuid)
        mode = self._mode(handle)
        if mode != "enabled":
            return MigState(mode)
        uuids = self._mig_uuids(handle)
        instances: list[MigInstance] = []
        for spec, info in _profiles(nvml, handle):
            count = ctypes.c_uint(0)
            items = (nvml.c_nvmlGpuInstance_t * int(info.instanceCount))()
            nvml.nvmlDeviceGetGpuInstances(handle, spec.profile_id, items, ctypes.pointer(count))
            for n in range(count.value):
                gi_info = nvml.nvmlGpuInstanceGetInfo(items[n])
                gi = int(gi_info.id)
                cis = [
                    int(nvml.nvmlComputeInstanceGetInfo(ci).id)
                    for ci in self._compute_instances(items[n], spec.slice_count)
                ]
                ci = min(cis) if cis else -1
                instances.append(
                    MigInstance(
                        gpu_uuid=gpu_uuid,
                        profile=spec.name,
                        placement=MigPlacement(
                            int(gi_info.placement.start), int(gi_info.placement.size)
                        ),
                        gi_id=gi,
                        ci_id=ci,
                        mig_uuid=uuids.get((gi, ci), ""),
                    )
                )
        return MigState(mode, tuple(sorted(instances, key=lambda i: i.gi_id)))

    # --- changing (worker threads) ------------------------------------------------------------
    def _enable(self, gpu_uuid: str) -> MigMode:
        handle = self._handle(gpu_uuid)
        if self._mode(handle) == "disabled":
            self._nvml.nvmlDeviceSetMigMode(handle, _MIG_ENABLE)
        return self._mode(handle)

    def _create(self, gpu_uuid: str, spec: MigProfileSpec, placement: MigPlacement) -> MigInstance:
        nvml = self._nvml
        handle = self._handle(gpu_uuid)
        spot = nvml.c_nvmlGpuInstancePlacement_t()
        spot.start, spot.size = placement.start, placement.size
        gpu_instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, spec.profile_id, ctypes.pointer(spot)
        )
        compute_instance = None
        try:
            ci_profile = _CI_PROFILE_FOR_SLICES.get(spec.slice_count)
            if ci_profile is None:
                raise MigError(f"no compute-instance profile for {spec.slice_count} slices")
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu_instance, ci_profile, _ENGINE_SHARED
            )
            compute_instance = nvml.nvmlGpuInstanceCreateComputeInstance(gpu_instance, int(info.id))
            gi = int(nvml.nvmlGpuInstanceGetInfo(gpu_instance).id)
            ci = int(nvml.nvmlComputeInstanceGetInfo(compute_instance).id)
            mig_uuid = self._mig_uuids(handle).get((gi, ci))
            if not mig_uuid:
                raise MigError(f"no MIG device for GPU instance {gi}, compute instance {ci}")
        except BaseException:
            if compute_instance is not None:
                _quietly(nvml, nvml.nvmlComputeInstanceDestroy, compute_instance)
            _quietly(nvml, nvml.nvmlGpuInstanceDestroy, gpu_instance)
            raise
        return MigInstance(gpu_uuid, spec.name, placement, gi, ci, mig_uuid)

    def _destroy(self, gpu_uuid: str, gi_id: int) -> None:
        nvml = self._nvml
        handle = self._handle(gpu_uuid)
        gpu_instance = nvml.nvmlDeviceGetGpuInstanceById(handle, gi_id)
        slices = next(
            (
                spec.slice_count
                for spec, _ in _profiles(nvml, handle)
                if spec.profile_id == int(nvml.nvmlGpuInstanceGetInfo(gpu_instance).profileId)
            ),
            0,
        )
        for compute_instance in self._compute_instances(gpu_instance, slices):
            nvml.nvmlComputeInstanceDestroy(compute_instance)
        nvml.nvmlGpuInstanceDestroy(gpu_instance)

    def _busy(self, gpu_uuid: str) -> bool:
        nvml = self._nvml
        handle = self._handle(gpu_uuid)
        devices = [handle]
        if self._mode(handle) == "enabled":
            for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
                try:
                    devices.append(nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index))
                except nvml.NVMLError:
                    continue
        for device in devices:
            for read in (
                nvml.nvmlDeviceGetComputeRunningProcesses,
                nvml.nvmlDeviceGetGraphicsRunningProcesses,
            ):
                try:
                    if read(device):
                        return True
                except nvml.NVMLError as exc:
                    if getattr(exc, "value", None) == nvml.NVML_ERROR_NOT_SUPPORTED:
                        continue
                    return True  # unknown counts as busy: never clear a GPU in doubt
        return False

    # --- MigControl ---------------------------------------------------------------------------
    async def state(self, gpu_uuid: str) -> MigState:
        return await self._call(lambda: self._state(gpu_uuid))

    async def enable(self, gpu_uuid: str) -> MigMode:
        return await self._call(lambda: self._enable(gpu_uuid))

    async def create(
        self, gpu_uuid: str, profile: MigProfileSpec, placement: MigPlacement
    ) -> MigInstance:
        return await self._call(lambda: self._create(gpu_uuid, profile, placement))

    async def destroy(self, gpu_uuid: str, gi_id: int) -> None:
        await self._call(lambda: self._destroy(gpu_uuid, gi_id))

    async def busy(self, gpu_uuid: str) -> bool:
        return await self._call(lambda: self._busy(gpu_uuid))


def _quietly(nvml: Any, destroy: Callable[[Any], object], item: Any) -> None:
    # The original error is the one worth reporting.
    with contextlib.suppress(nvml.NVMLError):
        destroy(item)
