"""The unix-socket gRPC server that runs one plugin's ``v1beta1.DevicePlugin`` service (the GPU
plugin's :class:`~hami_deviceplugin.gpu.servicer.DevicePluginService` or the RDMA plugin's
:class:`~hami_deviceplugin.rdma.servicer.RdmaPluginService`).

:class:`PluginServer` can be started again after a stop: the kubelet deletes plugin sockets when
it restarts, so the server must come back on a fresh socket.

Stopping is bounded: the service's ListAndWatch streams are ended first (a kubelet that stopped
reading one cannot hold the stop), in-flight calls get ``grace`` seconds (an Allocate cut off
then cleans up after itself), and the whole stop gives up :data:`STOP_SLACK_S` later.  The socket
file is removed unless it is no longer ours (the kubelet deleted it and something else took the
path).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Final

import grpc
import structlog

from hami_deviceplugin.kubelet.servicer import StreamingService
from hami_kubelet_api.v1beta1 import api_pb2_grpc

__all__ = ["MAX_SOCKET_PATH", "STOP_GRACE_S", "STOP_SLACK_S", "PluginServer"]

log = structlog.get_logger(__name__)

MAX_SOCKET_PATH: Final = 107

STOP_GRACE_S: Final = 1.0
"""How long in-flight calls may run on after a stop (then gRPC cancels them)."""

STOP_SLACK_S: Final = 1.0
"""Beyond the grace, before a stop stops waiting for the gRPC server."""


class PluginServer:
    """``v1beta1.DevicePlugin`` on ``socket_path``; start, stop, start again."""

    def __init__(self, socket_path: Path, service: StreamingService) -> None:
        if len(str(socket_path).encode()) > MAX_SOCKET_PATH:
            raise ValueError(
                f"{socket_path} is longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes)"
            )
        self.socket_path = socket_path
        self._service = service
        self._server: grpc.aio.Server | None = None
        self._inode: int | None = None
        self.starts = 0

    @property
    def serving(self) -> bool:
        return self._server is not None

    def socket_present(self) -> bool:
        """Our socket file is still there (the kubelet deletes it when it restarts)."""
        try:
            return os.stat(self.socket_path).st_ino == self._inode
        except OSError:
            return False

    async def start(self) -> None:
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        self.socket_path.unlink(missing_ok=True)
        self._service.open_streams()
        server = grpc.aio.server()
        api_pb2_grpc.add_DevicePluginServicer_to_server(self._service, server)
        server.add_insecure_port(f"unix:{self.socket_path}")
        # Held before it is awaited: a start cut off by a shutdown is still stopped by stop().
        self._server = server
        try:
            await server.start()
        except Exception:
            self._server = None
            raise
        self._inode = os.stat(self.socket_path).st_ino
        self.starts += 1
        log.info("device plugin serving", socket=str(self.socket_path))

    async def stop(self, grace: float | None = STOP_GRACE_S) -> None:
        """Stop serving (``grace`` None: cut in-flight calls off at once); remove the socket."""
        server, self._server = self._server, None
        if server is None:
            return
        self._service.close_streams()
        bound = (grace or 0.0) + STOP_SLACK_S
        try:
            async with asyncio.timeout(bound):
                await server.stop(grace)
        except TimeoutError:
            log.warning(
                "device plugin server did not stop in time",
                socket=str(self.socket_path),
                waited_s=bound,
            )
        finally:
            if self.socket_present():
                self.socket_path.unlink(missing_ok=True)
            self._inode = None
        log.info("device plugin stopped", socket=str(self.socket_path))

    async def restart(self) -> None:
        await self.stop(grace=None)
        await self.start()
