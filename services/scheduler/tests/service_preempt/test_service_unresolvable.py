"""What the filter tells kube-scheduler's preemption, and what ``/preempt`` counts, through HTTP
against the emulated API server: ``FailedNodes`` (eviction could help) against
``FailedAndUnresolvableNodes`` (it could not) in both request forms; PodDisruptionBudgets in the
victim choice and an honest ``NumPDBViolations``; capacity totals mode."""

from __future__ import annotations

from typing import Any

import pytest

from hami_kubesim.testing import eventually

from ..service_helpers import Harness, container, gpu_limits, harness, pod_object
from .preempt_helpers import meta, one_gpu_nodes, preempt, preemptor, running, uid

pytestmark = pytest.mark.timeout(60)


async def simulated(h: Harness, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """``nodeCacheCapable: false``: full Node objects."""
    status, reply = await h.post(
        "filter", {"Pod": pod, "Nodes": {"items": [h.node(n) for n in nodes]}}
    )
    assert status == 200
    assert isinstance(reply, dict)
    return reply


async def test_only_nodes_where_eviction_helps_are_failed_nodes_in_both_forms() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "busy", "idle")
        await running(h, "low", 6000, 0, node="busy")
        await running(h, "other", 7000, 0, node="idle")
        fits_emptied = await preemptor(h, mem=4000)
        too_big = await preemptor(h, mem=9000, name="huge")
        reply = await h.filter(fits_emptied, ["busy", "idle", "ghost"])
        assert reply["NodeNames"] is None
        assert reply["FailedNodes"] == {
            "busy": "1/1 CardInsufficientMemory",
            "idle": "1/1 CardInsufficientMemory",
        }
        assert reply["FailedAndUnresolvableNodes"] == {"ghost": "node unregistered"}
        # Larger than any card: no eviction helps; the reason text stays the same.
        reply = await h.filter(too_big, ["busy", "idle"])
        assert reply["FailedNodes"] == {}
        assert reply["FailedAndUnresolvableNodes"] == {
            "busy": "1/1 CardInsufficientMemory",
            "idle": "1/1 CardInsufficientMemory",
        }
        # The autoscaler's (full Nodes) path answers the same split.
        reply = await simulated(h, fits_emptied, ["busy", "idle"])
        assert reply["Nodes"] is None
        assert set(reply["FailedNodes"]) == {"busy", "idle"}
        assert reply["FailedAndUnresolvableNodes"] is None
        reply = await simulated(h, too_big, ["busy"])
        assert reply["FailedNodes"] == {}
        assert reply["FailedAndUnresolvableNodes"] == {"busy": "1/1 CardInsufficientMemory"}


async def budget(h: Harness, app: str, allowed: int) -> None:
    """A PodDisruptionBudget over ``app=<app>`` whose status allows ``allowed`` disruptions
    (written as the disruption controller would)."""
    await h.api.create(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": app, "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
        },
    )
    status = {
        "status": {
            "disruptionsAllowed": allowed,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
            "observedGeneration": 1,
        }
    }
    await h.api.patch(
        "poddisruptionbudgets",
        app,
        status,
        namespace="default",
        patch_type="merge",
        subresource="status",
    )
    await eventually(lambda: len(h.scheduler.cache.budgets) >= 1, what="budget seen")


async def test_budgets_rank_the_victims_and_count_honestly() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n")
        guarded = await running(h, "guarded", 3000, 0, labels={"app": "guarded"})
        free = await running(h, "free", 3000, 1, labels={"app": "free"})
        big = await preemptor(h, mem=5000)
        # Without a budget the more important pod ("free", priority 1) is reprieved first.
        reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"n": meta()}})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(guarded))}}
        await budget(h, "guarded", 0)
        reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"n": meta()}})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(free))}}
        # Needing both, the violation is counted — not the number kube-scheduler sent.
        huge = await preemptor(h, mem=8000, name="huge")
        reply = await preempt(h, {"Pod": huge, "NodeNameToMetaVictims": {"n": meta(pdb=3)}})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(free), uid(guarded), pdb=1)}}


async def test_capacity_totals_mode_reprieves_offered_victims_that_are_not_needed() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n")
        low = await running(h, "low", 6000, 0)
        small = await running(h, "small", 1000, 1)
        offered = {"n": meta(uid(small), uid(low))}  # in-tree chose both by the totals
        plain = await preemptor(h, mem=4000)
        reply = await preempt(h, {"Pod": plain, "NodeNameToMetaVictims": offered})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(small), uid(low))}}
        limits = {**gpu_limits(1, mem=4000), "hami.io/nvidia-memory": "4000"}
        totals = pod_object("totals", container(limits=limits))
        totals["spec"]["priorityClassName"] = "priority-100"
        totals = await h.add_pod(totals)
        reply = await preempt(h, {"Pod": totals, "NodeNameToMetaVictims": offered})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(low))}}
        # An offered pod holding no device stays required.
        with_cpu_hog = {"n": meta("cpu-hog-uid", uid(small), uid(low))}
        reply = await preempt(h, {"Pod": totals, "NodeNameToMetaVictims": with_cpu_hog})
        assert reply == {"NodeNameToMetaVictims": {"n": meta("cpu-hog-uid", uid(low))}}
