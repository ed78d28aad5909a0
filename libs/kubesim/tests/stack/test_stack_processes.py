"""Child processes (start, readiness, stop, crash, restart, die with their parent) and the
leader-following TCP front, with small stand-in servers."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import textwrap
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from hami_kubesim.stack.system.ports import free_port, pickable_ports
from hami_kubesim.stack.system.processes import (
    ProcessExitedError,
    ServiceProcess,
    ServiceSpec,
    stop_all,
)
from hami_kubesim.stack.system.router import LeaderRouter
from hami_kubesim.testing import eventually


def _http_server(tmp_path: Path, name: str = "web") -> ServiceProcess:
    """``python -m http.server`` serving a directory that has a ``readyz`` file."""
    root = tmp_path / name
    root.mkdir()
    (root / "readyz").write_text("ok")
    port = free_port()
    return ServiceProcess(
        ServiceSpec(
            name=name,
            module="http.server",
            args=("--bind", "127.0.0.1", "--directory", str(root), str(port)),
            ready_url=f"http://127.0.0.1:{port}/readyz",
            log_file=tmp_path / "logs" / f"{name}.log",
            ready_timeout=20,
            stop_timeout=5,
        )
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); its state in /proc says it is gone.
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def _running(process: ServiceProcess) -> bool:
    return process.running


async def test_start_stop_crash_and_restart(tmp_path: Path) -> None:
    server = _http_server(tmp_path)
    try:
        await server.start()
        assert _running(server)
        first = server.pid
        assert await server.stop() == -signal.SIGTERM
        assert not _running(server)
        await server.start()
        assert server.pid != first
        assert await server.kill() == -signal.SIGKILL
        await server.restart()
        assert _running(server)
        assert server.starts == 3
        log = server.log_tail(100)
        assert "--- start #3 of web ---" in log
    finally:
        await stop_all([server])
    assert not _running(server)


async def test_a_process_that_exits_while_starting_is_reported(tmp_path: Path) -> None:
    broken = ServiceProcess(
        ServiceSpec(
            name="broken",
            module="http.server",
            args=("--bind", "127.0.0.1", "not-a-port"),
            ready_url=f"http://127.0.0.1:{free_port()}/readyz",
            log_file=tmp_path / "broken.log",
        )
    )
    with pytest.raises(ProcessExitedError, match="broken exited with 2"):
        await broken.start()
    never = _http_server(tmp_path, "never")
    never = ServiceProcess(
        ServiceSpec(
            name="never",
            module=never.spec.module,
            args=never.spec.args,
            ready_url=never.spec.ready_url.replace("readyz", "missing"),
            log_file=never.spec.log_file,
            ready_timeout=0.5,
        )
    )
    try:
        with pytest.raises(TimeoutError, match="never not ready"):
            await never.start()
    finally:
        await never.stop()


async def test_children_die_with_their_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from pathlib import Path
        from hami_kubesim.stack.system.ports import free_port
        from hami_kubesim.stack.system.processes import ServiceProcess, ServiceSpec
        root = Path({str(tmp_path)!r}) / "root"
        root.mkdir()
        (root / "readyz").write_text("ok")
        port = free_port()
        async def main():
            child = ServiceProcess(ServiceSpec(
                name="child", module="http.server",
                args=("--bind", "127.0.0.1", "--directory", str(root), str(port)),
                ready_url=f"http://127.0.0.1:{{port}}/readyz",
                log_file=root.parent / "child.log"))
            await child.start()
            print(child.pid, flush=True)
            await asyncio.Event().wait()
        asyncio.run(main())
        """
    )
    parent = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert parent.stdout is not None
        async with asyncio.timeout(30):
            child = int(await parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        await parent.wait()
    await eventually(lambda: not _alive(child), what=f"child {child} dies with its parent")


@asynccontextmanager
async def _tagged_server(tag: bytes) -> AsyncIterator[int]:
    """A TCP server answering every line with ``tag``; yields its port."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readline():
            writer.write(tag + b"\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()
        await server.wait_closed()


async def test_the_router_follows_the_leader() -> None:
    async with _tagged_server(b"one") as one, _tagged_server(b"two") as two:
        current: list[int | None] = [one]
        router = LeaderRouter(target=lambda: current[0])
        port = await router.start()
        follower = asyncio.create_task(router.follow_leader(), name="test-router")
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"hello\n")
            assert await reader.readline() == b"one\n"

            current[0] = two  # leadership moves: the open connection is cut
            async with asyncio.timeout(5):
                assert await reader.read() == b""
            writer.close()

            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"hello\n")
            assert await reader.readline() == b"two\n"
            writer.close()

            current[0] = None  # no leader: connections are closed at once
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            async with asyncio.timeout(5):
                assert await reader.read() == b""
            writer.close()
            assert router.connections == 2
            assert router.refused == 1
        finally:
            follower.cancel()
            await asyncio.gather(follower, return_exceptions=True)
            await router.stop()


def test_ports_are_picked_outside_the_ephemeral_range_and_never_twice() -> None:
    assert pickable_ports((32768, 60999)) == range(10000, 32768)
    assert pickable_ports((1024, 60999)) == range(61000, 65536)  # nothing left below
    picked = [free_port() for _ in range(50)]
    assert len(set(picked)) == 50
    ephemeral = tuple(
        int(word) for word in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    )
    assert all(not ephemeral[0] <= port <= ephemeral[1] for port in picked), picked
    for port in picked:  # each is free: a listener can take it
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
