"""Each incident of the bind path alone, on one node, with what issue 14 says must come of it.

The incidents (``hami_kubesim.stack.chaos.incidents``) also occur among the random scenarios of
``test_fault_scenarios.py``; here each runs alone, on a chosen node, so its outcome can be
checked pod by pod besides the invariants (every container's env names exactly the GPUs of its
own allocation and of the kubelet's; no two containers hold one kubelet replica; a lock refuses
a bind only while its owner still waits; no device over-committed; no pod lost).
``-k lock_expiry`` runs one.
"""

from __future__ import annotations

import dataclasses

import pytest

from hami_kubesim.stack.chaos import (
    CHAOS_LOCK_TIMEOUT,
    ChaosSummary,
    PodResult,
    ScenarioResult,
    chaos_config,
    run_scenario,
)
from hami_kubesim.stack.chaos.incidents import incident_named
from hami_kubesim.stack.chaos.scenarios import describe, incident_scenario
from hami_kubesim.stack.system.handle import System

pytestmark = [pytest.mark.asyncio(loop_scope="package"), pytest.mark.timeout(120)]

NODES = [
    pytest.param("f-node-a", id="pod-resources"),
    pytest.param("f-node-c", id="node-lock"),
]
"""Four GPUs each: room for every incident's pods.  ``f-node-a``'s device plugin knows the pod
from the kubelet's PodResources (binds take no lock); ``f-node-c``'s runs without it (binds take
the node lock, the plugin identifies pods from a fresh list)."""

pytestmark_nodes = pytest.mark.parametrize("node", NODES)


async def _run(
    system: System, summary: ChaosSummary, name: str, seed: int, node: str
) -> ScenarioResult:
    config = dataclasses.replace(chaos_config(system), nodes=(node,), namespace="incident")
    scenario = incident_scenario(incident_named(name), seed, config)
    result = await run_scenario(system, scenario, lock_timeout=CHAOS_LOCK_TIMEOUT)
    summary.results.append(result)
    timeline = "\n    ".join(describe(scenario))
    found = "\n  ".join(str(v) for v in result.violations)
    pods = "\n  ".join(f"{n}: {p}" for n, p in sorted(result.pods.items()))
    assert result.violations == (), (
        f"{name}:\n  {found}\npods:\n  {pods}\ntimeline:\n    {timeline}"
    )
    return result


def _outcome(result: ScenarioResult, suffix: str) -> str:
    (pod,) = [p for name, p in result.pods.items() if name.endswith(suffix)]
    return pod.outcome


BOTH_RUN = [
    # HAMi #3096: A bound, the kubelet slow past the lock timeout, B asks for the same node.
    pytest.param("lock-expiry", 9001, "lock", id="lock_expiry_with_a_paused_kubelet"),
    pytest.param("admission-order", 9002, "order", id="kubelet_admission_out_of_bind_order"),
    # A's Binding outlasts the lock timeout, B takes the lock over and is bound first; the
    # kubelet then admits A while the lock names B.
    pytest.param(
        "slow-binding", 9006, "slow", id="two_pods_waiting_for_allocate_after_a_slow_binding"
    ),
    # B is created from a running pod's manifest, that pod's decision in its annotations.
    pytest.param("copied-manifest", 9007, "copy", id="a_pod_copied_from_a_placed_pods_manifest"),
]


@pytestmark_nodes
@pytest.mark.parametrize(("incident", "seed", "role"), BOTH_RUN)
async def test_both_pods_of_the_incident_run(
    chaos_system: System, scenarios: ChaosSummary, incident: str, seed: int, role: str, node: str
) -> None:
    result = await _run(chaos_system, scenarios, incident, seed, node)
    assert _outcome(result, f"-{role}-a") == "Running"
    assert _outcome(result, f"-{role}-b") == "Running"


@pytestmark_nodes
@pytest.mark.parametrize("seed", [9003, 9013])  # a SIGKILL and a SIGTERM
async def test_device_plugin_restart_between_bind_and_allocate(
    chaos_system: System, scenarios: ChaosSummary, seed: int, node: str
) -> None:
    result = await _run(chaos_system, scenarios, "plugin-restart", seed, node)
    # Served by the plugin that came back, or refused by the kubelet with a reason (a plugin
    # not registered again yet): never lost, never another pod's devices (the invariants).
    assert _outcome(result, "-restart-a") in ("Running", "Failed")


