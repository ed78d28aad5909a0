"""Container environment variable names: the contract with HAMi-core inside the container.

The webhook writes some of them at admission and the device plugin the rest at Allocate; the
in-container limiter (HAMi-core, ``libvgpu.so``) reads them.  Spelled only here.
"""

from __future__ import annotations

from typing import Final

NVIDIA_VISIBLE_DEVICES: Final = "NVIDIA_VISIBLE_DEVICES"
"""Comma-joined GPU UUIDs the container sees (``none`` for containers without GPUs)."""
CUDA_TASK_PRIORITY: Final = "CUDA_TASK_PRIORITY"
"""From the priority resource (``nvidia.com/priority``); 0 is the highest priority."""
GPU_CORE_UTILIZATION_POLICY: Final = "GPU_CORE_UTILIZATION_POLICY"
"""``default`` / ``force`` / ``disable``: how HAMi-core enforces the core limit."""
CUDA_DEVICE_SM_LIMIT: Final = "CUDA_DEVICE_SM_LIMIT"
"""Core percentage of the container's first device."""
CUDA_DEVICE_MEMORY_SHARED_CACHE: Final = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
"""Path of the shared-memory usage cache file HAMi-core maps."""
CUDA_OVERSUBSCRIBE: Final = "CUDA_OVERSUBSCRIBE"
"""``true`` when device memory is scaled above the physical size."""
LIBCUDA_LOG_LEVEL: Final = "LIBCUDA_LOG_LEVEL"
CUDA_DISABLE_CONTROL: Final = "CUDA_DISABLE_CONTROL"
"""Set by a user to run without HAMi-core (no ``/etc/ld.so.preload`` mount)."""

_MEMORY_LIMIT_PREFIX: Final = "CUDA_DEVICE_MEMORY_LIMIT_"


def cuda_device_memory_limit(index: int) -> str:
    """``CUDA_DEVICE_MEMORY_LIMIT_<index>``: the memory limit of the container's index-th device."""
    return f"{_MEMORY_LIMIT_PREFIX}{index}"
