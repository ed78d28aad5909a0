"""The DRA mode's two unix sockets, each a grpc.aio server.

* ``<kubelet dir>/plugins/gpu.hami.io/dra.sock``: the ``DRAPlugin`` services (v1 and v1beta1);
  served first, so it answers as soon as the kubelet learns of it;
* ``<kubelet dir>/plugins_registry/gpu.hami.io-reg.sock``: ``pluginregistration.Registration``.
  The kubelet's plugin watcher finds it there, calls ``GetInfo`` and then
  ``NotifyRegistrationStatus``; the kubelet drops the plugin when this file disappears, so it
  is removed last on the way out and first thing on a stop.

Stale socket files of an earlier run are replaced at start.  A stop gives in-flight calls
``grace`` seconds and removes both files.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Final

import grpc
import structlog

from hami_deviceplugin.dra.driver import DraDriver
from hami_deviceplugin.dra.service import (
    DraV1beta1Service,
    DraV1Service,
    RegistrationService,
    RegistrationState,
)
from hami_deviceplugin.kubelet.server import MAX_SOCKET_PATH, STOP_GRACE_S, STOP_SLACK_S
from hami_kubelet_api.constants import PLUGINS_DIR_NAME, PLUGINS_REGISTRY_DIR_NAME
from hami_kubelet_api.dra.v1 import api_pb2_grpc as v1_grpc
from hami_kubelet_api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from hami_kubelet_api.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from hami_protocol.dra_driver import DRIVER

__all__ = ["DraSockets", "dra_socket_path", "registration_socket_path"]

log = structlog.get_logger(__name__)

DRA_SOCKET_NAME: Final = "dra.sock"


def registration_socket_path(kubelet_dir: Path) -> Path:
    """``<kubelet dir>/plugins_registry/gpu.hami.io-reg.sock`` (the Go helper's default)."""
    return kubelet_dir / PLUGINS_REGISTRY_DIR_NAME / f"{DRIVER}-reg.sock"


def dra_socket_path(kubelet_dir: Path) -> Path:
    """``<kubelet dir>/plugins/gpu.hami.io/dra.sock`` (the Go helper's default)."""
    return kubelet_dir / PLUGINS_DIR_NAME / DRIVER / DRA_SOCKET_NAME


def _check_length(path: Path) -> None:
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"{path} is longer than a unix socket path may be ({MAX_SOCKET_PATH})")


def _make_room(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    path.unlink(missing_ok=True)


async def _serve(path: Path, server: grpc.aio.Server) -> None:
    _make_room(path)
    server.add_insecure_port(f"unix:{path}")
    await server.start()


async def _stop(server: grpc.aio.Server | None, path: Path, grace: float | None) -> None:
    try:
        if server is not None:
            async with asyncio.timeout((grace or 0.0) + STOP_SLACK_S):
                await server.stop(grace)
    except TimeoutError:
        log.warning("DRA server did not stop in time", socket=str(path))
    finally:
        _remove(path)


class DraSockets:
    """Serve the driver on both sockets; start, stop."""

    def __init__(self, kubelet_dir: Path, driver: DraDriver) -> None:
        self.registration_path = registration_socket_path(kubelet_dir)
        self.dra_path = dra_socket_path(kubelet_dir)
        for path in (self.registration_path, self.dra_path):
            _check_length(path)
        self.state = RegistrationState()
        self._driver = driver
        self._registration: grpc.aio.Server | None = None
        self._dra: grpc.aio.Server | None = None

    @property
    def serving(self) -> bool:
        return self._registration is not None and self._dra is not None

    async def start(self) -> None:
        dra = grpc.aio.server()
        v1_grpc.add_DRAPluginServicer_to_server(DraV1Service(self._driver), dra)
        v1beta1_grpc.add_DRAPluginServicer_to_server(DraV1beta1Service(self._driver), dra)
        self._dra = dra  # held before awaiting: a start cut off is still stopped by stop()
        await _serve(self.dra_path, dra)
        registration = grpc.aio.server()
        registration_grpc.add_RegistrationServicer_to_server(
            RegistrationService(self.dra_path, self.state), registration
        )
        self._registration = registration
        await _serve(self.registration_path, registration)
        log.info(
            "DRA plugin serving",
            registration=str(self.registration_path),
            endpoint=str(self.dra_path),
        )

    async def stop(self, grace: float | None = STOP_GRACE_S) -> None:
        registration, self._registration = self._registration, None
        dra, self._dra = self._dra, None
        await _stop(registration, self.registration_path, grace)
        await _stop(dra, self.dra_path, grace)
        self.state.registered = False
