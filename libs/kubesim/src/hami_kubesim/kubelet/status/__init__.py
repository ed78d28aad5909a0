"""What the kubelet stand-in records and writes back: :mod:`.allocations` holds the allocation
records of each pod's containers and their JSON annotation form, :mod:`.builders` the pod
status, node capacity patch and message builders.  Both are pure; this package re-exports their
names so ``hami_kubesim.kubelet.status`` stays the one import path of the kubelet's parts."""

from hami_kubesim.kubelet.status.allocations import (
    ALLOCATIONS_ANNOTATION,
    CLAIM_RESOURCE_PREFIX,
    ContainerAllocation,
    DeviceSpecRecord,
    MountRecord,
    PodAllocation,
    ResourceAllocation,
    parse_allocation_record,
)
from hami_kubesim.kubelet.status.builders import (
    IGNORES_SIGTERM_ANNOTATION,
    REASON_CREATE,
    REASON_CREATE_CONFIG,
    REASON_CREATING,
    REASON_UNEXPECTED_ADMISSION,
    admission_failure_message,
    capacity_patch,
    creating_status,
    grpc_error_text,
    next_pod_ip,
    rejected_status,
    running_status,
    start_failed_status,
    stop_delay,
)

__all__ = [
    "ALLOCATIONS_ANNOTATION",
    "CLAIM_RESOURCE_PREFIX",
    "IGNORES_SIGTERM_ANNOTATION",
    "REASON_CREATE",
    "REASON_CREATE_CONFIG",
    "REASON_CREATING",
    "REASON_UNEXPECTED_ADMISSION",
    "ContainerAllocation",
    "DeviceSpecRecord",
    "MountRecord",
    "PodAllocation",
    "ResourceAllocation",
    "admission_failure_message",
    "capacity_patch",
    "creating_status",
    "grpc_error_text",
    "next_pod_ip",
    "parse_allocation_record",
    "rejected_status",
    "running_status",
    "start_failed_status",
    "stop_delay",
]
