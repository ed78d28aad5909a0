"""Pure builders for what the kubelet stand-in writes back to the API server (the pod status
writes are sent by :mod:`hami_kubesim.kubelet.pods.statusmanager`).

The pod status of an admitted (Running) pod, of a pod the kubelet rejected
(``Failed``/``UnexpectedAdmissionError``), of a pod whose container could not start and of one
whose sandbox is not created yet; the node-status patch for device capacity; the next free pod
IP; how long a pod's containers take to stop; and the Go-style text of a gRPC error as the
kubelet prints it.  The allocation records these pods carry are :mod:`.allocations`.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping
from typing import Any

from hami_kube.objects import ContainerView, PodView
from hami_kubesim.kubelet.deviceplugins.devices import ResourceDevices

REASON_UNEXPECTED_ADMISSION = "UnexpectedAdmissionError"
REASON_CREATE_CONFIG = "CreateContainerConfigError"
REASON_CREATE = "CreateContainerError"
REASON_CREATING = "ContainerCreating"
IGNORES_SIGTERM_ANNOTATION = "kubesim.hami.io/ignores-sigterm"
"""``"true"`` on a pod: its containers ignore SIGTERM, so stopping them takes the whole grace
period (:func:`stop_delay`); the kubelet stand-in otherwise takes them as stopped at once."""

_GO_CODE_NAMES = {"CANCELLED": "Canceled", "OK": "OK"}


def grpc_error_text(code_name: str, details: str) -> str:
    """A gRPC status as Go's ``status.Error`` prints it (``code = DeadlineExceeded`` style)."""
    go_name = _GO_CODE_NAMES.get(code_name) or "".join(
        part.capitalize() for part in code_name.split("_")
    )
    return f"rpc error: code = {go_name} desc = {details}"


def admission_failure_message(error_text: str) -> str:
    """The pod message of a device-manager admission failure (kubelet ``rejectPod``)."""
    return f"Pod was rejected: Allocate failed due to {error_text}, which is unexpected"


def _condition(kind: str, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}


def _qos_class(pod: PodView) -> str:
    guaranteed, any_set = True, False
    for container in pod.all_containers():
        limits = container.limits
        requests = {**limits, **container.requests}
        for name in ("cpu", "memory"):
            any_set = any_set or name in requests or name in limits
            if name not in limits or requests.get(name) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _container_id(pod_uid: str, name: str) -> str:
    return f"kubesim://{pod_uid}/{name}"


def running_status(pod: PodView, *, host_ip: str, pod_ip: str, now: str) -> dict[str, Any]:
    """The status a kubelet reports once every container of ``pod`` is started and ready.

    Init containers are shown as completed, sidecars (restartable init containers) and app
    containers as running. Conditions the kubelet does not own (e.g. custom readiness gates) are
    kept; ``PodScheduled`` keeps its transition time.
    """
    status = pod.status
    uid = pod.uid
    ours = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
    kept = [c for c in status.get("conditions") or [] if c.get("type") not in ours]
    if not any(c.get("type") == "PodScheduled" for c in kept):
        kept.append(_condition("PodScheduled", now))
    init_statuses = []
    for container in pod.init_containers:
        cid = _container_id(uid, container.name)
        sidecar = container.restart_policy == "Always"
        state: dict[str, Any] = (
            {"running": {"startedAt": now}}
            if sidecar
            else {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": now,
                    "finishedAt": now,
                    "containerID": cid,
                }
            }
        )
        init_statuses.append(_container_status(container, cid, state, started=sidecar))
    app_statuses = [
        _container_status(
            c,
            _container_id(uid, c.name),
            {"running": {"startedAt": now}},
            started=True,
        )
        for c in pod.containers
    ]
    out: dict[str, Any] = {
        "phase": "Running",
        "conditions": [*(_condition(kind, now) for kind in ours), *kept],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": status.get("startTime") or now,
        "containerStatuses": app_statuses,
        "qosClass": status.get("qosClass") or _qos_class(pod),
    }
    if init_statuses:
        out["initContainerStatuses"] = init_statuses
    return out


