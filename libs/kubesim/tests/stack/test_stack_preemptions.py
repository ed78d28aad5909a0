"""Preemptions read from Events, the ``preempted`` expectation, the report's Preemptions section
and the demo's preemption example, on hand-built snapshots and the shipped files."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hami_kubesim.demo import (
    DEMO_NODES,
    EXAMPLES_DIR,
    PREEMPTION_EXAMPLES,
    VENDOR_EXAMPLES,
    load_examples,
)
from hami_kubesim.stack.checks.expectations import evaluate, expectation_of
from hami_kubesim.stack.checks.preemptions import Preemption, preemptions
from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ClusterState

NOW = datetime(2026, 7, 1, tzinfo=UTC)
GPU = "GPU-4ca2dff8-0000-0000-0000-000000000000"


def _running(name: str, node: str = "n1") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"nodeName": node, "containers": [{"name": "cuda"}]},
        "status": {"phase": "Running"},
    }


def _event(reason: str, message: str, victim: str = "low", at: str = "") -> dict[str, Any]:
    return {
        "reason": reason,
        "message": message,
        "lastTimestamp": at or "2026-07-01T00:00:01Z",
        "involvedObject": {
            "kind": "Pod",
            "namespace": "default",
            "name": victim,
            "uid": f"uid-{victim}",
        },
    }


SCHEDULER = _event("Preempted", "Preempted by pod uid-high on node n1")
EXTENDER = _event(
    "PreemptedForGPU",
    f"Evicted by default/high (priority 1000) on node n1 to free {GPU}: 16000 MiB, 50% cores",
)


def _state(*events: dict[str, Any], pods: tuple[dict[str, Any], ...] | None = None) -> ClusterState:
    return ClusterState(pods if pods is not None else (_running("high"),), (), events, NOW)


def _victim(**expect: str) -> dict[str, Any]:
    annotations = {"demo.hami.io/expect": "preempted", "demo.hami.io/expect-node": "n1"}
    annotations.update({f"demo.hami.io/{k}": v for k, v in expect.items()})
    return {"metadata": {"name": "low", "namespace": "default", "annotations": annotations}}


def test_preemptions_join_the_schedulers_and_the_extenders_events() -> None:
    assert preemptions(_state(EXTENDER, SCHEDULER)) == (
        Preemption(
            victim="default/low",
            preemptor="default/high",
            preemptor_uid="uid-high",
            node="n1",
            frees=f"{GPU}: 16000 MiB, 50% cores",
            extender_preemptor="default/high",
        ),
    )


def test_preemptions_name_the_preemptor_by_what_is_left() -> None:
    # Without the extender's Event the preemptor is the pod of that UID ...
    (only,) = preemptions(_state(SCHEDULER))
    assert (only.preemptor, only.frees, only.extender_preemptor) == ("default/high", "", "")
    # ... and without that pod, the extender's name for it, else the UID.
    assert preemptions(_state(SCHEDULER, EXTENDER, pods=()))[0].preemptor == "default/high"
    assert preemptions(_state(SCHEDULER, pods=()))[0].preemptor == "pod uid-high"


def test_preemptions_skip_other_and_unreadable_events() -> None:
    odd = [
        _event("Preempted", "preempted somehow"),
        _event("FailedScheduling", "Preempted by pod uid-high on node n1"),
        {**SCHEDULER, "involvedObject": {"kind": "Node", "name": "n1"}},
        {**SCHEDULER, "involvedObject": "not an object"},
    ]
    assert preemptions(_state(*odd)) == ()
    later = _event(
        "Preempted", "Preempted by pod uid-high on node n2", "other", "2026-07-01T00:00:09Z"
    )
    assert [p.victim for p in preemptions(_state(later, SCHEDULER))] == [
        "default/low",
        "default/other",
    ]


@pytest.mark.parametrize(
    "events", [(SCHEDULER, EXTENDER), (SCHEDULER,)], ids=["both events", "scheduler's only"]
)
def test_preempted_expectation_holds(events: tuple[dict[str, Any], ...]) -> None:
    want = expectation_of(_victim(**{"expect-preempted-by": "high"}))
    assert want is not None
    assert (want.outcome, want.preempted_by) == ("preempted", "high")
    result = evaluate(_state(*events), want)
    assert result.ok, result.detail
    assert result.detail == "preempted by default/high on n1"


def test_preempted_by_is_also_read_from_the_extenders_event_once_the_preemptor_is_gone() -> None:
    want = expectation_of(_victim(**{"expect-preempted-by": "high"}))
    assert want is not None
    assert evaluate(_state(SCHEDULER, EXTENDER, pods=()), want).ok
    assert not evaluate(_state(SCHEDULER, pods=()), want).ok


@pytest.mark.parametrize(
    ("state", "expect", "rejection", "detail"),
    [
        (_state(SCHEDULER, pods=(_running("low"),)), {}, None, "expected preempted, is Running"),
        (_state(), {}, None, "gone, but no Preempted event names it"),
        (_state(EXTENDER), {}, None, "gone, but no Preempted event names it"),
        (_state(SCHEDULER), {"expect-node": "n2"}, None, "expected node n2"),
        (_state(SCHEDULER, EXTENDER), {"expect-preempted-by": "x"}, None, "preempted by x"),
        (_state(SCHEDULER), {}, "quota exceeded", "rejected at admission: quota exceeded"),
    ],
    ids=["still running", "no event", "extender event only", "node", "preemptor", "rejected"],
)
def test_preempted_expectation_fails_saying_why(
    state: ClusterState, expect: dict[str, str], rejection: str | None, detail: str
) -> None:
    want = expectation_of(_victim(**expect))
    assert want is not None
    result = evaluate(state, want, rejection=rejection)
    assert not result.ok
    assert detail in result.detail


def test_report_shows_who_evicted_whom_on_which_node_and_gpu() -> None:
    text = render_report(_state(SCHEDULER, EXTENDER), preemption_mode="preemption as in 1.37")
    section = text.split("Preemptions (1)\n", 1)[1].split("\n\n", 1)[0]
    assert section.splitlines() == [
        "  preemption as in 1.37",
        "  high evicted low on n1, GPU GPU-4ca2dff8…: 16000 MiB, 50% cores",
    ]
    assert "GPU not reported by the extender" in render_report(_state(SCHEDULER))
    assert "Preemptions" not in render_report(_state())
    assert "Preemptions (0)\n  mode\n" in render_report(_state(), preemption_mode="mode")


# --- the demo's preemption example -------------------------------------------------------------


def _node_of(name: str) -> Any:
    return next(n for n in DEMO_NODES if n.name == name)


def test_the_preemption_example_evicts_the_low_priority_pod_on_its_own_node() -> None:
    documents = load_examples(EXAMPLES_DIR / PREEMPTION_EXAMPLES)
    kinds = [d["kind"] for d in documents]
    assert kinds == ["PriorityClass", "PriorityClass", "Pod", "Pod"]
    values = {d["metadata"]["name"]: d["value"] for d in documents[:2]}
    victim, preemptor = documents[2:]
    assert (
        values[victim["spec"]["priorityClassName"]] < values[preemptor["spec"]["priorityClassName"]]
    )
    want_victim, want_preemptor = expectation_of(victim), expectation_of(preemptor)
    assert want_victim is not None
    assert want_preemptor is not None
    assert want_victim.outcome == "preempted"
    assert want_victim.preempted_by == preemptor["metadata"]["name"]
    assert (want_preemptor.outcome, want_preemptor.node) == ("placed", want_victim.node)
    # Only these two tolerate the node's taint and select its label ...
    node = _node_of(want_victim.node)
    (taint,) = node.taints
    for pod in (victim, preemptor):
        assert pod["spec"]["nodeSelector"].items() <= node.labels.items()
        assert [t["key"] for t in pod["spec"]["tolerations"]] == [taint["key"]]
    others = load_examples(EXAMPLES_DIR) + load_examples(EXAMPLES_DIR / VENDOR_EXAMPLES)
    assert not any(
        t.get("key") in (taint["key"], None)
        for p in others
        for t in p["spec"].get("tolerations", ())
    )
    # ... and each fits its one GPU alone, both together do not: only an eviction helps.
    (gpu,) = node.gpus
    memory = [
        int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"])
        for p in (victim, preemptor)
    ]
    assert max(memory) <= gpu.memory_mib < sum(memory)
