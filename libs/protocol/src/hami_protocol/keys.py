"""Every annotation and label key the system reads or writes.  Nowhere else spells them.

Per-vendor keys follow patterns (``hami.io/<word>-devices-to-allocate``); the functions below build
them so vendor rows in :mod:`hami_protocol.vendor.table` stay data.
"""

from __future__ import annotations

from typing import Final

HAMI_PREFIX: Final = "hami.io/"

# --- Pod annotations written by the scheduler at filter / bind -------------------------------
VGPU_NODE: Final = "hami.io/vgpu-node"
"""Node chosen at filter.  Also set as a pod *label* with the same key and value."""
VGPU_TIME: Final = "hami.io/vgpu-time"
"""Unix seconds (decimal string) of the filter decision."""
BIND_TIME: Final = "hami.io/bind-time"
"""Unix seconds (decimal string) written at bind; the device plugin's pending-pod fallback."""
BIND_PHASE: Final = "hami.io/bind-phase"
"""``allocating`` (bind) → ``success`` / ``failed`` (device plugin)."""

BIND_PHASE_ALLOCATING: Final = "allocating"
BIND_PHASE_SUCCESS: Final = "success"
BIND_PHASE_FAILED: Final = "failed"
BIND_PHASES: Final = frozenset({BIND_PHASE_ALLOCATING, BIND_PHASE_SUCCESS, BIND_PHASE_FAILED})

# NVIDIA's pod device-list keys (other vendors: see devices_to_allocate_key()).
NVIDIA_DEVICES_TO_ALLOCATE: Final = "hami.io/vgpu-devices-to-allocate"
NVIDIA_DEVICES_ALLOCATED: Final = "hami.io/vgpu-devices-allocated"
NVIDIA_MIG_ALLOCATIONS: Final = "hami.io/vgpu-mig-allocations"

# --- Node annotations -------------------------------------------------------------------------
NVIDIA_REGISTER: Final = "hami.io/node-nvidia-register"
NVIDIA_SCORE: Final = "hami.io/node-nvidia-score"
NVIDIA_HANDSHAKE: Final = "hami.io/node-handshake"
"""NVIDIA's handshake key has no vendor suffix (older docs say ``-nvidia``; the code never did)."""
LEGACY_NVIDIA_HANDSHAKE: Final = "hami.io/node-handshake-nvidia"
NODE_LOCK: Final = "hami.io/mutex.lock"
DEVICE_CORDON: Final = "hami.io/device-cordon"
RDMA_REGISTER: Final = "hami.io/node-rdma-register"
"""Our own: RDMA NICs and their VFs on a node (JSON, see docs/protocol.md)."""
NODE_ALLOCATE_IDENTITY: Final = "hami.io/node-allocate-identity"
"""Our own: how the node's device plugin tells which pod an Allocate is for.  Its one value,
:data:`ALLOCATE_IDENTITY_POD_RESOURCES`, says the plugin reads the kubelet's PodResources API and
needs no node lock to tell pods apart; absent, binds take the lock (see docs/protocol.md)."""
ALLOCATE_IDENTITY_POD_RESOURCES: Final = "pod-resources"
RDMA_DEVICES_TO_ALLOCATE: Final = "hami.io/rdma-devices-to-allocate"
RDMA_DEVICES_ALLOCATED: Final = "hami.io/rdma-devices-allocated"

# --- Pod policy annotations set by users -------------------------------------------------------
NODE_SCHEDULER_POLICY: Final = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY: Final = "hami.io/gpu-scheduler-policy"
DEVICE_SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"
NVIDIA_USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NVIDIA_NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
NVIDIA_USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NVIDIA_NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
NVIDIA_NUMA_BIND: Final = "nvidia.com/numa-bind"
NVIDIA_VGPU_MODE: Final = "nvidia.com/vgpu-mode"

# --- Labels --------------------------------------------------------------------------------------
SCHEDULER_ROLE_LABEL: Final = "hami.io/scheduler-role"
WEBHOOK_IGNORE_LABEL: Final = "hami.io/webhook"
WEBHOOK_IGNORE_VALUE: Final = "ignore"
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"