def _container_status(
    container: ContainerView, cid: str, state: dict[str, Any], *, started: bool
) -> dict[str, Any]:
    return {
        "name": container.name,
        "image": container.image,
        "imageID": "",
        "containerID": cid,
        "ready": True,
        "started": started,
        "restartCount": 0,
        "state": state,
        "lastState": {},
    }


def rejected_status(
    pod: PodView, message: str, *, reason: str = REASON_UNEXPECTED_ADMISSION
) -> dict[str, Any]:
    """Kubelet ``rejectPod``: phase Failed with the admission reason and message."""
    status = pod.status
    return {
        "phase": "Failed",
        "reason": reason,
        "message": message,
        "qosClass": status.get("qosClass") or _qos_class(pod),
    }


def start_failed_status(
    pod: PodView, container: str, message: str, *, reason: str = REASON_CREATE_CONFIG
) -> dict[str, Any]:
    """A container that could not be started (``PreStartContainer`` failed, or the runtime
    could not create it: ``reason``): the pod stays Pending."""
    statuses = [
        _waiting_status(
            c,
            {"reason": reason, "message": message}
            if c.name == container
            else {"reason": "PodInitializing"},
        )
        for c in pod.containers
    ]
    return {"phase": "Pending", "containerStatuses": statuses}


def _waiting_status(container: ContainerView, waiting: dict[str, Any]) -> dict[str, Any]:
    """The status of a container not created yet."""
    return {
        "name": container.name,
        "image": container.image,
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "state": {"waiting": waiting},
    }


def creating_status(pod: PodView, *, now: str) -> dict[str, Any]:
    """A pod whose sandbox is not created yet (its DRA claims could not be prepared): Pending,
    ``PodReadyToStartContainers`` false, every container waiting in ``ContainerCreating``."""
    condition = {**_condition("PodReadyToStartContainers", now), "status": "False"}
    kept = [
        c
        for c in pod.status.get("conditions") or []
        if c.get("type") != "PodReadyToStartContainers"
    ]
    return {
        "phase": "Pending",
        "conditions": [condition, *kept],
        "containerStatuses": [
            _waiting_status(c, {"reason": REASON_CREATING}) for c in pod.containers
        ],
    }


def capacity_patch(resources: Mapping[str, ResourceDevices | None]) -> dict[str, dict[str, Any]]:
    """A nodes/status merge patch for device-plugin resources.

    ``None`` marks a resource whose plugin is gone past the grace period: the kubelet then
    reports capacity 0 for it (and allocatable follows).
    """
    capacity = {name: str(d.capacity if d else 0) for name, d in sorted(resources.items())}
    allocatable = {name: str(d.allocatable if d else 0) for name, d in sorted(resources.items())}
    return {"status": {"capacity": capacity, "allocatable": allocatable}}


def next_pod_ip(pod_cidr: str, taken: frozenset[str], *, node: str) -> str:
    """The first free pod address of ``pod_cidr``; the first host address is left to the node's
    bridge, as on a real node. ``RuntimeError`` when the range is exhausted."""
    network = ipaddress.ip_network(pod_cidr, strict=False)
    for address in itertools.islice(network.hosts(), 1, None):
        if str(address) not in taken:
            return str(address)
    raise RuntimeError(f"pod CIDR {pod_cidr} of {node} is exhausted")


def stop_delay(pod: PodView, *, cap: float) -> float:
    """Seconds the containers of ``pod``, marked for deletion, take to stop: its
    ``deletionGracePeriodSeconds`` (at most ``cap``) when it ignores SIGTERM
    (:data:`IGNORES_SIGTERM_ANNOTATION`) — the kubelet then kills them with SIGKILL — else 0,
    as for a container that exits on SIGTERM and no process that runs."""
    if pod.annotations.get(IGNORES_SIGTERM_ANNOTATION) != "true":
        return 0.0
    grace = pod.meta.get("deletionGracePeriodSeconds")
    if not isinstance(grace, int) or isinstance(grace, bool) or grace <= 0:
        return 0.0
    return float(min(grace, cap))