@pytestmark_nodes
async def test_a_default_scheduler_pod_asking_for_a_gpu_is_refused(
    chaos_system: System, scenarios: ChaosSummary, node: str
) -> None:
    result = await _run(chaos_system, scenarios, "default-scheduler", 9004, node)
    stray = next(p for name, p in result.pods.items() if name.endswith("-default-d"))
    assert stray.outcome == "Failed"
    assert f"no binding pod found on node {node}" in stray.message
    assert _outcome(result, "-default-a") == "Running"


@pytestmark_nodes
@pytest.mark.parametrize("name", ["preexisting", "preexisting-before-start"])
async def test_pods_placed_by_an_old_hami_release_are_counted(
    chaos_system: System, scenarios: ChaosSummary, name: str, node: str
) -> None:
    result = await _run(chaos_system, scenarios, name, 9005, node)
    old = [p for pod, p in result.pods.items() if "-old-" in pod]
    assert old
    assert all(p.outcome == "Running" for p in old)
    assert chaos_system.state().pods == ()  # cleaned up: nothing left holding a GPU


def _present(result: ScenarioResult, marker: str) -> list[PodResult]:
    return [p for name, p in result.pods.items() if marker in name]


@pytestmark_nodes
async def test_a_victim_taking_its_whole_grace_period_leaves_its_slices_to_the_preemptor(
    chaos_system: System, scenarios: ChaosSummary, node: str
) -> None:
    result = await _run(chaos_system, scenarios, "preempt-grace", 9101, node)
    assert _outcome(result, "-grace-high") == "Running"
    assert result.preemptions == 1
    low = _present(result, "-grace-low-")
    assert len(low) == len(chaos_system.node(node).gpus) - 1  # one victim, the rest untouched
    assert all(p.outcome == "Running" for p in low)


@pytestmark_nodes
async def test_a_preemptor_deleted_while_nominated_releases_its_hold(
    chaos_system: System, scenarios: ChaosSummary, node: str
) -> None:
    result = await _run(chaos_system, scenarios, "preempt-deleted", 9102, node)
    assert not _present(result, "-deleted-high")
    assert result.preemptions == 1
    assert _outcome(result, "-deleted-late") == "Running"  # took the freed slices


@pytestmark_nodes
@pytest.mark.parametrize("seed", [9103, 9113])  # either preemptor asks first
async def test_of_two_preemptors_racing_for_one_freed_card_the_higher_wins(
    chaos_system: System, scenarios: ChaosSummary, seed: int, node: str
) -> None:
    result = await _run(chaos_system, scenarios, "preempt-race", seed, node)
    assert _outcome(result, "-race-high") == "Running"
    assert _outcome(result, "-race-mid") == "Unschedulable"
    assert all(p.outcome == "Running" for p in _present(result, "-race-top-"))


@pytestmark_nodes
async def test_an_extender_restarted_while_a_preemptor_waits_still_holds_its_slices(
    chaos_system: System, scenarios: ChaosSummary, node: str
) -> None:
    result = await _run(chaos_system, scenarios, "preempt-extender-restart", 9104, node)
    assert _outcome(result, "-restart-high") == "Running"
    assert _outcome(result, "-restart-late") == "Unschedulable"


DRA = [
    # The plugin is restarted between Prepare and Unprepare (one of two running pods deleted
    # while it is down, one created): the checkpoint unprepares the old claim, the new one is
    # prepared once the plugin is back.
    pytest.param("dra-plugin-restart", 9301, id="dra_plugin_restarted"),
    # The node's GPUs vanish between allocation and Prepare, and come back.
    pytest.param("dra-device-vanished", 9302, id="dra_device_vanished"),
]


@pytest.mark.parametrize(("incident", "seed"), DRA)
async def test_dra_incident_pods_run_once_the_plugin_or_device_is_back(
    chaos_system: System, scenarios: ChaosSummary, incident: str, seed: int
) -> None:
    result = await _run(chaos_system, scenarios, incident, seed, "f-node-dra")
    assert len(result.pods) == 2, result.pods
    for name, pod in result.pods.items():
        assert pod.outcome == "Running", (name, pod)
        assert pod.node == "f-node-dra"


@pytest.mark.parametrize("seed", [9303, 9304, 9305])
async def test_a_claim_deleted_while_its_pod_starts_leaves_nothing_behind(
    chaos_system: System, scenarios: ChaosSummary, seed: int
) -> None:
    result = await _run(chaos_system, scenarios, "dra-claim-deleted", seed, "f-node-dra")
    (pod,) = result.pods.values()
    assert pod.outcome in ("Running", "Unschedulable"), pod
