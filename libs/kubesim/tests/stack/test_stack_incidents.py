"""Incidents of the bind path: the steps each one plays, how scenarios draw them, and the pods
an old HAMi release left behind."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from hami_kubesim.kubelet.status import IGNORES_SIGTERM_ANNOTATION
from hami_kubesim.stack.chaos.incidents import (
    CREATION_GAP,
    GATE,
    INCIDENTS,
    incident_named,
    preexisting_pod,
)
from hami_kubesim.stack.chaos.preemption import CLASSES, HIGH, LOW, MID, TOP
from hami_kubesim.stack.chaos.scenarios import (
    HOSTNAME_LABEL,
    AwaitBound,
    AwaitNominated,
    ClearLatency,
    CreatePod,
    CreatePriorityClass,
    DeletePod,
    InjectLatency,
    PauseKubelet,
    RestoreRunningPods,
    ResumeKubelet,
    ScenarioConfig,
    StartService,
    StopService,
    Ungate,
    describe,
    generate_scenario,
    incident_scenario,
)
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import ALLOCATIONS_ANNOTATION, ClusterState, record_device_ids
from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo, encode_node_devices_json

CONFIG = ScenarioConfig(
    services=("webhook", "scheduler-0", "deviceplugin-n1"),
    nodes=("n1",),
    incidents=INCIDENTS,
    incident_share=1.0,
    lock_timeout=3.0,
)


def _steps(name: str, seed: int = 7) -> list[object]:
    return list(incident_scenario(incident_named(name), seed, CONFIG).steps)


def _created(steps: list[object]) -> dict[str, CreatePod]:
    return {s.pod["metadata"]["name"]: s for s in steps if isinstance(s, CreatePod)}


def test_every_incident_pauses_the_kubelet_and_resumes_it_later() -> None:
    for incident in INCIDENTS:
        steps = _steps(incident.name)
        pauses = [s for s in steps if isinstance(s, PauseKubelet)]
        resumes = [s for s in steps if isinstance(s, ResumeKubelet)]
        assert len(pauses) == len(resumes), incident.name
        for pause, resume in zip(pauses, resumes, strict=True):
            assert (pause.node, resume.node) == ("n1", "n1")
            assert resume.at > pause.at


def test_lock_expiry_asks_for_the_node_again_past_the_lock_timeout() -> None:
    steps = _steps("lock-expiry")
    pods = _created(steps)
    first, second = pods["s7-lock-a"], pods["s7-lock-b"]
    assert second.at - first.at > CONFIG.lock_timeout
    assert first.pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    limits = second.pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpumem"] == "3000"
    (wait,) = [s for s in steps if isinstance(s, AwaitBound)]
    assert wait.name == "s7-lock-a"
    assert steps.index(wait) < steps.index(second)


def test_admission_order_binds_the_later_created_pod_first() -> None:
    steps = _steps("admission-order")
    pods = _created(steps)
    held, bound = pods["s7-order-b"], pods["s7-order-a"]
    assert held.pod["spec"]["schedulingGates"] == [{"name": GATE}]
    assert bound.at - held.at == pytest.approx(CREATION_GAP)
    (ungate,) = [s for s in steps if isinstance(s, Ungate)]
    assert ungate.name == "s7-order-b"
    assert ungate.at - bound.at > CONFIG.lock_timeout
    assert "(gated)" in "\n".join(
        describe(incident_scenario(incident_named("admission-order"), 7, CONFIG))
    )


def test_slow_binding_keeps_the_first_binding_past_the_lock_timeout() -> None:
    steps = _steps("slow-binding")
    (latency,) = [s for s in steps if isinstance(s, InjectLatency)]
    (cleared,) = [s for s in steps if isinstance(s, ClearLatency)]
    pods = _created(steps)
    first, second = pods["s7-slow-a"], pods["s7-slow-b"]
    assert (latency.verb, latency.resource) == ("create", "pods/binding")
    assert latency.seconds > CONFIG.lock_timeout
    assert latency.at <= first.at < cleared.at < second.at
    assert second.at - first.at > CONFIG.lock_timeout
    waits = [s.name for s in steps if isinstance(s, AwaitBound)]
    assert waits == ["s7-slow-b", "s7-slow-a"]
    (resume,) = [s for s in steps if isinstance(s, ResumeKubelet)]
    assert resume.at > first.at + latency.seconds


def test_plugin_restart_restarts_the_nodes_plugin_only_when_it_is_a_process() -> None:
    steps = _steps("plugin-restart")
    stops = [s for s in steps if isinstance(s, StopService)]
    starts = [s for s in steps if isinstance(s, StartService)]
    assert [s.service for s in stops] == [s.service for s in starts] == ["deviceplugin-n1"]
    in_process = dataclasses.replace(CONFIG, services=("webhook",))
    steps = list(incident_scenario(incident_named("plugin-restart"), 7, in_process).steps)
    assert not any(isinstance(s, StopService | StartService) for s in steps)


def test_the_default_scheduler_pod_skips_the_webhook_and_names_the_node_itself() -> None:
    pods = _created(_steps("default-scheduler"))
    stray, placed = pods["s7-default-d"], pods["s7-default-a"]
    assert stray.pod["spec"]["schedulerName"] == "default-scheduler"
    assert stray.pod["spec"]["nodeName"] == "n1"
    assert stray.pod["metadata"]["labels"] == {"hami.io/webhook": "ignore"}
    assert placed.at > stray.at
    assert "by default-scheduler" in "\n".join(
        describe(incident_scenario(incident_named("default-scheduler"), 7, CONFIG))
    )


def test_preexisting_pods_are_restored_at_the_start_before_pods_target_the_node() -> None:
    for name, stopped in (("preexisting", ""), ("preexisting-before-start", "scheduler-0")):
        scenario = incident_scenario(incident_named(name), 7, CONFIG)
        restore = scenario.steps[0]
        assert isinstance(restore, RestoreRunningPods)
        assert (restore.at, restore.node, restore.while_stopped) == (0.0, "n1", stopped)
        assert set(restore.names) <= set(scenario.pods)
        newcomers = _created(list(scenario.steps))
        assert len(newcomers) >= 2
        assert all(s.at > 0 for s in newcomers.values())


def test_scenarios_draw_incidents_last_and_only_when_asked() -> None:
    plain = ScenarioConfig(services=CONFIG.services)
    for seed in range(30):
        without = generate_scenario(seed, plain)
        with_incident = generate_scenario(seed, CONFIG)
        assert without.incident == ""
        assert with_incident.incident in {i.name for i in INCIDENTS}
        # The churn and the faults of a seed do not depend on the incident settings.
        assert all(step in with_incident.steps for step in without.steps)
    some = dataclasses.replace(CONFIG, incident_share=0.3)
    drawn = sum(bool(generate_scenario(seed, some).incident) for seed in range(200))
    assert 30 <= drawn <= 90
    with pytest.raises(ValueError, match="no incident 'flood'; known: lock-expiry"):
        incident_named("flood")


T4 = DeviceInfo(
    id="GPU-aaaa",
    index=0,
    count=10,
    devmem=15360,
    devcore=100,
    type="NVIDIA-T4",
    numa=0,
    health=True,
)


@pytest.mark.parametrize(("whole", "memory", "cores"), [(True, 15360, 100), (False, 9216, 30)])
def test_a_pod_left_by_an_old_release_is_consistent_and_unlabelled(
    whole: bool, memory: int, cores: int
) -> None:
    pod = preexisting_pod(
        "old",
        "ns",
        node="n1",
        device=T4,
        replica="GPU-aaaa-3",
        whole=whole,
        started="2026-01-01T00:00:00Z",
    )
    annotations = pod["metadata"]["annotations"]
    assert "labels" not in pod["metadata"]
    assert annotations[keys.BIND_PHASE] == "success"
    assert annotations[keys.NVIDIA_DEVICES_ALLOCATED] == f"GPU-aaaa,NVIDIA-T4,{memory},{cores}:;"
    assert (pod["spec"]["nodeName"], pod["status"]["phase"]) == ("n1", "Running")
    record = json.loads(annotations[ALLOCATIONS_ANNOTATION])
    assert record_device_ids(record["containers"][0], "nvidia.com/gpu") == ("GPU-aaaa-3",)
    node = {
        "metadata": {
            "name": "n1",
            "annotations": {keys.NVIDIA_REGISTER: encode_node_devices_json([T4])},
        }
    }
    snapshot = ClusterState((pod,), (node,), (), datetime.now(UTC))
    assert check_all(snapshot) == ()


PREEMPT_CONFIG = dataclasses.replace(CONFIG, node_gpus=(("n1", 3),))


def _preempt_steps(name: str, seed: int = 7) -> list[object]:
    return list(incident_scenario(incident_named(name), seed, PREEMPT_CONFIG).steps)


def _class_of(step: CreatePod) -> str:
    return str(step.pod["spec"]["priorityClassName"])


@pytest.mark.parametrize(
    "name", ["preempt-grace", "preempt-deleted", "preempt-race", "preempt-extender-restart"]
)
def test_preemption_incidents_create_their_classes_first_and_fill_the_node(name: str) -> None:
    steps = _preempt_steps(name)
    classes = [s for s in steps if isinstance(s, CreatePriorityClass)]
    assert {(c.name, c.value) for c in classes} == set(CLASSES)
    assert steps[: len(classes)] == classes
    pods = _created(steps)
    assert all(n.startswith("s7-") for n in pods)
    assert all(p.pod["spec"]["nodeSelector"] == {HOSTNAME_LABEL: "n1"} for p in pods.values())
    # One pod per GPU before any preemptor asks: the low ones ignore SIGTERM for a while.
    fillers = [p for n, p in pods.items() if "-low" in n or "-top-" in n]
    assert len(fillers) == 3
    low = [p.pod for p in fillers if _class_of(p) == LOW]
    assert low
    assert all(p["metadata"]["annotations"][IGNORES_SIGTERM_ANNOTATION] == "true" for p in low)
    assert all(p["spec"]["terminationGracePeriodSeconds"] in (2, 3) for p in low)
    waits = {s.name for s in steps if isinstance(s, AwaitBound)}
    assert waits == {n for n, p in pods.items() if p in fillers}


def test_the_deleted_preemptor_goes_once_nominated_and_a_low_pod_follows() -> None:
    steps = _preempt_steps("preempt-deleted")
    nominated = next(i for i, s in enumerate(steps) if isinstance(s, AwaitNominated))
    deleted = next(i for i, s in enumerate(steps) if isinstance(s, DeletePod))
    assert nominated < deleted
    waited, gone = steps[nominated], steps[deleted]
    assert isinstance(waited, AwaitNominated)
    assert isinstance(gone, DeletePod)
    assert waited.name == gone.name == "s7-deleted-high"
    assert _class_of(_created(steps[deleted:])["s7-deleted-late"]) == LOW


def test_the_race_leaves_one_card_to_free_for_two_preemptors() -> None:
    pods = _created(_preempt_steps("preempt-race"))
    assert [_class_of(p) for n, p in pods.items() if "-top-" in n] == [TOP, TOP]
    assert {_class_of(pods["s7-race-high"]), _class_of(pods["s7-race-mid"])} == {HIGH, MID}


def test_the_extender_restarts_once_the_preemptor_is_nominated() -> None:
    steps = _preempt_steps("preempt-extender-restart")
    nominated = next(i for i, s in enumerate(steps) if isinstance(s, AwaitNominated))
    stop = next(i for i, s in enumerate(steps) if isinstance(s, StopService))
    assert nominated < stop
    stopped = steps[stop]
    assert isinstance(stopped, StopService)
    assert stopped.service == "scheduler-0"
    assert any(isinstance(s, StartService) for s in steps[stop:])
    unnamed = dataclasses.replace(PREEMPT_CONFIG, services=())
    alone = incident_scenario(incident_named("preempt-extender-restart"), 7, unnamed)
    assert alone.count(StopService) == 0
