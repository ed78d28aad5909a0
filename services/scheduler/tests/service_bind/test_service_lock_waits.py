"""Binds that meet a node lock another pod still needs wait for it in line (FIFO per node),
woken by the extender's own watch events, bounded by ``--node-lock-wait``; overdue locks are
reported."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime, timedelta

import pytest
from structlog.testing import capture_logs

from hami_protocol import keys
from hami_protocol.node.lock import NodeLock, decode_node_lock, encode_node_lock
from hami_scheduler.nodelock.waits import LockWaits

from ..service_helpers import (
    Harness,
    annotations_of,
    eventually,
    gpus,
    harness,
    metric,
    pod_object,
)

pytestmark = pytest.mark.timeout(60)


def owner(h: Harness, node: str = "n") -> str:
    value = annotations_of(h.node(node)).get(keys.NODE_LOCK)
    return "" if value is None else decode_node_lock(value).pod


def waiting(h: Harness) -> dict[str, int]:
    return dict(h.scheduler.binder._waits.waiting())


async def test_binds_wait_in_line_and_take_the_lock_in_arrival_order() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 4))
        await h.synced_node("n")
        first = await h.filtered("first")
        assert await h.bind(first, "n") == ""
        later = [await h.filtered(name) for name in ("a", "b", "c")]
        binds = []
        for pod in later:
            binds.append(asyncio.create_task(h.bind(pod, "n")))
            name = pod["metadata"]["name"]
            await eventually(lambda: sum(waiting(h).values()) == len(binds), what=f"{name} in line")
        assert waiting(h) == {"n": 3}
        assert metric(h, "hami_scheduler_node_lock_waiters", node="n") == 3
        misses = metric(h, "hami_scheduler_cache_misses_total", object="lock_owner")
        # The device plugin serves each pod in turn: the next in line takes the lock.
        for previous, task in zip(["first", "a", "b"], binds, strict=True):
            assert owner(h) == previous
            await h.allocated(previous, "n")
            assert await task == ""
        assert owner(h) == "c"
        assert waiting(h) == {}
        # The owners' states came from the caches, not from reads.
        assert metric(h, "hami_scheduler_cache_misses_total", object="lock_owner") == misses
        assert metric(h, "hami_scheduler_node_lock_wait_seconds_count", outcome="acquired") == 4
        assert metric(h, "hami_scheduler_node_lock_actions_total", action="acquire") == 4


async def test_a_waiter_is_woken_by_its_owner_pod_finishing_or_going() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 4))
        await h.synced_node("n")
        first = await h.filtered("first")
        assert await h.bind(first, "n") == ""
        second = await h.filtered("second")
        binding = asyncio.create_task(h.bind(second, "n"))
        await eventually(lambda: waiting(h) == {"n": 1}, what="second waits")
        # A plugin that marks the pod done but leaves the lock: the finished owner frees it.
        await h.api.patch(
            "pods",
            "first",
            {"metadata": {"annotations": {keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS}}},
            namespace="default",
            patch_type="merge",
        )
        assert await binding == ""
        assert owner(h) == "second"
        assert metric(h, "hami_scheduler_node_lock_actions_total", action="takeover_finished") == 1
        third = await h.filtered("third")
        binding = asyncio.create_task(h.bind(third, "n"))
        await eventually(lambda: waiting(h) == {"n": 1}, what="third waits")
        # The owner is deleted: gone frees the lock at any age.
        await h.api.delete("pods", "second", namespace="default")
        assert await binding == ""
        assert owner(h) == "third"
        assert metric(h, "hami_scheduler_node_lock_actions_total", action="takeover_dangling") == 1


async def test_the_wait_ends_with_an_error_naming_the_owner_and_nothing_left_behind() -> None:
    async with harness(node_lock_wait_s=1.0, node_lock_retry_timeout_s=4.0) as h:
        await h.add_node("n", gpus("n", 4))
        await h.synced_node("n")
        first = await h.filtered("first")
        assert await h.bind(first, "n") == ""
        since = encode_node_lock(
            NodeLock(
                decode_node_lock(h.node("n")["metadata"]["annotations"][keys.NODE_LOCK]).acquired
            )
        )
        # The head of the line is a pod-group member (its budget: the 4 s retry timeout); the
        # plain pod behind it has 1 s, so it gives up in line while the head still waits.  With
        # equal budgets the order of the two expiries would be the machine's load's to decide.
        second = await h.filtered("second", **{keys.POD_GROUP_LABEL: "g"})
        third = await h.filtered("third")
        at_head = asyncio.create_task(h.bind(second, "n"))
        await eventually(lambda: waiting(h) == {"n": 1}, what="the second waits at the head")
        behind_error = await h.bind(third, "n")
        head_error = await at_head
        holder = f"node n is locked by default/first, waiting for its device plugin since {since}"
        # "1s" (the budget), or more on a loaded machine: the message says how long.
        behind = re.escape(holder) + r"; waited \d+s in line behind other binds to it"
        assert re.fullmatch(behind, behind_error), behind_error
        assert re.fullmatch(re.escape(holder) + r"; waited \d+s", head_error), head_error
        assert owner(h) == "first"
        assert h.scheduler.cache.assumed_count() == 0
        assert sum(d.used for d in h.scheduler.cache.nodes["n"].devices) == 1
        assert waiting(h) == {}
        assert metric(h, "hami_scheduler_node_lock_wait_seconds_count", outcome="expired") == 1
        await eventually(lambda: len(h.events("BindingFailed")) == 2, what="events")


async def test_pod_group_members_wait_their_retry_timeout() -> None:
    async with harness(node_lock_wait_s=0.0, node_lock_retry_timeout_s=10.0) as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        first = await h.filtered("first")
        assert await h.bind(first, "n") == ""
        plain = await h.filtered("plain")
        assert (await h.bind(plain, "n")).endswith("; waited 0s")
        member = await h.filtered("member", **{keys.POD_GROUP_LABEL: "g"})
        with capture_logs() as logs:
            binding = asyncio.create_task(h.bind(member, "n"))
            await eventually(
                lambda: any(entry["event"] == "node_lock_waiting" for entry in logs),
                what="the member waits for the lock",
            )
            assert not binding.done()
            await h.allocated("first", "n")
            assert await binding == ""
        assert owner(h) == "member"


async def test_an_owner_not_bound_yet_keeps_the_lock_until_its_timeout() -> None:
    async with harness(node_lock_timeout_s=2.0, node_lock_wait_s=10.0) as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        await h.add_pod(pod_object("stuck"))
        # A bind that died between its lock and its Binding: the owner is not bound.
        value = encode_node_lock(NodeLock(datetime.now(UTC), "default", "stuck"))
        await h.set_lock(value)
        await eventually(lambda: h.scheduler.binder._waits.locks.get("n") == value, what="seen")
        pod = await h.filtered("p")
        loop = asyncio.get_running_loop()
        started = loop.time()
        # No event comes: the waiter wakes when age frees the lock.
        assert await h.bind(pod, "n") == ""
        assert 0.5 < loop.time() - started < 9.0  # well before its 10 s budget ran out
        assert owner(h) == "p"
        assert metric(h, "hami_scheduler_node_lock_actions_total", action="takeover_expired") == 1


async def test_an_overdue_lock_is_reported_once_and_kept() -> None:
    async with harness(node_lock_timeout_s=1.0, node_lock_wait_s=0.5) as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        first = await h.filtered("first")
        old = datetime.now(UTC) - timedelta(minutes=10)
        assert await h.bind(first, "n") == ""
        # The owner waits for its Allocate far past the timeout (a slow kubelet).
        value = encode_node_lock(NodeLock(old, "default", "first"))
        await h.set_lock(value)
        await eventually(lambda: h.scheduler.binder._waits.locks.get("n") == value, what="seen")
        second = await h.filtered("second")
        with capture_logs() as logs:
            error = await h.bind(second, "n")
            await h.scheduler.upkeep.run_pass()
            await h.scheduler.upkeep.run_pass()
        assert error.startswith("node n is locked by default/first, waiting for its device plugin")
        assert owner(h) == "first"
        overdue = [e for e in logs if e["event"] == "node_lock_overdue"]
        assert [(e["node"], e["pod"]) for e in overdue] == [("n", "default/first")]
        assert overdue[0]["since"] == encode_node_lock(NodeLock(old))
        await eventually(lambda: bool(h.events("NodeLockOverdue")), what="event")
        (event,) = h.events("NodeLockOverdue")
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "Node"
        assert "pod default/first has held the node lock since" in event["message"]
        assert metric(h, "hami_node_lock_overdue") == 1
        # Released: no longer overdue.
        await h.allocated("first", "n")
        await eventually(lambda: "n" not in h.scheduler.binder._waits.locks, what="seen")
        await h.scheduler.upkeep.run_pass()
        assert metric(h, "hami_node_lock_overdue") == 0


@pytest.mark.looptime  # the 50 ms budget must not run out before the others join the line
async def test_the_line_is_fifo_and_a_timed_out_waiter_passes_its_turn_on() -> None:
    waits = LockWaits()
    loop = asyncio.get_running_loop()
    order: list[str] = []
    release = asyncio.Event()

    async def bind(name: str, budget: float) -> bool:
        async with waits.turn("n", deadline=loop.time() + budget) as turn:
            if turn is None:
                return False
            order.append(name)
            if name == "a":
                await release.wait()
            return True

    first = asyncio.create_task(bind("a", 10))
    await eventually(lambda: order == ["a"], what="a has its turn")
    impatient = asyncio.create_task(bind("b", 0.05))
    patient = [asyncio.create_task(bind(name, 10)) for name in ("c", "d")]
    await eventually(lambda: waits.ahead("n") == 4, what="all in line")
    assert await impatient is False
    assert waits.waiting() == {"n": 2}
    release.set()
    assert await asyncio.gather(first, *patient) == [True, True, True]
    assert order == ["a", "c", "d"]
    assert waits.ahead("n") == 0


async def test_a_deleted_owner_the_pod_watch_never_showed_frees_its_lock_after_a_short_grace() -> (
    None
):
    # The pod watch lost the owner's events (dropped, compacted, relisted after it was gone):
    # the owner this process bound is taken as waiting only for a few seconds, then read.
    offset = [timedelta(0)]

    def now() -> datetime:
        return datetime.now(UTC) + offset[0]

    async with harness(now=now, node_lock_wait_s=0.3) as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        assert h.api.hold_watches("pods", "hami-scheduler") >= 1
        try:
            first = await h.filtered("first")
            assert await h.bind(first, "n") == ""
            await h.api.delete("pods", "first", namespace="default")
            second = await h.filtered("second")
            assert "locked by default/first" in await h.bind(second, "n")
            offset[0] = timedelta(seconds=10)
            assert await h.bind(second, "n") == ""
            assert owner(h) == "second"
        finally:
            h.api.release_watches()
