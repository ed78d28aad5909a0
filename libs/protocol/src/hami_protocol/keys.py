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
"""Our own: how the node's device plugin tells which pod an Allocate is for, stamped with when it
last said so (:mod:`hami_protocol.node.identity`).  Its one mode,
:data:`ALLOCATE_IDENTITY_POD_RESOURCES`, says the plugin reads the kubelet's PodResources API and
needs no node lock to tell pods apart; absent or stale, binds take the lock (docs/protocol.md)."""
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
METAX_SGPU_DEVICES: Final = "metax-tech.com/node-gpu-devices"
"""MetaX sGPU node devices (MetaX's own JSON list), written by MetaX's device plugin."""
METAX_SGPU_REGISTER: Final = METAX_SGPU_DEVICES
"""Older name of :data:`METAX_SGPU_DEVICES`."""
METAX_USE_UUID: Final = "metax-tech.com/use-gpuuuid"
METAX_NOUSE_UUID: Final = "metax-tech.com/nouse-gpuuuid"
AMD_USE_GPUTYPE: Final = "amd.com/use-gputype"
AMD_NOUSE_GPUTYPE: Final = "amd.com/nouse-gputype"
AMD_USE_GPU_UUID: Final = "amd.com/use-gpu-uuid"
AMD_NOUSE_GPU_UUID: Final = "amd.com/nouse-gpu-uuid"


# Ascend (per common word; see the functions below for the per-chip keys)
ASCEND_VNPU_MODE: Final = "huawei.com/vnpu-mode"
"""Pod annotation: ``hami-core`` asks for a soft (HAMi-core) split instead of a template vNPU."""
ASCEND_NODE_VNPU_CORE: Final = "hami-vnpu-core"
"""Node annotation ``"true"``/``"false"``: overrides ``vnpus.hamiVnpuCore`` for that node."""
ASCEND_PREDICATE_TIME: Final = "predicate-time"
ASCEND_VISIBLE_DEVICES_ENV: Final = "ASCEND_VISIBLE_DEVICES"

# AWS Neuron
AWS_NEURON_DEVICES_ALLOCATED: Final = "hami.io/aws-neuron-devices-allocated"
AWS_NEURON_USE_UUID: Final = "aws.amazon.com/use-neuron-uuid"
AWS_NEURON_NOUSE_UUID: Final = "aws.amazon.com/nouse-neuron-uuid"
AWS_NEURON_PREDICATE_NODE: Final = "aws.amazon.com/predicate-node"
AWS_NEURON_IDS: Final = "AWS_NEURON_IDS"
AWS_NEURON_RESOURCE_TYPE: Final = "NEURON_RESOURCE_TYPE"
AWS_NEURON_ALLOC_TIME: Final = "NEURON_ALLOC_TIME"
AWS_NEURON_ALLOCATED: Final = "NEURON_ALLOCATED"
AWS_INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"

# Biren
BIREN_REGISTER: Final = "hami.io/node-biren-register"
BIREN_HANDSHAKE: Final = "hami.io/node-handshake-biren"
BIREN_DEVICES_TO_ALLOCATE: Final = "hami.io/Biren-devices-to-allocate"
BIREN_DEVICES_ALLOCATED: Final = "hami.io/Biren-devices-allocated"
BIREN_USE_UUID: Final = "birentech.com/use-gpuuuid"
BIREN_NOUSE_UUID: Final = "birentech.com/nouse-gpuuuid"

# Cambricon pod annotations (the node lock is CAMBRICON_DSMLU_LOCK above)
CAMBRICON_DSMLU_ASSIGNED: Final = "CAMBRICON_DSMLU_ASSIGNED"
CAMBRICON_DSMLU_PROFILE: Final = "CAMBRICON_DSMLU_PROFILE"

# Enflame: whole GCUs (capacity) and DRS slices (vendor annotation)
ENFLAME_GCU_DEVICES_TO_ALLOCATE: Final = "hami.io/enflame-gcu-devices-to-allocate"
ENFLAME_GCU_DEVICES_ALLOCATED: Final = "hami.io/enflame-gcu-devices-allocated"
ENFLAME_DRS_CAPACITY: Final = "enflame.com/gcu-drs-capacity"
"""Node annotation Enflame's DRS plugin writes: devices and slice profiles (JSON)."""
ENFLAME_VGPU_DEVICES_ALLOCATED: Final = "hami.io/enflame-vgpu-devices-allocated"
ENFLAME_USE_UUID: Final = "enflame.com/use-gpuuuid"
ENFLAME_NOUSE_UUID: Final = "enflame.com/nouse-gpuuuid"
ENFLAME_GCU_ASSIGNED: Final = "enflame.com/gcu-assigned"
ENFLAME_GCU_ASSIGNED_TIME: Final = "enflame.com/gcu-assigned-time"
ENFLAME_ASSIGNED_CONTAINERS: Final = "assigned-containers"
ENFLAME_GCU_ASSIGNED_INDEX: Final = "enflame.com/gcu-assigned-index"
ENFLAME_GCU_ASSIGNED_ID: Final = "enflame.com/gcu-assigned-id"
ENFLAME_GCU_ASSIGNED_MINOR: Final = "enflame.com/gcu-assigned-minor"
ENFLAME_GCU_REQUEST_SIZE: Final = "enflame.com/gcu-request-size"

