"""A TCP front for replicated extenders: each connection goes to the current leader.

In a cluster every scheduler replica runs beside its own kube-scheduler, and only the leading
kube-scheduler calls its extender. Here one scheduling loop stands for kube-scheduler, so the
extender address it is given is this front: every new connection is piped (TLS untouched, bytes
only) to the replica that holds the Lease right now, and connections to a replica are closed as
soon as it stops leading, so keep-alive connections cannot keep talking to a deposed leader.
With no leader a connection is closed at once and the caller sees a failed call, as when the
kube-scheduler beside a dead extender calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

__all__ = ["LeaderRouter"]

log = structlog.get_logger(__name__)

_CHUNK = 64 * 1024


class LeaderRouter:
    """Listen on ``host:port`` and forward each connection to ``target()`` (a port or None)."""

    def __init__(self, *, target: Callable[[], int | None], host: str = "127.0.0.1") -> None:
        self._target = target
        self._host = host
        self._server: asyncio.Server | None = None
        self._links: dict[int, set[_Link]] = {}
        self.port = 0
        self.connections = 0
        self.refused = 0

    def set_target(self, target: Callable[[], int | None]) -> None:
        """Where new connections go from now on."""
        self._target = target

    async def start(self, port: int = 0) -> int:
        self._server = await asyncio.start_server(self._accept, self._host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        # Open connections first: from Python 3.12 wait_closed() waits for them.
        for port in list(self._links):
            await self.cut(port)
        if server is not None:
            await server.wait_closed()

    async def cut(self, port: int) -> None:
        """Close every open connection to the backend on ``port`` (both sides)."""
        links = list(self._links.pop(port, set()))
        for link in links:
            link.close()
        for link in links:
            await link.closed.wait()

    async def follow_leader(self) -> None:
        """Cut connections to backends that no longer lead (run as a task; polls)."""
        while True:
            current = self._target()
            for port in [p for p in self._links if p != current]:
                log.info("extender leader changed; closing connections", old_port=port)
                await self.cut(port)
            await asyncio.sleep(0.05)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = self._target()
        if port is None:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self._host, port)
        except OSError:
            self.refused += 1
            writer.close()
            return
        self.connections += 1
        link = _Link(writer, up_writer)
        links = self._links.setdefault(port, set())
        links.add(link)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(_pipe(reader, up_writer), name="router-up")
                group.create_task(_pipe(up_reader, writer), name="router-down")
        except* (OSError, ConnectionError):
            pass
        finally:
            links.discard(link)
            link.close()
            link.closed.set()


class _Link:
    """Both sides of one piped connection."""

    def __init__(self, client: asyncio.StreamWriter, backend: asyncio.StreamWriter) -> None:
        self.client = client
        self.backend = backend
        self.closed = asyncio.Event()

    def close(self) -> None:
        for stream in (self.client, self.backend):
            stream.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()
