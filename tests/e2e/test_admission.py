"""Admission through the webhook process: ``failurePolicy`` and namespace quotas.

The MutatingWebhookConfiguration is the chart's, registered with the generated ``caBundle``;
the API server's dispatcher calls the webhook over TLS through its Service name.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import Outcome, failed_scheduling, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.objects import WEBHOOK_CONFIGURATION_NAME, gpu_pod
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.testing import eventually

pytestmark = pytest.mark.asyncio(loop_scope="package")


async def _set_failure_policy(system: System, policy: str) -> None:
    config = system.api.get("mutatingwebhookconfigurations", WEBHOOK_CONFIGURATION_NAME)
    config["webhooks"][0]["failurePolicy"] = policy
    await system.api.update("mutatingwebhookconfigurations", config)
    admission = system.cluster.admission
    assert admission is not None
    await system.wait_for(
        lambda _: [w.failure_policy for w in admission.webhooks] == [policy],
        within=10,
        what=f"the dispatcher sees failurePolicy {policy}",
    )


def _spec(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod.get("spec") or {})


async def test_failure_policy_decides_what_happens_while_the_webhook_is_down(
    system: System,
) -> None:
    namespace = "admission"
    await system.ensure_namespace(namespace)
    await system.webhook.stop()
    try:
        await _set_failure_policy(system, "Fail")
        with pytest.raises(StatusError) as refused:
            await system.create(gpu_pod("closed", namespace=namespace, memory_mib=1000))
        assert 'failed calling webhook "vgpu.hami.io"' in refused.value.message
        assert system.api.try_get("pods", "closed", namespace=namespace) is None

        await _set_failure_policy(system, "Ignore")
        admitted = await system.create(gpu_pod("open", namespace=namespace, memory_mib=1000))
        # Admitted as written: nobody routed it to hami-scheduler.
        assert _spec(admitted).get("schedulerName") == "default-scheduler"
    finally:
        await _set_failure_policy(system, "Ignore")
        await system.webhook.start()

    mutated = await system.create(gpu_pod("mutated", namespace=namespace, memory_mib=1000))
    assert _spec(mutated)["schedulerName"] == "hami-scheduler"
    state = await system.wait_for(
        settled([f"{namespace}/mutated"]), within=30, what="the mutated pod runs"
    )
    found = state.pod(namespace, "mutated")
    assert found is not None
    assert outcome(state, found) is Outcome.RUNNING
    await system.clear_pods(namespace)


async def test_quota_is_enforced_at_admission_and_at_filter(
    system: System, quota: tuple[str, int]
) -> None:
    namespace, memory_mib = quota
    first = memory_mib - 4000
    await system.create(gpu_pod("first", namespace=namespace, memory_mib=first))
    state = await system.wait_for(settled([f"{namespace}/first"]), within=30, what="first runs")
    found = state.pod(namespace, "first")
    assert found is not None
    assert outcome(state, found) is Outcome.RUNNING

    # Over the quota on its own: the webhook refuses it, once its pod watch shows the first
    # placed (the API server shows it Running before the webhook's watch may have caught up).
    async def greedy_refused_on_dry_run() -> bool:
        pod = gpu_pod("greedy", namespace=namespace, memory_mib=5000)
        try:
            await system.api.create("pods", pod, dry_run=True)
        except StatusError as exc:
            return exc.code == 403
        return False

    await eventually(greedy_refused_on_dry_run, within=30, what="the webhook counts the first")
    with pytest.raises(StatusError) as refused:
        await system.create(gpu_pod("greedy", namespace=namespace, memory_mib=5000))
    assert refused.value.code == 403
    assert "exceeding resource quota" in refused.value.message

    # Each fits on its own, so both are admitted; the scheduler's quota check stops the second.
    # "Admitted together" means the webhook has not seen the first placed when the second comes:
    # its pod watch is held meanwhile (otherwise a quick bind of the first makes the webhook
    # refuse the second, as it should, and the race decides what this test sees).
    assert system.api.hold_watches("pods", "hami-webhook") >= 1
    try:
        for name in ("fits-a", "fits-b"):
            await system.create(gpu_pod(name, namespace=namespace, memory_mib=4000))
    finally:
        system.api.release_watches()
    keys = [f"{namespace}/fits-a", f"{namespace}/fits-b"]
    state = await system.wait_for(settled(keys), within=30, what="both settle")
    outcomes = {
        name: outcome(state, pod)
        for name in ("fits-a", "fits-b")
        if (pod := state.pod(namespace, name)) is not None
    }
    assert sorted(outcomes.values()) == sorted([Outcome.RUNNING, Outcome.UNSCHEDULABLE])
    waiting = next(name for name, result in outcomes.items() if result is Outcome.UNSCHEDULABLE)
    waiting_pod = state.pod(namespace, waiting)
    assert waiting_pod is not None
    assert "ResourceQuotaNotFit" in failed_scheduling(state, waiting_pod)[-1]

    # Freeing quota lets the waiting pod through.
    await system.delete_pod(namespace, "first")
    state = await system.wait_for(
        lambda s: (p := s.pod(namespace, waiting)) is not None and outcome(s, p) is Outcome.RUNNING,
        within=30,
        what="the waiting pod runs once quota is freed",
    )
    assert check_all(state) == ()
    await system.clear_pods(namespace)
