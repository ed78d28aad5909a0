"""After kube-scheduler acted on the preempt verb's choice, through HTTP against the emulated
API server: the freed device capacity held for the nominated preemptor (filter, bind and
preempt alike), released when it binds or is deleted; and the Events naming who evicted whom.

kube-scheduler's part is played here as its preemption does it: the victim gets the
``DisruptionTarget`` condition and a DELETE (a finalizer keeps it terminating, holding its
devices, until :func:`gone`), and the preemptor gets ``status.nominatedNodeName``."""

from __future__ import annotations

from typing import Any

import pytest

from hami_kube.objects import PodView
from hami_kube.timefmt import format_time, utc_now
from hami_kubesim.scheduler.victims import disruption_condition
from hami_kubesim.testing import eventually

from ..service_helpers import Harness, harness, refused
from .preempt_helpers import gone, meta, one_gpu_nodes, preempt, preemptor, running, uid

pytestmark = pytest.mark.timeout(60)


async def evict_and_nominate(
    h: Harness, pod: dict[str, Any], node: str, *victims: dict[str, Any]
) -> None:
    """What kube-scheduler does with the node it picked: mark and delete each victim, then
    nominate the preemptor."""
    for victim in victims:
        name = victim["metadata"]["name"]
        condition = disruption_condition(PodView(pod), format_time(utc_now()))
        marked: dict[str, Any] = {"status": {"conditions": [condition]}}
        await h.api.patch("pods", name, marked, namespace="default", subresource="status")
        await h.api.delete("pods", name, namespace="default")
    body = {"status": {"nominatedNodeName": node}}
    await h.api.patch(
        "pods", pod["metadata"]["name"], body, namespace="default", subresource="status"
    )
    cache = h.scheduler.cache

    def seen() -> bool:
        terminating = {r.uid for r in cache.residents(node) if r.terminating}
        return uid(pod) in cache.nominations and {uid(v) for v in victims} <= terminating

    await eventually(seen, what="the nomination and the terminating victims seen")


async def held_cluster(h: Harness) -> dict[str, Any]:
    """One 8000 MiB GPU on ``n``; ``low`` (priority 0, 6000 MiB) evicted for ``big``
    (priority 100, 4000 MiB), which is nominated there; returns ``big``."""
    await one_gpu_nodes(h, "n")
    low = await running(h, "low", 6000, 0, finalizer=True)
    big = await preemptor(h)
    assert await preempt(h, {"Pod": big, "NodeNameToMetaVictims": {"n": meta()}}) == {
        "NodeNameToMetaVictims": {"n": meta(uid(low))}
    }
    await evict_and_nominate(h, big, "n", low)
    return big


async def test_a_hold_keeps_lower_pods_off_the_freed_card_until_the_preemptor_binds() -> None:
    async with harness() as h:
        big = await held_cluster(h)
        # low still holds 6000 while it terminates; big's 4000 are held on top: over-full.
        small = await preemptor(h, mem=1000, priority=50, name="small")
        reply = await h.filter(small, ["n"])
        assert reply["NodeNames"] is None
        assert reply["FailedNodes"] == {"n": "1/1 CardInsufficientMemory"}  # eviction helps
        peer = await preemptor(h, mem=1000, priority=100, name="peer")  # equal: held too
        assert (await h.filter(peer, ["n"]))["NodeNames"] is None
        await gone(h, "low")
        await eventually(lambda: not h.scheduler.cache.residents("n"), what="low gone")
        # 8000 free, 4000 of them big's: a lower pod gets the rest, never big's share.
        mid = await preemptor(h, mem=5000, priority=50, name="mid")
        assert refused(await h.filter(mid, ["n"])) == {"n": "1/1 CardInsufficientMemory"}
        # A lower preemptor cannot take it either: no lower pod is left to evict.
        reply = await preempt(h, {"Pod": mid, "NodeNameToMetaVictims": {"n": meta()}})
        assert reply == {"NodeNameToMetaVictims": {}}
        # The preemptor itself sees no hold of its own; it binds there.
        assert (await h.filter(big, ["n"]))["NodeNames"] == ["n"]
        assert await h.bind(big, "n") == ""
        cache = h.scheduler.cache
        await eventually(lambda: uid(big) not in cache.nominations, what="hold released")
        node = cache.nodes["n"]
        assert cache.held_node(node, uid(mid), 50) is node
        assert sum(d.usedmem for d in node.devices) == 4000


async def test_a_higher_pod_may_take_the_held_slices() -> None:
    async with harness() as h:
        await held_cluster(h)
        await gone(h, "low")
        await eventually(lambda: not h.scheduler.cache.residents("n"), what="low gone")
        top = await preemptor(h, mem=5000, priority=200, name="top")
        assert (await h.filter(top, ["n"]))["NodeNames"] == ["n"]


async def test_a_deleted_preemptor_releases_the_hold() -> None:
    async with harness() as h:
        big = await held_cluster(h)
        await gone(h, "low")
        await eventually(lambda: not h.scheduler.cache.residents("n"), what="low gone")
        mid = await preemptor(h, mem=5000, priority=50, name="mid")
        assert (await h.filter(mid, ["n"]))["NodeNames"] is None
        await h.api.delete("pods", "big", namespace="default")
        cache = h.scheduler.cache
        await eventually(lambda: uid(big) not in cache.nominations, what="hold released")
        assert (await h.filter(mid, ["n"]))["NodeNames"] == ["n"]


async def test_a_cleared_nomination_releases_the_hold() -> None:
    async with harness() as h:
        big = await held_cluster(h)
        await gone(h, "low")
        body = {"status": {"nominatedNodeName": None}}
        await h.api.patch("pods", "big", body, namespace="default", subresource="status")
        cache = h.scheduler.cache
        await eventually(lambda: uid(big) not in cache.nominations, what="hold released")
        mid = await preemptor(h, mem=5000, priority=50, name="mid")
        assert (await h.filter(mid, ["n"]))["NodeNames"] == ["n"]


async def test_events_name_the_preemptor_victims_and_devices_once() -> None:
    async with harness() as h:
        await held_cluster(h)
        await eventually(lambda: bool(h.events("PreemptingForGPU")), what="preemptor event")
        (victim,) = h.events("PreemptedForGPU")
        assert victim["involvedObject"]["name"] == "low"
        assert victim["message"] == (
            "Evicted by default/big (priority 100) on node n to free GPU-n-0: 6000 MiB, 0% cores"
        )
        (told,) = h.events("PreemptingForGPU")
        assert told["involvedObject"]["name"] == "big"
        assert told["message"] == (
            "Preempting on node n: default/low (GPU-n-0: 6000 MiB, 0% cores)"
        )
        # Later events of the victim announce nothing again.
        await gone(h, "low")
        await eventually(lambda: not h.scheduler.cache.residents("n"), what="low gone")
        assert len(h.events("PreemptedForGPU")) == 1
