"""The preemption invariants on hand-built snapshots and preemption records: each rule fires
when broken, and only then; what the plain fit cannot judge is skipped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami_kubesim.scheduler.preemption.record import PreemptionLog, PreemptionRecord
from hami_kubesim.stack.checks.invariants import (
    CHECKS,
    check_all,
    check_preemption_hold,
    check_preemption_needed,
    check_preemption_priority,
)
from hami_kubesim.stack.checks.preemption import SliceRequest
from hami_kubesim.stack.state import ClusterState, PodMoment, Timeline
from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo, encode_node_devices_json
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices

NOW = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)
GPU_A, GPU_B = "GPU-aaaa", "GPU-bbbb"
NODE = "n1"
PERCENT, CORES = "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"


def node(*, mode: str = "hami-core") -> dict[str, Any]:
    devices = [
        DeviceInfo(uuid, i, 4, 16000, 100, "NVIDIA-T4", 0, True, mode=mode)
        for i, uuid in enumerate((GPU_A, GPU_B))
    ]
    register = encode_node_devices_json(devices)
    return {"metadata": {"name": NODE, "annotations": {keys.NVIDIA_REGISTER: register}}}


def pod(
    name: str,
    priority: int,
    *,
    holds: tuple[tuple[str, int], ...] = (),
    limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    bound: bool = True,
) -> dict[str, Any]:
    notes = dict(annotations or {})
    if holds:
        devices = tuple(ContainerDevice(uuid, "NVIDIA", memory, 10) for uuid, memory in holds)
        notes[keys.NVIDIA_DEVICES_ALLOCATED] = encode_pod_devices((devices,))
    wanted = limits or {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}
    spec: dict[str, Any] = {
        "priority": priority,
        "containers": [{"name": "c0", "resources": {"limits": wanted}}],
    }
    if bound:
        spec["nodeName"] = NODE
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": notes},
        "spec": spec,
        "status": {"phase": "Running" if bound else "Pending"},
    }


LOW_A = pod("low-a", 10, holds=((GPU_A, 10000),))
LOW_B = pod("low-b", 10, holds=((GPU_B, 10000),))
HIGH = pod("high", 100, bound=False)


def record(
    preemptor: dict[str, Any] = HIGH,
    victims: tuple[dict[str, Any], ...] = (LOW_A,),
    *,
    on_node: tuple[dict[str, Any], ...] = (LOW_A, LOW_B),
    at: datetime = NOW,
    **extra: Any,
) -> PreemptionRecord:
    fields: dict[str, Any] = {"node_object": node(), **extra}
    return PreemptionRecord(at, preemptor, NODE, victims=victims, on_node=on_node, **fields)


def state(*records: PreemptionRecord, **extra: Any) -> ClusterState:
    fields: dict[str, Any] = {"pods": (), "nodes": (node(),), "events": (), **extra}
    return ClusterState(taken_at=NOW + timedelta(seconds=30), preemptions=records, **fields)


def test_the_preemption_checks_are_in_the_list() -> None:
    names = {name for name, _ in CHECKS}
    assert {"preemption-priority", "preemption-needed", "preemption-hold"} <= names


def test_a_victim_of_the_preemptors_priority_or_above_is_a_violation() -> None:
    equal = pod("equal", 100, holds=((GPU_A, 10000),))
    found = check_preemption_priority(state(record(victims=(equal,), on_node=(equal, LOW_B))))
    assert [v.subject for v in found] == ["ns/equal"]
    assert "priority 100" in found[0].message
    assert check_preemption_priority(state(record())) == []


def test_one_victim_freeing_the_card_the_preemptor_needs_is_no_violation() -> None:
    assert check_preemption_needed(state(record())) == []


def test_a_victim_the_preemptor_fits_without_is_a_violation() -> None:
    # Either card freed would do: each victim was needless with the other gone.
    found = check_preemption_needed(state(record(victims=(LOW_A, LOW_B))))
    assert sorted(v.subject for v in found) == ["ns/low-a", "ns/low-b"]
    # A victim on a node with room to spare: not needed at all.
    spare = check_preemption_needed(state(record(on_node=(LOW_A,))))
    assert [v.subject for v in spare] == ["ns/low-a"]


def test_the_fit_counts_memory_percentages_cores_slots_and_exclusive_holders() -> None:
    half = pod("half", 100, bound=False, limits={"nvidia.com/gpu": "1", PERCENT: "50"})
    # 10000 of 16000 MiB held on each card: half a card (8000) fits nowhere; one victim frees one.
    assert check_preemption_needed(state(record(half))) == []
    assert len(check_preemption_needed(state(record(half, (LOW_A, LOW_B))))) == 2
    whole = pod("whole", 100, bound=False, limits={"nvidia.com/gpu": "1", CORES: "100"})
    small = pod("small", 10, holds=((GPU_B, 100),))
    # An exclusive request wants a card alone: a 100 MiB holder is in its way as much as a big
    # one, so evicting the small one alone is enough, and evicting both is one too many.
    assert check_preemption_needed(state(record(whole, (small,), on_node=(LOW_A, small)))) == []
    both = state(record(whole, (LOW_A, small), on_node=(LOW_A, small)))
    assert len(check_preemption_needed(both)) == 2


@pytest.mark.parametrize(
    ("preemptor", "extra"),
    [
        pytest.param(
            pod("typed", 100, bound=False, annotations={keys.NVIDIA_USE_GPUTYPE: "T4"}),
            {},
            id="type selector",
        ),
        pytest.param(
            pod("two", 100, bound=False) | {"spec": {"containers": [{}, {}], "priority": 100}},
            {},
            id="two containers",
        ),
        pytest.param(HIGH, {"nominated": (pod("other", 200, bound=False),)}, id="nominee"),
        pytest.param(HIGH, {"node_object": node(mode="mig")}, id="MIG node"),
        pytest.param(HIGH, {"node_object": None}, id="node unknown"),
    ],
)
def test_what_the_plain_fit_cannot_judge_is_skipped(
    preemptor: dict[str, Any], extra: dict[str, Any]
) -> None:
    assert check_preemption_needed(state(record(preemptor, (LOW_A, LOW_B), **extra))) == []


def test_a_slice_request_reads_plain_nvidia_limits_only() -> None:
    assert SliceRequest.of(HIGH) == SliceRequest(count=1, memory=10000)
    other = pod("npu", 1, limits={"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "1"})
    assert SliceRequest.of(other) is None


def _moment(seconds: float, name: str, **fields: Any) -> PodMoment:
    return PodMoment(NOW + timedelta(seconds=seconds), f"ns/{name}", exists=True, **fields)


def _hold_state(
    *moments: PodMoment, records: tuple[PreemptionRecord, ...], pods: Any
) -> ClusterState:
    timeline = Timeline(since=NOW - timedelta(seconds=1), pods=moments)
    return state(*records, timeline=timeline, pods=tuple(pods))


def test_a_lower_pod_bound_while_the_preemptor_waits_then_preempted_by_it_is_a_violation() -> None:
    late = pod("late", 10, holds=((GPU_A, 10000),))
    first = record(at=NOW)
    again = record(victims=(late,), on_node=(late, LOW_B), at=NOW + timedelta(seconds=5))
    moments = (
        _moment(0.1, "high", priority=100, nominated=NODE),
        _moment(1.0, "late", priority=10, phase="Pending"),
        _moment(2.0, "late", priority=10, node=NODE, phase="Pending"),
        _moment(6.0, "high", priority=100, node=NODE),
    )
    found = check_preemption_hold(_hold_state(*moments, records=(first, again), pods=()))
    assert [v.subject for v in found] == ["ns/high"]
    assert "ns/late (priority 10) was bound to n1" in found[0].message


def test_a_lower_pod_bound_while_the_preemptor_waits_that_leaves_it_waiting_is_a_violation() -> (
    None
):
    moments = (
        _moment(0.1, "high", priority=100, nominated=NODE),
        _moment(2.0, "late", priority=10, node=NODE),
    )
    found = check_preemption_hold(_hold_state(*moments, records=(record(),), pods=(HIGH,)))
    assert [v.subject for v in found] == ["ns/high"]
    assert "still waits" in found[0].message


@pytest.mark.parametrize(
    "moments",
    [
        pytest.param(  # the preemptor bound first, then the lower pod
            (
                _moment(0.1, "high", priority=100, nominated=NODE),
                _moment(1.0, "high", priority=100, node=NODE),
                _moment(2.0, "late", priority=10, node=NODE),
            ),
            id="after the preemptor",
        ),
        pytest.param(  # a pod of the preemptor's priority is no lower pod
            (
                _moment(0.1, "high", priority=100, nominated=NODE),
                _moment(2.0, "peer", priority=100, node=NODE),
                _moment(3.0, "high", priority=100, node=NODE),
            ),
            id="equal priority",
        ),
        pytest.param(  # the nomination moved elsewhere before
            (
                _moment(0.1, "high", priority=100, nominated=NODE),
                _moment(1.0, "high", priority=100, nominated="n2"),
                _moment(2.0, "late", priority=10, node=NODE),
                _moment(3.0, "high", priority=100, node="n2"),
            ),
            id="nominated elsewhere",
        ),
    ],
)
def test_pods_bound_outside_the_nomination_or_not_lower_are_no_violation(
    moments: tuple[PodMoment, ...],
) -> None:
    bound = pod("high", 100)
    assert check_preemption_hold(_hold_state(*moments, records=(record(),), pods=(bound,))) == []


def test_without_a_timeline_the_hold_is_not_judged() -> None:
    assert check_preemption_hold(state(record(), pods=(HIGH,))) == []


def test_a_clean_preemption_breaks_no_invariant() -> None:
    assert [v for v in check_all(state(record())) if v.check.startswith("preemption")] == []


def test_the_log_keeps_the_latest_records() -> None:
    log = PreemptionLog(capacity=2)
    for seconds in range(3):
        log.add(record(at=NOW + timedelta(seconds=seconds)))
    assert len(log) == 2
    assert [r.at for r in log.records(NOW + timedelta(seconds=2))] == [NOW + timedelta(seconds=2)]
