"""``/preempt`` through HTTP against the emulated API server: both request forms
(``NodeNameToMetaVictims``, ``NodeNameToVictims``), victims added and nodes dropped from the
scheduler's own cache, and bad input answered clearly with nothing written."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from hami_scheduler.filter import MISSING_POD
from hami_scheduler.preempt import UNKNOWN_NODE

from ..service_helpers import Harness, container, harness, metric, pod_object
from .preempt_helpers import HIGH, meta, one_gpu_nodes, preempt, preemptor, running, uid

pytestmark = pytest.mark.timeout(60)


def versions(h: Harness) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in h.api.list("pods")}


async def test_meta_form_adds_the_device_victim_and_keeps_kube_schedulers() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n")
        low = await running(h, "low", 6000, 0)
        small = await running(h, "small", 1000, 1)
        big = await preemptor(h)
        before, usage = versions(h), h.scheduler.cache.nodes["n"]
        # >= 1.38 sends a node with no in-tree victim; <= 1.37 sends kube-scheduler's own ones.
        reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"n": meta()}})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(low))}}
        in_tree = meta("cpu-hog-uid", pdb=1)
        reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"n": in_tree}})
        assert reply == {"NodeNameToMetaVictims": {"n": meta("cpu-hog-uid", uid(low), pdb=1)}}
        # Nothing written, nothing evicted, the cache as it was.
        assert versions(h) == before
        assert h.scheduler.cache.nodes["n"] is usage
        assert uid(small) not in str(reply)
        assert (
            metric(
                h,
                "hami_scheduler_request_duration_seconds_count",
                verb="preempt",
                outcome="preempted",
            )
            == 2
        )


async def test_full_pod_form_orders_victims_most_important_first() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n")
        low = await running(h, "low", 6000, 0)
        mid = await running(h, "mid", 1000, 5)
        big = await preemptor(h)
        # kube-scheduler's in-tree filters chose "mid" (nodeCacheCapable: false sends pods).
        offered = {"n": {"Pods": [mid], "NumPDBViolations": 0}}
        reply = await preempt(h, {"Pod": big, "NodeNameToVictims": offered})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(mid), uid(low))}}


async def test_nodes_where_nothing_works_or_unknown_are_dropped() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n", "m")
        low = await running(h, "low", 6000, 0, node="n")
        await running(h, "peer", 6000, HIGH, node="m")  # equal priority: never a victim
        big = await preemptor(h)
        victims = {"n": meta(), "m": meta(), "ghost": meta()}
        with capture_logs() as logs:
            reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": victims})
        assert reply == {"NodeNameToMetaVictims": {"n": meta(uid(low))}}
        assert {"event": "preempt_unknown_node", "node": "ghost", "log_level": "warning"} in logs
        (summary,) = [line for line in logs if line["event"] == "preempt_victims"]
        assert summary["dropped"] == {"m": "1/1 CardInsufficientMemory", "ghost": UNKNOWN_NODE}
        # Every node dropped: an empty map, kube-scheduler preempts nothing.
        reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"m": meta()}})
        assert reply == {"NodeNameToMetaVictims": {}}
        outcome = "unschedulable"
        assert (
            metric(h, "hami_scheduler_decisions_total", verb="preempt", outcome=outcome, reason="")
            == 1
        )


async def test_offered_victims_that_contradict_the_cache_drop_the_node() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n", "m")
        await running(h, "low", 6000, 0, node="n")
        elsewhere = await running(h, "elsewhere", 1000, 0, node="m")
        peer = await running(h, "peer", 1000, HIGH, node="n")
        big = await preemptor(h)
        for offered in (uid(elsewhere), uid(peer), uid(big)):
            reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"n": meta(offered)}})
            assert reply == {"NodeNameToMetaVictims": {}}, offered
        # A full pod bound elsewhere, or of the preemptor's priority, though it holds no device.
        stray = {"metadata": {"uid": "stray"}, "spec": {"nodeName": "m"}}
        equal = {"metadata": {"uid": "equal"}, "spec": {"nodeName": "n", "priority": HIGH}}
        for pod in (stray, equal):
            offered = {"n": {"Pods": [pod], "NumPDBViolations": 0}}
            reply = await preempt(h, {"Pod": big, "NodeNameToVictims": offered})
            assert reply == {"NodeNameToMetaVictims": {}}, pod


async def test_bad_bodies_get_400_and_unanswerable_calls_an_empty_map() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n")
        big = await preemptor(h)
        before = versions(h)
        status, reply = await h.post("preempt", None, raw=b"{not json")
        assert status == 400
        assert reply["Error"].startswith("request body is not JSON")
        for body, message in [
            ({"Pod": big, "NodeNameToMetaVictims": []}, "NodeNameToMetaVictims must be an object"),
            ({"Pod": big, "NodeNameToMetaVictims": {"n": 3}}, "NodeNameToMetaVictims['n'] must"),
            ({"Pod": big, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}, "UID must be"),
            ({"Pod": big, "NodeNameToVictims": {"n": {"Pods": [{"spec": {}}]}}}, "metadata.uid"),
            (
                {"Pod": big, "NodeNameToMetaVictims": {"n": {"NumPDBViolations": -1}}},
                "NumPDBViolations must be a non-negative integer",
            ),
            ({"Pod": big, "NodeNameToVictims": {}, "NodeNameToMetaVictims": {}}, "both set"),
            ({"Pod": "x"}, "Pod must be a JSON object"),
        ]:
            status, reply = await h.post("preempt", body)
            assert status == 400, body
            assert message in reply["Error"], reply
        status, reply = await h.post("preempt", {"NodeNameToMetaVictims": {"n": meta()}})
        assert status == 200
        assert reply == {"NodeNameToMetaVictims": {}, "Error": MISSING_POD}
        assert versions(h) == before


async def test_keys_match_case_insensitively_and_a_pod_without_devices_passes_through() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "n")
        low = await running(h, "low", 6000, 0)
        big = await preemptor(h)
        body = {"pod": big, "nodenametometavictims": {"n": {"pods": [], "numpdbviolations": 0}}}
        assert await preempt(h, body) == {"NodeNameToMetaVictims": {"n": meta(uid(low))}}
        plain = await h.add_pod(pod_object("cpu", container(limits={"cpu": "1"})))
        offered = {"n": meta("a", "b", pdb=2), "anywhere": meta("c")}
        reply = await preempt(h, {"Pod": plain, "NodeNameToMetaVictims": offered})
        assert reply == {"NodeNameToMetaVictims": offered}


async def test_what_the_preemptor_was_assumed_to_hold_does_not_stand_in_its_way() -> None:
    async with harness() as h:
        await one_gpu_nodes(h, "m")
        await running(h, "low", 3000, 0, node="m")
        big = await preemptor(h)
        assert (await h.filter(big, ["m"]))["NodeNames"] == ["m"]  # assumed there, not bound
        reply = await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"m": meta()}})
        assert reply == {"NodeNameToMetaVictims": {"m": meta()}}
        assert h.scheduler.cache.assumed_count() == 1  # and the assumption is left alone
