"""The pending-pod queue: ordering, backoff, parking and wake-ups."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.scheduler.queue import SchedulingQueue, backoff_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_queue(clock: FakeClock, **kw: float) -> SchedulingQueue:
    return SchedulingQueue(
        initial_backoff=kw.get("initial", 1.0),
        max_backoff=kw.get("maximum", 10.0),
        unschedulable_timeout=kw.get("timeout", 60.0),
        clock=clock,
    )


@pytest.mark.parametrize(
    ("attempts", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (50, 10.0)]
)
def test_backoff_doubles_up_to_the_maximum(attempts: int, expected: float) -> None:
    assert backoff_duration(attempts, initial=1.0, maximum=10.0) == expected


@given(st.integers(1, 200), st.floats(0.001, 5), st.floats(0.001, 50))
def test_backoff_is_bounded(attempts: int, initial: float, maximum: float) -> None:
    duration = backoff_duration(attempts, initial=initial, maximum=maximum)
    assert 0 < duration <= max(initial, maximum) or duration == maximum


async def test_priority_then_creation_order() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/late", priority=0, created="2024-01-02T00:00:00Z")
    queue.add("ns/early", priority=0, created="2024-01-01T00:00:00Z")
    queue.add("ns/important", priority=100, created="2024-01-03T00:00:00Z")
    assert [await queue.pop() for _ in range(3)] == ["ns/important", "ns/early", "ns/late"]


async def test_error_goes_to_backoff_then_active() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p")
    assert await queue.pop() == "ns/p"
    assert queue.state_of("ns/p") == "in-flight"
    assert queue.failed("ns/p", unschedulable=False) == 1.0
    assert queue.state_of("ns/p") == "backoff"
    clock.now += 1.0
    assert await queue.pop() == "ns/p"
    assert queue.failed("ns/p", unschedulable=False) == 2.0
    assert queue.attempts("ns/p") == 2


async def test_unschedulable_waits_for_an_event_but_not_before_backoff() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)
    assert queue.state_of("ns/p") == "unschedulable"
    clock.now += 30  # well past its backoff, still parked: nothing changed in the cluster
    queue._flush()
    assert queue.state_of("ns/p") == "unschedulable"
    queue.move_all_unschedulable()
    assert queue.state_of("ns/p") == "active"


async def test_event_during_backoff_moves_to_backoff() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)
    clock.now += 0.5
    queue.move_all_unschedulable()
    assert queue.state_of("ns/p") == "backoff"


async def test_event_while_in_flight_prevents_parking() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/p")
    await queue.pop()
    queue.move_all_unschedulable()  # e.g. a node was added while the pod was being scheduled
    queue.failed("ns/p", unschedulable=True)
    assert queue.state_of("ns/p") == "backoff"


async def test_unschedulable_timeout_is_a_safety_net() -> None:
    clock = FakeClock()
    queue = make_queue(clock, timeout=60.0)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)
    clock.now += 61
    assert await queue.pop() == "ns/p"


async def test_update_of_a_parked_pod_wakes_it() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)
    clock.now += 5
    queue.add("ns/p", priority=0)
    assert queue.state_of("ns/p") == "active"


async def test_delete_and_done_forget_the_pod() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/a")
    queue.add("ns/b")
    queue.delete("ns/a")
    assert "ns/a" not in queue
    assert await queue.pop() == "ns/b"
    queue.done("ns/b")
    assert "ns/b" not in queue
    assert queue.failed("ns/b", unschedulable=False) == 0.0


async def test_pop_sleeps_until_backoff_expires_with_real_time() -> None:
    queue = SchedulingQueue(initial_backoff=0.02, max_backoff=0.05)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=False)
    async with asyncio.timeout(5):
        assert await queue.pop() == "ns/p"


# -- the waits themselves, on virtual time (kube-scheduler's 1 s to 10 s backoff) -------------


@pytest.mark.looptime
async def test_pop_waits_out_each_doubling_backoff() -> None:
    loop = asyncio.get_running_loop()
    queue = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0)
    queue.add("ns/p")
    assert await queue.pop() == "ns/p"
    waited = []
    for _ in range(6):
        queue.failed("ns/p", unschedulable=False)
        failed_at = loop.time()
        assert await queue.pop() == "ns/p"
        waited.append(round(loop.time() - failed_at, 6))
    assert waited == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


@pytest.mark.looptime
async def test_a_parked_pod_woken_early_still_waits_for_its_backoff() -> None:
    loop = asyncio.get_running_loop()
    queue = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=False)
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)  # second attempt: 2 s backoff, parked
    failed_at = loop.time()
    loop.call_later(0.5, queue.move_all_unschedulable)  # a node changed half a second later
    assert await queue.pop() == "ns/p"
    assert loop.time() - failed_at == pytest.approx(2.0)


@pytest.mark.looptime
async def test_the_unschedulable_timeout_wakes_a_parked_pod_on_time() -> None:
    loop = asyncio.get_running_loop()
    queue = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0, unschedulable_timeout=300.0)
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)
    parked_at = loop.time()
    assert queue.state_of("ns/p") == "unschedulable"
    assert await queue.pop() == "ns/p"
    assert loop.time() - parked_at == pytest.approx(300.0)


@pytest.mark.looptime
async def test_retrying_lists_every_pod_but_the_parked_ones() -> None:
    queue = SchedulingQueue(initial_backoff=1.0, max_backoff=10.0)
    for key in ("ns/parked", "ns/backoff", "ns/flight", "ns/active"):
        queue.add(key)
    popped = [await queue.pop() for _ in range(3)]
    assert popped == ["ns/parked", "ns/backoff", "ns/flight"]
    queue.failed("ns/parked", unschedulable=True)
    queue.failed("ns/backoff", unschedulable=False)
    assert queue.retrying() == {"ns/backoff", "ns/flight", "ns/active"}
    queue.move_all_unschedulable()
    assert queue.retrying() == {"ns/parked", "ns/backoff", "ns/flight", "ns/active"}


@pytest.mark.looptime
async def test_pop_wakes_on_add() -> None:
    queue = SchedulingQueue(initial_backoff=1, max_backoff=10)
    waiter = asyncio.create_task(queue.pop())
    await asyncio.sleep(3600)  # an empty queue: pop sleeps without polling, however long
    assert not waiter.done()
    queue.add("ns/new")
    async with asyncio.timeout(5):
        assert await waiter == "ns/new"


async def test_adding_an_in_flight_pod_does_not_duplicate_it() -> None:
    queue = make_queue(FakeClock())
    queue.add("ns/p")
    await queue.pop()
    queue.add("ns/p")
    assert queue.state_of("ns/p") == "in-flight"
    queue.requeue("ns/p")
    assert queue.state_of("ns/p") == "active"


@pytest.mark.looptime
@pytest.mark.parametrize("start", [5879.2285494160005, 6179.218549416, 123456.789, 0.1])
async def test_a_deadline_is_met_whatever_the_floating_point_of_the_clock(start: float) -> None:
    """Once a livelock: the timer for a parked pod fired a few femtoseconds before its
    deadline, the queue set a timer for the rest, which virtual time fires at once, forever."""
    now = [start]
    queue = SchedulingQueue(
        initial_backoff=1.0, max_backoff=10.0, unschedulable_timeout=300.0, clock=lambda: now[0]
    )
    queue.add("ns/p")
    await queue.pop()
    queue.failed("ns/p", unschedulable=True)
    now[0] = start + (start + 300.0 - start) - 1e-12
    async with asyncio.timeout(5):
        assert await queue.pop() == "ns/p"