# Iluvatar
ILUVATAR_CONTAINER_NAME_ENV: Final = "SOL_CONTINER_NAME"
"""Set by the webhook to the container's name; HAMi spells it so (sic)."""

# Kunlunxin: whole XPUs (capacity) and vXPUs (JSON register)
KUNLUN_ALLOCATED: Final = "hami.io/kunlun-allocated"
KUNLUN_DEVICE_IDX: Final = "BAIDU_COM_DEVICE_IDX"
KUNLUN_USE_UUID: Final = "hami.io/use-xpu-uuid"
KUNLUN_NOUSE_UUID: Final = "hami.io/no-use-xpu-uuid"
KUNLUN_LEGACY_USE_UUID: Final = "baidu.com/use-gpuuuid"
KUNLUN_LEGACY_NOUSE_UUID: Final = "baidu.com/nouse-gpuuuid"
XPU_REGISTER: Final = "hami.io/node-register-xpu"
XPU_HANDSHAKE: Final = "hami.io/node-handshake-xpu"
XPU_DEVICES_TO_ALLOCATE: Final = "hami.io/xpu-devices-to-allocate"
XPU_DEVICES_ALLOCATED: Final = "hami.io/xpu-devices-allocated"

# MetaX sGPU pod annotations
METAX_SGPU_QOS_POLICY: Final = "metax-tech.com/sgpu-qos-policy"
METAX_SGPU_APP_CLASS: Final = "metax-tech.com/sgpu-app-class"
METAX_SGPU_TOPOLOGY_AWARE: Final = "metax-tech.com/sgpu-topology-aware"
METAX_GPU_DEVICES_ALLOCATED: Final = "metax-tech.com/gpu-devices-allocated"
METAX_PREDICATE_TIME: Final = "metax-tech.com/predicate-time"
METAX_GPU_TOPOLOGY_LOSSES: Final = "metax-tech.com/gpu.topology.losses"
METAX_GPU_TOPOLOGY_SCORES: Final = "metax-tech.com/gpu.topology.scores"
METAX_QOS_BEST_EFFORT: Final = "best-effort"
METAX_QOS_FIXED_SHARE: Final = "fixed-share"
METAX_QOS_BURST_SHARE: Final = "burst-share"
METAX_QOS_POLICIES: Final = (METAX_QOS_BEST_EFFORT, METAX_QOS_FIXED_SHARE, METAX_QOS_BURST_SHARE)
METAX_APP_CLASSES: Final = ("online", "offline")

# Moore Threads
MTHREADS_USE_UUID: Final = "mthreads.ai/use-gpuuuid"
MTHREADS_NOUSE_UUID: Final = "mthreads.ai/nouse-gpuuuid"
MTHREADS_REQUEST_GPU_NUM: Final = "mthreads.com/request-gpu-num"
MTHREADS_GPU_INDEX: Final = "mthreads.com/gpu-index"
MTHREADS_PREDICATE_TIME: Final = "mthreads.com/predicate-time"
MTHREADS_PREDICATE_NODE: Final = "mthreads.com/predicate-node"

# Vastai
VASTAI_REGISTER: Final = "hami.io/node-va-register"
VASTAI_HANDSHAKE: Final = "hami.io/node-handshake-va"
VASTAI_DEVICES_TO_ALLOCATE: Final = "hami.io/Vastai-devices-to-allocate"
VASTAI_DEVICES_ALLOCATED: Final = "hami.io/Vastai-devices-allocated"
VASTAI_USE_UUID: Final = "vastaitech.com/use-gpuuuid"
VASTAI_NOUSE_UUID: Final = "vastaitech.com/nouse-gpuuuid"


def word_register_key(word: str) -> str:
    """``hami.io/node-register-<word>`` ("register" before the word: Ascend and Iluvatar chips)."""
    return f"{HAMI_PREFIX}node-register-{word}"


def use_uuid_key(word: str) -> str:
    """``hami.io/use-<word>-uuid``: UUIDs a pod may use (Ascend, Iluvatar chips)."""
    return f"{HAMI_PREFIX}use-{word}-uuid"


def no_use_uuid_key(word: str) -> str:
    """``hami.io/no-use-<word>-uuid``: UUIDs a pod must not use (Ascend, Iluvatar chips)."""
    return f"{HAMI_PREFIX}no-use-{word}-uuid"
