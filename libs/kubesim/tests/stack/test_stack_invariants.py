"""The invariant checker on hand-built cluster snapshots: each rule fires when broken, and only
then."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami_kube.timefmt import format_time
from hami_kubesim.stack.checks.invariants import (
    check_all,
    check_devices,
    check_env,
    check_locks,
    check_mig,
    check_outcomes,
    check_replicas,
)
from hami_kubesim.stack.checks.locks import stale_locks
from hami_kubesim.stack.state import (
    ALLOCATIONS_ANNOTATION,
    ClusterState,
    LockMoment,
    Outcome,
    PodMoment,
    Timeline,
    device_loads,
    outcome,
    stage,
)
from hami_protocol import keys
from hami_protocol.node.lock import NodeLock, encode_node_lock
from hami_protocol.node.registry import (
    DeviceInfo,
    MigPlacement,
    MigProfile,
    encode_node_devices_json,
)
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices

NOW = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
GPU_A, GPU_B = "GPU-aaaa", "GPU-bbbb"


def node(name: str = "n1", *, lock: str | None = None, devmem: int = 16000) -> dict[str, Any]:
    devices = [
        DeviceInfo(
            id=uuid,
            index=i,
            count=4,
            devmem=devmem,
            devcore=100,
            type="NVIDIA-T4",
            numa=0,
            health=True,
        )
        for i, uuid in enumerate((GPU_A, GPU_B))
    ]
    annotations = {keys.NVIDIA_REGISTER: encode_node_devices_json(devices)}
    if lock is not None:
        annotations[keys.NODE_LOCK] = lock
    return {"metadata": {"name": name, "annotations": annotations}}


def pod(
    name: str,
    containers: list[list[tuple[str, int, int]]],
    *,
    phase: str = "Running",
    node_name: str = "n1",
    envs: dict[str, dict[str, str]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    status_reason: str = "",
    replicas: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """A pod placed on ``node_name``; ``envs`` per container name writes the kubelet's record,
    whose device IDs are one replica of each allocated GPU unless ``replicas`` says others."""
    allocated = encode_pod_devices(
        tuple(tuple(ContainerDevice(u, "NVIDIA", m, c) for u, m, c in cs) for cs in containers)
    )
    names = [f"c{i}" for i in range(len(containers))]
    annotations = {keys.VGPU_NODE: node_name, keys.NVIDIA_DEVICES_ALLOCATED: allocated}
    if envs is not None:
        given = {
            n: [f"{uuid}-{name}{i}" for i, (uuid, _, _) in enumerate(cs)]
            for n, cs in zip(names, containers, strict=True)
        }
        given.update(replicas or {})
        record = {
            "node": node_name,
            "containers": [
                {
                    "name": n,
                    "resources": [
                        {"resource": "nvidia.com/gpu", "deviceIDs": given[n], "envs": envs[n]}
                    ]
                    if n in envs
                    else [],
                }
                for n in names
            ],
        }
        annotations["kubesim.hami.io/container-allocations"] = json.dumps(record)
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if status_reason:
        status["reason"] = status_reason
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": annotations,
        },
        "spec": {"nodeName": node_name, "containers": [{"name": n} for n in names]},
        "status": status,
    }


def good_env(uuid: str, mem: int, cores: int) -> dict[str, str]:
    return {
        "NVIDIA_VISIBLE_DEVICES": uuid,
        "CUDA_DEVICE_MEMORY_LIMIT_0": f"{mem}m",
        "CUDA_DEVICE_SM_LIMIT": str(cores),
    }


def state(
    pods: list[dict[str, Any]],
    nodes: list[dict[str, Any]] | None = None,
    events: list[dict[str, Any]] | None = None,
) -> ClusterState:
    return ClusterState(tuple(pods), tuple(nodes or [node()]), tuple(events or []), NOW)


def test_a_consistent_cluster_has_no_violation() -> None:
    pods = [
        pod("a", [[(GPU_A, 8000, 50)]], envs={"c0": good_env(GPU_A, 8000, 50)}),
        pod("b", [[(GPU_A, 8000, 50)]], envs={"c0": good_env(GPU_A, 8000, 50)}),
    ]
    assert check_all(state(pods)) == ()
    load = device_loads(state(pods))["n1"][GPU_A]
    assert (load.memory, load.cores, load.slots) == (16000, 100, 2)


@pytest.mark.parametrize(
    ("second", "what"),
    [
        ([[(GPU_A, 9000, 10)]], "memory (MiB) over-committed: 17000 > 16000"),
        ([[(GPU_A, 1000, 60)]], "cores (%) over-committed: 110 > 100"),
        ([[("GPU-unknown", 1000, 10)]], "not registered"),
    ],
)
def test_over_commitment_is_found(second: list[list[tuple[str, int, int]]], what: str) -> None:
    pods = [pod("a", [[(GPU_A, 8000, 50)]]), pod("b", second)]
    messages = [v.message for v in check_devices(state(pods))]
    assert any(what in m for m in messages), messages


def test_slots_and_exclusive_use_are_checked() -> None:
    slots = [pod(f"p{i}", [[(GPU_B, 100, 1)]]) for i in range(5)]
    assert any("task slots over-committed: 5 > 4" in v.message for v in check_devices(state(slots)))
    exclusive = [pod("whole", [[(GPU_A, 0, 100)]]), pod("other", [[(GPU_A, 100, 0)]])]
    assert any("holds every core" in v.message for v in check_devices(state(exclusive)))


def test_pods_that_hold_nothing_are_not_counted() -> None:
    done = pod("done", [[(GPU_A, 16000, 100)]], phase="Succeeded")
    # Filtered, then the bind failed: not bound, so it holds nothing whatever it carries.
    unbound = pod("unbound", [[(GPU_A, 16000, 100)]], phase="Pending", node_name="n1")
    unbound["spec"].pop("nodeName")
    running = pod("running", [[(GPU_A, 16000, 100)]])
    assert check_devices(state([done, unbound, running])) == []


def test_a_pod_bound_elsewhere_than_placed_is_found() -> None:
    moved = pod("moved", [[(GPU_A, 1000, 10)]])
    moved["spec"]["nodeName"] = "n2"
    found = check_devices(state([moved], nodes=[node(), node("n2")]))
    assert any("placed on n1 but bound to n2" in v.message for v in found)


@pytest.mark.parametrize(
    ("envs", "problem"),
    [
        ({"c0": good_env(GPU_B, 8000, 50)}, "NVIDIA_VISIBLE_DEVICES"),
        ({"c0": good_env(GPU_A, 4000, 50)}, "CUDA_DEVICE_MEMORY_LIMIT_0"),
        ({"c0": good_env(GPU_A, 8000, 20)}, "CUDA_DEVICE_SM_LIMIT"),
        ({}, "given no nvidia.com/gpu"),
    ],
)
def test_env_that_disagrees_with_the_allocation_is_found(
    envs: dict[str, dict[str, str]], problem: str
) -> None:
    found = check_env(state([pod("a", [[(GPU_A, 8000, 50)]], envs=envs)]))
    assert any(problem in v.message for v in found), found


def test_env_for_a_container_without_devices_is_found() -> None:
    bad = pod(
        "a",
        [[(GPU_A, 8000, 50)], []],
        envs={"c0": good_env(GPU_A, 8000, 50), "c1": good_env(GPU_A, 1, 1)},
    )
    assert any("without an allocation" in v.message for v in check_env(state([bad])))
    missing = pod("b", [[(GPU_A, 8000, 50)]])
    assert any("no allocation record" in v.message for v in check_env(state([missing])))


def test_locks_may_linger_but_must_not_refuse_binds_after_expiry() -> None:
    acquired = NOW - timedelta(seconds=30)
    lock = encode_node_lock(NodeLock(acquired, "default", "owner"))
    timeout = timedelta(seconds=10)
    lingering = state([], nodes=[node(lock=lock)])
    assert check_locks(lingering, lock_timeout=timeout) == []
    assert stale_locks(lingering, lock_timeout=timeout) == ["n1"]

    refusal = {
        "reason": "FailedScheduling",
        "message": "binding rejected: node n1 has been locked within 10s",
        "lastTimestamp": format_time(NOW - timedelta(seconds=5)),
        "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
    }
    refused = state([], nodes=[node(lock=lock)], events=[refusal])
    assert [v.check for v in check_locks(refused, lock_timeout=timeout)] == ["locks"]
    # A refusal while the lock was still valid is the lock working.
    refusal["lastTimestamp"] = format_time(acquired + timedelta(seconds=2))
    assert check_locks(refused, lock_timeout=timeout) == []
    unreadable = state([], nodes=[node(lock="garbage")])
    assert [v.check for v in check_locks(unreadable)] == ["locks"]


def _scheduled(status: str, reason: str) -> list[dict[str, Any]]:
    return [{"type": "PodScheduled", "status": status, "reason": reason}]


def _not_scheduled(name: str, reason: str, message: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """An unassigned pod whose PodScheduled condition says ``reason``, and its event."""
    waiting = pod(name, [[(GPU_A, 1, 1)]], phase="Pending", conditions=_scheduled("False", reason))
    waiting["spec"].pop("nodeName")
    event = {
        "reason": "FailedScheduling",
        "message": message,
        "involvedObject": {"kind": "Pod", "uid": f"uid-{name}"},
    }
    return waiting, event


def test_every_pod_must_end_somewhere() -> None:
    pending = pod("pending", [[(GPU_A, 1, 1)]], phase="Pending")
    waiting, event = _not_scheduled("waiting", "Unschedulable", "0/1 nodes are available")
    failed_silently = pod("failed", [[(GPU_A, 1, 1)]], phase="Failed")
    failed_loudly = pod(
        "failed-ok", [[(GPU_A, 1, 1)]], phase="Failed", status_reason="UnexpectedAdmissionError"
    )
    snapshot = state([pending, waiting, failed_silently, failed_loudly], events=[event])
    found = {v.subject: v.message for v in check_outcomes(snapshot)}
    assert set(found) == {"default/pending", "default/failed"}
    assert outcome(snapshot, waiting) is Outcome.UNSCHEDULABLE
    assert stage(snapshot, pending) == "starting (Allocate)"


def test_a_scheduler_error_is_still_in_flight() -> None:
    retried, event = _not_scheduled("retried", "SchedulerError", "binding rejected")
    snapshot = state([retried], events=[event])
    assert outcome(snapshot, retried) is Outcome.IN_FLIGHT
    assert stage(snapshot, retried) == "binding"


def test_an_unschedulable_pod_the_scheduler_retries_is_still_in_flight() -> None:
    # Its condition still says Unschedulable (the scheduler rewrites it only at the next
    # attempt), but a node change has moved it back to the scheduling queue: not settled.
    waiting, event = _not_scheduled("waiting", "Unschedulable", "0/1 nodes are available")
    waiting["metadata"]["annotations"].pop("hami.io/vgpu-node", None)
    parked = state([waiting], events=[event])
    assert outcome(parked, waiting) is Outcome.UNSCHEDULABLE
    retried = dataclasses.replace(parked, retrying=frozenset({"default/waiting"}))
    assert outcome(retried, waiting) is Outcome.IN_FLIGHT
    assert stage(retried, waiting) == "retrying"
    assert [v.subject for v in check_outcomes(retried)] == ["default/waiting"]


# ----- kubelet replicas and the GPUs they name ----------------------------------------------


def test_no_two_containers_hold_the_same_replica() -> None:
    env = {"c0": good_env(GPU_A, 1000, 10)}
    a = pod("a", [[(GPU_A, 1000, 10)]], envs=env, replicas={"c0": [f"{GPU_A}-3"]})
    b = pod("b", [[(GPU_A, 1000, 10)]], envs=env, replicas={"c0": [f"{GPU_A}-3"]})
    found = check_replicas(state([a, b]))
    assert [(v.subject, v.message) for v in found] == [
        (f"n1/{GPU_A}-3", "nvidia.com/gpu held by default/a/c0, default/b/c0")
    ]
    assert any(v.check == "replicas" for v in check_all(state([a, b])))
    # A pod that ended holds nothing any more.
    b["status"]["phase"] = "Succeeded"
    assert check_replicas(state([a, b])) == []


def test_a_container_may_reuse_a_finished_init_containers_replica_of_its_own_pod() -> None:
    both = pod(
        "p",
        [[(GPU_A, 1000, 10)], [(GPU_A, 1000, 10)]],
        envs={"c0": good_env(GPU_A, 1000, 10), "c1": good_env(GPU_A, 1000, 10)},
        replicas={"c0": [f"{GPU_A}-1"], "c1": [f"{GPU_A}-1"]},
    )
    assert [v.check for v in check_replicas(state([both]))] == ["replicas"]  # two app containers
    record = json.loads(both["metadata"]["annotations"][ALLOCATIONS_ANNOTATION])
    record["containers"][0]["kind"] = "init"
    both["metadata"]["annotations"][ALLOCATIONS_ANNOTATION] = json.dumps(record)
    assert check_replicas(state([both])) == []


def test_env_naming_other_gpus_than_the_kubelet_allocated_is_found() -> None:
    # HAMi #3096: the kubelet chose a replica of GPU B, the plugin answered with GPU A's env.
    swapped = pod(
        "a",
        [[(GPU_A, 1000, 10)]],
        envs={"c0": good_env(GPU_A, 1000, 10)},
        replicas={"c0": [f"{GPU_B}-0"]},
    )
    (found,) = check_env(state([swapped]))
    assert found.subject == "default/a/c0"
    assert found.message.startswith(f"the kubelet allocated replicas of ['{GPU_B}']")


def test_a_pod_not_placed_by_the_scheduler_must_get_no_gpu() -> None:
    default = pod("d", [[(GPU_A, 1000, 10)]], envs={"c0": good_env(GPU_A, 1000, 10)})
    del default["metadata"]["annotations"][keys.NVIDIA_DEVICES_ALLOCATED]
    (found,) = check_env(state([default]))
    assert found.subject == "default/d"
    assert "got nvidia.com/gpu from the device plugin but the pod has no device decision" in (
        found.message
    )
    default["metadata"]["annotations"].pop(ALLOCATIONS_ANNOTATION)
    assert check_env(state([default])) == []


# ----- node locks judged by the timeline -------------------------------------------------------

TIMEOUT = timedelta(seconds=3)
ACQUIRED = NOW - timedelta(seconds=20)
LOCK = encode_node_lock(NodeLock(ACQUIRED, "default", "owner"))


def _refused_at(
    when: datetime, message: str = "node n1 has been locked within 3s"
) -> dict[str, Any]:
    return {
        "reason": "FailedScheduling",
        "message": f"binding rejected: {message}",
        "firstTimestamp": format_time(when),
        "lastTimestamp": format_time(when),
        "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
    }


def _owner(at: datetime, **fields: Any) -> PodMoment:
    return PodMoment(at=at, key="default/owner", **{"exists": True, "node": "n1", **fields})


def _judged(refusal_at: datetime, *moments: PodMoment, lock: str | None = LOCK) -> list[str]:
    timeline = Timeline(
        since=NOW - timedelta(seconds=60),
        locks=(LockMoment(ACQUIRED, "n1", lock),),
        pods=tuple(moments),
    )
    snapshot = dataclasses.replace(
        state([], nodes=[node()], events=[_refused_at(refusal_at)]), timeline=timeline
    )
    return [v.message for v in check_locks(snapshot, lock_timeout=TIMEOUT)]


def test_a_lock_whose_owner_waits_may_refuse_at_any_age() -> None:
    waiting = _owner(ACQUIRED, bind_phase="allocating")
    assert _judged(NOW - timedelta(seconds=1), waiting) == []


def test_a_lock_whose_owner_had_finished_or_gone_must_not_refuse() -> None:
    start = _owner(ACQUIRED, bind_phase="allocating")
    for end in (
        _owner(NOW - timedelta(seconds=10), bind_phase="success"),
        _owner(NOW - timedelta(seconds=10), bind_phase="failed"),
        _owner(NOW - timedelta(seconds=10), bind_phase="allocating", phase="Failed"),
        _owner(NOW - timedelta(seconds=10), bind_phase="allocating", node="n2"),
        PodMoment(NOW - timedelta(seconds=10), "default/owner", exists=False),
    ):
        (message,) = _judged(NOW - timedelta(seconds=1), start, end)
        assert "refused the bind of default/x" in message
        assert "had no owner waiting for its Allocate" in message
    # Finished a moment before the refusal's second: the extender may have seen it waiting.
    just_done = _owner(NOW - timedelta(seconds=2), bind_phase="success")
    assert _judged(NOW - timedelta(seconds=1), start, just_done) == []


def test_an_owner_not_bound_yet_keeps_the_lock_until_its_timeout() -> None:
    binding = _owner(ACQUIRED, node="")
    assert _judged(ACQUIRED + timedelta(seconds=1), binding) == []
    assert len(_judged(ACQUIRED + timedelta(seconds=10), binding)) == 1


def test_a_refusal_names_its_owner_and_refusals_before_the_recording_are_not_judged() -> None:
    timeline = Timeline(
        since=NOW - timedelta(seconds=30),
        locks=(LockMoment(NOW - timedelta(seconds=30), "n1", LOCK),),
        pods=(
            _owner(NOW - timedelta(seconds=30), bind_phase="allocating"),
            PodMoment(NOW - timedelta(seconds=30), "default/other", exists=False),
        ),
    )
    message = "node n1 is locked by default/other, waiting for its device plugin since x"
    events = [
        _refused_at(NOW - timedelta(seconds=5), message),
        _refused_at(NOW - timedelta(seconds=40)),  # before the recording
    ]
    snapshot = dataclasses.replace(state([], events=events), timeline=timeline)
    (found,) = check_locks(snapshot, lock_timeout=TIMEOUT)
    assert "refused the bind of default/x" in found.message


def test_without_a_timeline_a_waiting_owner_may_refuse_after_expiry() -> None:
    waiting = pod("owner", [[(GPU_A, 1, 1)]], phase="Pending")
    waiting["metadata"]["annotations"][keys.BIND_PHASE] = "allocating"
    refused = state(
        [waiting], nodes=[node(lock=LOCK)], events=[_refused_at(NOW - timedelta(seconds=1))]
    )
    assert check_locks(refused, lock_timeout=TIMEOUT) == []
    waiting["metadata"]["annotations"][keys.BIND_PHASE] = "success"
    assert len(check_locks(refused, lock_timeout=TIMEOUT)) == 1


# --- dynamic MIG ---------------------------------------------------------------------------------


def mig_node(name: str = "n1") -> dict[str, Any]:
    profile = MigProfile("1g.5gb", 4864, 15, 1, tuple(MigPlacement(s, 1) for s in range(7)))
    device = DeviceInfo(
        id=GPU_A,
        index=0,
        count=7,
        devmem=40960,
        devcore=100,
        type="NVIDIA-A100",
        numa=0,
        health=True,
        mode="mig",
        mig_profiles=(profile,),
    )
    return {
        "metadata": {
            "name": name,
            "annotations": {keys.NVIDIA_REGISTER: encode_node_devices_json([device])},
        }
    }


def mig_pod(
    name: str, start: int, *, mig_uuid: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    placed = pod(name, [[(GPU_A, 4864, 15)]], envs=None if env is None else {"c0": env})
    runtime = (
        {}
        if mig_uuid is None
        else {"migUUID": mig_uuid, "gpuInstanceID": start, "computeInstanceID": 0}
    )
    reservation = {
        "containerIndex": 0,
        "deviceIndex": 0,
        "gpuUUID": GPU_A,
        "profile": "1g.5gb",
        "placement": {"start": start, "size": 1},
        **runtime,
    }
    placed["metadata"]["annotations"][keys.NVIDIA_MIG_ALLOCATIONS] = json.dumps([reservation])
    return placed


def test_mig_containers_get_their_instances_and_nothing_of_hami_core() -> None:
    good = mig_pod("a", 6, mig_uuid="MIG-a", env={"NVIDIA_VISIBLE_DEVICES": "MIG-a"})
    assert check_all(state([good], [mig_node()])) == ()
    wrong = mig_pod("b", 5, mig_uuid="MIG-b", env={"NVIDIA_VISIBLE_DEVICES": "MIG-a"})
    limits = mig_pod(
        "c", 4, mig_uuid="MIG-c", env={"NVIDIA_VISIBLE_DEVICES": "MIG-c", **good_env("x", 1, 1)}
    )
    early = mig_pod("d", 3, env={"NVIDIA_VISIBLE_DEVICES": GPU_A})
    messages = [v.message for v in check_env(state([wrong, limits, early], [mig_node()]))]
    assert any("reservations say 'MIG-b'" in m for m in messages), messages
    assert any("HAMi-core limits" in m for m in messages), messages
    assert any("before the device plugin recorded" in m for m in messages), messages


def test_mig_reservations_never_overlap_or_share_an_instance() -> None:
    apart = [mig_pod("a", 6, mig_uuid="MIG-a"), mig_pod("b", 5, mig_uuid="MIG-b")]
    assert check_mig(state(apart, [mig_node()])) == []
    overlapping = [mig_pod("a", 6), mig_pod("b", 6)]
    [violation] = check_mig(state(overlapping, [mig_node()]))
    assert "default/a 1g.5gb@6 overlaps default/b 1g.5gb@6" in violation.message
    shared = [mig_pod("a", 6, mig_uuid="MIG-x"), mig_pod("b", 5, mig_uuid="MIG-x")]
    assert [v.message for v in check_mig(state(shared, [mig_node()]))] == [
        "MIG-x is also default/a's instance"
    ]
    # A finished pod holds no slices any more; a GPU not in MIG mode holds none at all.
    done = mig_pod("a", 6)
    done["status"]["phase"] = "Succeeded"
    assert check_mig(state([done, mig_pod("b", 6)], [mig_node()])) == []
    [shared_gpu] = check_mig(state([mig_pod("a", 6)], [node()]))
    assert "registered as hami-core" in shared_gpu.message