# --- Koordinator pod APIs (contracts/koordinator.md §1.1) -------------------------------------
KOORD_DEVICE_JOINT_ALLOCATE: Final = "scheduling.koordinator.sh/device-joint-allocate"
KOORD_DEVICE_ALLOCATE_HINT: Final = "scheduling.koordinator.sh/device-allocate-hint"
KOORD_DEVICE_ALLOCATED: Final = "scheduling.koordinator.sh/device-allocated"


# --- Per-vendor key patterns ---------------------------------------------------------------------
def devices_to_allocate_key(word: str) -> str:
    """``hami.io/<word>-devices-to-allocate`` (NVIDIA's word here is ``vgpu``)."""
    return f"{HAMI_PREFIX}{word}-devices-to-allocate"


def devices_allocated_key(word: str) -> str:
    """``hami.io/<word>-devices-allocated`` (NVIDIA's word here is ``vgpu``)."""
    return f"{HAMI_PREFIX}{word}-devices-allocated"


def node_register_key(word: str) -> str:
    """``hami.io/node-<word>-register`` (NVIDIA, DCU, Iluvatar, AMD, ...)."""
    return f"{HAMI_PREFIX}node-{word}-register"


def node_handshake_key(word: str) -> str:
    """``hami.io/node-handshake-<word>`` (every vendor but NVIDIA, whose key has no suffix)."""
    return f"{HAMI_PREFIX}node-handshake-{word}"


# --- Vendor-specific keys (rows of hami_protocol.vendor.table) ------------------------------------
CAMBRICON_DSMLU_LOCK: Final = "cambricon.com/dsmlu.lock"
"""Cambricon's own node lock: an RFC3339 time, expiring after 2 minutes."""
CAMBRICON_USE_UUID: Final = "cambricon.com/use-gpuuuid"
CAMBRICON_NOUSE_UUID: Final = "cambricon.com/nouse-gpuuuid"
CAMBRICON_USE_TYPE: Final = "cambricon.com/use-mlutype"
CAMBRICON_NOUSE_TYPE: Final = "cambricon.com/nouse-mlutype"
HYGON_USE_UUID: Final = "hygon.com/use-gpuuuid"
HYGON_NOUSE_UUID: Final = "hygon.com/nouse-gpuuuid"
HYGON_USE_TYPE: Final = "hygon.com/use-dcutype"
HYGON_NOUSE_TYPE: Final = "hygon.com/nouse-dcutype"
METAX_SGPU_REGISTER: Final = "metax-tech.com/node-gpu-devices"
"""MetaX sGPU node devices (JSON), written by MetaX's own device plugin."""
METAX_USE_UUID: Final = "metax-tech.com/use-gpuuuid"
METAX_NOUSE_UUID: Final = "metax-tech.com/nouse-gpuuuid"
AMD_USE_GPUTYPE: Final = "amd.com/use-gputype"
AMD_NOUSE_GPUTYPE: Final = "amd.com/nouse-gputype"
AMD_USE_GPU_UUID: Final = "amd.com/use-gpu-uuid"
AMD_NOUSE_GPU_UUID: Final = "amd.com/nouse-gpu-uuid"


def word_register_key(word: str) -> str:
    """``hami.io/node-register-<word>`` ("register" before the word: Ascend and Iluvatar chips)."""
    return f"{HAMI_PREFIX}node-register-{word}"


def use_uuid_key(word: str) -> str:
    """``hami.io/use-<word>-uuid``: UUIDs a pod may use (Ascend, Iluvatar chips)."""
    return f"{HAMI_PREFIX}use-{word}-uuid"


def no_use_uuid_key(word: str) -> str:
    """``hami.io/no-use-<word>-uuid``: UUIDs a pod must not use (Ascend, Iluvatar chips)."""
    return f"{HAMI_PREFIX}no-use-{word}-uuid"
