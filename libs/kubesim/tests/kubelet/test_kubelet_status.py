"""Pure builders of what the kubelet stand-in writes to the API server."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hami_kube.objects import PodView
from hami_kubesim.kubelet.deviceplugins.devices import ResourceDevices
from hami_kubesim.kubelet.status import (
    ContainerAllocation,
    DeviceSpecRecord,
    MountRecord,
    PodAllocation,
    ResourceAllocation,
    admission_failure_message,
    capacity_patch,
    grpc_error_text,
    next_pod_ip,
    rejected_status,
    running_status,
    start_failed_status,
)

NOW = "2025-01-02T03:04:05Z"


@pytest.mark.parametrize(
    ("code", "text"),
    [
        ("UNKNOWN", "rpc error: code = Unknown desc = boom"),
        ("DEADLINE_EXCEEDED", "rpc error: code = DeadlineExceeded desc = boom"),
        ("CANCELLED", "rpc error: code = Canceled desc = boom"),
        ("RESOURCE_EXHAUSTED", "rpc error: code = ResourceExhausted desc = boom"),
    ],
)
def test_grpc_error_text(code: str, text: str) -> None:
    assert grpc_error_text(code, "boom") == text


def test_admission_failure_message() -> None:
    assert admission_failure_message("x") == (
        "Pod was rejected: Allocate failed due to x, which is unexpected"
    )


def _pod(**spec: Any) -> PodView:
    return PodView(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
            "spec": spec,
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": "t0"},
                    {"type": "example.com/gate", "status": "True"},
                ],
            },
        }
    )


def test_running_status_shape() -> None:
    pod = _pod(
        initContainers=[
            {"name": "init", "image": "i"},
            {"name": "side", "image": "s", "restartPolicy": "Always"},
        ],
        containers=[
            {
                "name": "main",
                "image": "m",
                "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    )
    status = running_status(pod, host_ip="10.0.0.1", pod_ip="10.244.0.2", now=NOW)
    assert status["phase"] == "Running"
    assert status["hostIP"] == "10.0.0.1"
    assert status["podIPs"] == [{"ip": "10.244.0.2"}]
    assert status["startTime"] == NOW
    assert status["qosClass"] == "Burstable"  # init containers set no limits
    kinds = {c["type"]: c for c in status["conditions"]}
    assert {"Initialized", "Ready", "ContainersReady", "PodScheduled", "example.com/gate"} <= set(
        kinds
    )
    assert kinds["PodScheduled"]["lastTransitionTime"] == "t0"
    assert [c["name"] for c in status["containerStatuses"]] == ["main"]
    assert status["containerStatuses"][0]["ready"] is True
    assert "running" in status["containerStatuses"][0]["state"]
    init, side = status["initContainerStatuses"]
    assert init["state"]["terminated"]["reason"] == "Completed"
    assert "running" in side["state"]


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({}, "BestEffort"),
        ({"requests": {"cpu": "1"}}, "Burstable"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, "Guaranteed"),
        ({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}, "Burstable"),
        ({"limits": {"nvidia.com/gpu": "1"}}, "BestEffort"),
    ],
)
def test_qos_class(resources: dict[str, Any], qos: str) -> None:
    pod = _pod(containers=[{"name": "c", "resources": resources}])
    assert rejected_status(pod, "m")["qosClass"] == qos


def test_rejected_and_start_failed_status() -> None:
    pod = _pod(containers=[{"name": "a"}, {"name": "b"}])
    status = rejected_status(pod, "Pod was rejected: x")
    assert (status["phase"], status["reason"], status["message"]) == (
        "Failed",
        "UnexpectedAdmissionError",
        "Pod was rejected: x",
    )
    waiting = start_failed_status(pod, "b", "nope")
    assert waiting["phase"] == "Pending"
    assert waiting["containerStatuses"][1]["state"]["waiting"] == {
        "reason": "CreateContainerConfigError",
        "message": "nope",
    }


def test_capacity_patch() -> None:
    patch = capacity_patch(
        {
            "a.io/x": ResourceDevices(frozenset({"1", "2"}), frozenset({"3"})),
            "b.io/y": None,
        }
    )
    assert patch == {
        "status": {
            "capacity": {"a.io/x": "3", "b.io/y": "0"},
            "allocatable": {"a.io/x": "2", "b.io/y": "0"},
        }
    }


def test_allocation_annotation_json() -> None:
    allocation = PodAllocation(
        namespace="ns",
        name="p",
        uid="u",
        node="n1",
        containers=(
            ContainerAllocation(
                "main",
                "app",
                (
                    ResourceAllocation(
                        resource="nvidia.com/gpu",
                        device_ids=("g0", "g1"),
                        envs={"B": "2", "A": "1"},
                        mounts=(MountRecord("/c", "/h", True),),
                        devices=(DeviceSpecRecord("/dev/x", "/dev/y", "rw"),),
                        annotations={"k": "v"},
                        cdi_devices=("vendor.com/gpu=0",),
                    ),
                ),
            ),
            ContainerAllocation("sidecar-free", "app"),
        ),
    )
    assert allocation.has_devices
    decoded = json.loads(allocation.annotation_value())
    assert decoded["node"] == "n1"
    main = decoded["containers"][0]
    assert main["name"] == "main"
    assert main["kind"] == "app"
    assert main["resources"][0] == {
        "resource": "nvidia.com/gpu",
        "deviceIDs": ["g0", "g1"],
        "envs": {"A": "1", "B": "2"},
        "mounts": [{"containerPath": "/c", "hostPath": "/h", "readOnly": True}],
        "devices": [{"containerPath": "/dev/x", "hostPath": "/dev/y", "permissions": "rw"}],
        "annotations": {"k": "v"},
        "cdiDevices": ["vendor.com/gpu=0"],
    }
    assert decoded["containers"][1]["resources"] == []
    container = allocation.container("main")
    assert container is not None
    assert container.envs == {"B": "2", "A": "1"}
    assert allocation.container("missing") is None


def test_next_pod_ip() -> None:
    assert next_pod_ip("10.244.3.0/24", frozenset(), node="n") == "10.244.3.2"
    assert next_pod_ip("10.244.3.0/30", frozenset(), node="n") == "10.244.3.2"
    with pytest.raises(RuntimeError, match="exhausted"):
        next_pod_ip("10.244.3.0/30", frozenset({"10.244.3.2"}), node="n")
