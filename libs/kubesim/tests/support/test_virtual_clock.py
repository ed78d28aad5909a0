"""The virtual clock behind ``@pytest.mark.looptime``: jumps only when the loop is idle."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from hami_kube.config import KubeSettings
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient, open_client
from hami_kubesim.testing import RunningApiServer, running_apiserver
from hami_kubesim.virtual_clock import VirtualClock, virtual_time

# Generous for a loaded 2-core machine, yet far below what the virtual durations would take.
REAL_BUDGET_S = 2.0


def _pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


@pytest.mark.looptime
async def test_sleeps_take_no_real_time_and_advance_loop_time() -> None:
    loop = asyncio.get_running_loop()
    real, virtual = time.monotonic(), loop.time()
    await asyncio.sleep(3600)
    assert loop.time() - virtual == pytest.approx(3600)
    assert time.monotonic() - real < REAL_BUDGET_S


@pytest.mark.looptime
async def test_timers_fire_in_deadline_order_at_their_virtual_times() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    fired: list[tuple[str, float]] = []

    async def after(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        fired.append((name, round(loop.time() - start, 6)))

    async with asyncio.TaskGroup() as group:
        for name, delay in (("c", 30.0), ("a", 0.5), ("b", 7.25)):
            group.create_task(after(name, delay))
    assert fired == [("a", 0.5), ("b", 7.25), ("c", 30.0)]


@pytest.mark.looptime
async def test_call_later_and_call_at_follow_the_virtual_clock() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    done = asyncio.Event()
    seen: list[float] = []
    loop.call_later(5.0, lambda: seen.append(loop.time() - start))
    loop.call_at(start + 9.0, done.set)
    await done.wait()
    assert seen == [pytest.approx(5.0)]
    assert loop.time() - start == pytest.approx(9.0)


@pytest.mark.looptime
async def test_asyncio_timeout_expires_on_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    real, start = time.monotonic(), loop.time()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(120):
            await asyncio.Event().wait()
    assert loop.time() - start == pytest.approx(120)
    assert time.monotonic() - real < REAL_BUDGET_S


@pytest.mark.looptime
async def test_time_stands_still_while_the_loop_has_work() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(1000):
        await asyncio.sleep(0)
    busy_until = time.monotonic() + 0.05
    while time.monotonic() < busy_until:  # real CPU work: the virtual clock does not move
        pass
    assert loop.time() == start


@pytest.mark.looptime
async def test_io_arriving_while_timers_are_pending_is_delivered_first() -> None:
    loop = asyncio.get_running_loop()

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        expired = asyncio.Event()
        timer = loop.call_later(3600, expired.set)
        start = loop.time()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for index in range(20):  # every exchange crosses a real socket of this same loop
            writer.write(f"ping {index}\n".encode())
            await writer.drain()
            assert await reader.readline() == f"ping {index}\n".encode()
        writer.close()
        await writer.wait_closed()
        # Twenty round trips, and not one waited for the pending timer.
        assert not expired.is_set()
        assert loop.time() == start
        timer.cancel()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.looptime
async def test_data_already_on_a_socket_wins_over_the_next_timer() -> None:
    loop = asyncio.get_running_loop()
    left, right = socket.socketpair()
    right.setblocking(False)
    received: asyncio.Future[bytes] = loop.create_future()
    loop.add_reader(right.fileno(), lambda: received.done() or received.set_result(right.recv(16)))
    try:
        timer = loop.call_later(3600, lambda: None)
        start = loop.time()
        left.send(b"ping")
        assert await received == b"ping"
        assert loop.time() == start
        timer.cancel()
    finally:
        loop.remove_reader(right.fileno())
        left.close()
        right.close()


@pytest.mark.looptime
async def test_executor_work_is_waited_for_in_real_time_before_any_jump() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    release = threading.Event()

    def slow() -> str:
        release.wait(5)
        return "done"

    # The thread needs 100 ms of real time; a 10 s virtual timeout must not overtake it.
    threading.Timer(0.1, release.set).start()
    async with asyncio.timeout(10):
        assert await loop.run_in_executor(None, slow) == "done"
    assert loop.time() == start


@pytest.mark.looptime
async def test_a_kubesim_round_trip_under_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with (
        running_apiserver() as sim,
        open_client(KubeSettings(kube_url=sim.url, request_timeout_s=5.0)) as client,
    ):
        created = await client.create(PODS, _pod("p"), namespace="default")
        assert created["metadata"]["name"] == "p"
        await asyncio.sleep(30)  # the connection and the server sit idle for 30 virtual s
        listed = await client.list(PODS, namespace="default")
        assert [item["metadata"]["name"] for item in listed["items"]] == ["p"]
    # No request timed out on the way although every wait jumped: I/O was never overtaken.
    assert loop.time() - start == pytest.approx(30, abs=1.0)


@pytest.mark.looptime
async def test_the_plugin_fixtures_run_on_virtual_time(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await kube.create(PODS, _pod("q"), namespace="default")
    assert sim.server.try_get("pods", "q", namespace="default") is not None
    await asyncio.sleep(600)
    assert loop.time() - start == pytest.approx(600, abs=1.0)


async def test_virtual_time_is_left_behind_on_exit() -> None:
    loop = asyncio.get_running_loop()
    with virtual_time(loop) as clock:
        assert isinstance(clock, VirtualClock)
        before = loop.time()
        await asyncio.sleep(50)
        assert loop.time() - before == pytest.approx(50)
        assert clock.jumps >= 1
        assert clock.skipped == pytest.approx(50)
    real = time.monotonic()
    assert abs(loop.time() - real) < 1.0  # real time again
    real_start = time.monotonic()
    await asyncio.sleep(0.05)
    assert time.monotonic() - real_start >= 0.04


async def test_a_loop_without_a_selector_is_refused() -> None:
    class NoSelector(asyncio.AbstractEventLoop):
        pass

    with pytest.raises(TypeError, match="selector event loop"):
        VirtualClock(NoSelector(), idle_confirm_s=0.0)
