"""Staying registered with the kubelet.

The plugin serves its socket first, then calls ``Register`` on ``kubelet.sock``.  A kubelet that
restarts deletes the plugin sockets and creates ``kubelet.sock`` again; we notice by polling (no
extra packages): ``kubelet.sock``'s inode/mtime differ from the ones we registered with, or our
own socket is gone.  Then the server is restarted on a fresh socket and registered again.  A
failed ``Register`` (kubelet not up yet) is retried at the next poll.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import structlog
from prometheus_client import Counter

from hami_deviceplugin.kubelet.server import PluginServer
from hami_deviceplugin.kubelet.servicer import plugin_options
from hami_deviceplugin.metrics import PluginMetrics
from hami_kubelet_api.constants import VERSION
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc

__all__ = ["KubeletLink"]

log = structlog.get_logger(__name__)

_Stamp = tuple[int, int]


def _stamp(path: Path) -> _Stamp | None:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_ino, status.st_mtime_ns


class KubeletLink:
    def __init__(
        self,
        *,
        server: PluginServer,
        kubelet_socket: Path,
        resource_name: str,
        metrics: PluginMetrics,
        poll_interval: float = 1.0,
        register_timeout: float = 10.0,
        registrations_counter: Counter | None = None,
    ) -> None:
        self._server = server
        self._kubelet_socket = kubelet_socket
        self._resource = resource_name
        self._counter = (
            metrics.kubelet_registrations
            if registrations_counter is None
            else registrations_counter
        )
        self._poll = poll_interval
        self._timeout = register_timeout
        self._registered_with: _Stamp | None = None
        self.registered = False
        self.registrations = 0

    async def register(self) -> None:
        """One ``Register`` call; raises ``grpc.aio.AioRpcError`` / ``TimeoutError``."""
        target = f"unix:{self._kubelet_socket}"
        async with grpc.aio.insecure_channel(target) as channel:
            async with asyncio.timeout(self._timeout):
                await channel.channel_ready()
            await api_pb2_grpc.RegistrationStub(channel).Register(
                api_pb2.RegisterRequest(
                    version=VERSION,
                    endpoint=self._server.socket_path.name,
                    resource_name=self._resource,
                    options=plugin_options(),
                ),
                timeout=self._timeout,
            )

    async def check(self) -> None:
        """One poll: restart and re-register when the kubelet restarted or we are not
        registered yet."""
        # Our socket first, then the kubelet's: a restarting kubelet clears the plugin directory
        # (its old socket and ours) before it creates its new socket, so once ours is seen gone
        # the stamp read next is the new kubelet's, or none yet.  Read the other way round, a
        # poll racing the restart took the old kubelet's stamp, registered with the new kubelet
        # under it, and the next poll restarted the server and registered a second time.
        own = await asyncio.to_thread(self._server.socket_present)
        stamp = await asyncio.to_thread(_stamp, self._kubelet_socket)
        if stamp is None:
            if self.registered:
                log.warning("kubelet socket disappeared", socket=str(self._kubelet_socket))
            self.registered = False
            return
        kubelet_restarted = self._registered_with is not None and stamp != self._registered_with
        if self.registered and own and not kubelet_restarted:
            return
        if not own or kubelet_restarted:
            log.info(
                "restarting the plugin server",
                resource=self._resource,
                kubelet_restarted=kubelet_restarted,
                own_socket_present=own,
            )
            await self._server.restart()
        self.registered = False
        try:
            await self.register()
        except (grpc.aio.AioRpcError, TimeoutError, OSError) as exc:
            self._counter.labels(outcome="error").inc()
            log.warning("kubelet registration failed", resource=self._resource, error=str(exc))
            return
        self._registered_with = stamp
        self.registered = True
        self.registrations += 1
        self._counter.labels(outcome="success").inc()
        log.info("registered with the kubelet", resource=self._resource, times=self.registrations)

    async def run(self) -> None:
        """Start serving if needed, then keep registered until cancelled."""
        if not self._server.serving:
            await self._server.start()
        while True:
            await self.check()
            await asyncio.sleep(self._poll)
