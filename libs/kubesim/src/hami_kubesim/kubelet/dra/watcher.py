"""The kubelet's plugin watcher on ``<kubelet dir>/plugins_registry/``, for DRA drivers.

As the kubelet's ``pluginwatcher`` and its reconciler: a socket file that appears in the
directory is dialled, asked ``/pluginregistration.Registration/GetInfo``, checked, and told the
outcome with ``NotifyRegistrationStatus`` (``plugin_registered`` false with the kubelet's error
text on refusal); a socket that goes away deregisters its plugin; a socket replaced by a new
file (a restarted plugin) deregisters the old instance and registers the new one. A refused or
failed registration is retried with the operation executor's backoff (0.5 s doubling to 2 min
2 s) while the socket stays.

Checks on a ``PluginInfo``: ``type`` must be ``DRAPlugin`` (the only handler here), the name
non-empty, ``supported_versions`` non-empty and listing a service this kubelet speaks
(``v1.DRAPlugin``; the first one of the plugin's list that it speaks is used). An empty
``endpoint`` means the registration socket itself. Several instances of one driver may be
registered (rolling update); calls go to the newest.

Simplifications: the directory is polled every ``interval`` seconds (the kubelet is told by
inotify and reconciles every second) and only its top level is watched; the kubelet's removal
of the node's ResourceSlices 30 s after a driver's last instance goes is not modelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NoReturn

import grpc
import structlog

from hami_kubelet_api.pluginregistration.v1 import api_pb2, api_pb2_grpc
from hami_kubesim.kubelet.dra.plugin import (
    DRA_CALL_TIMEOUT_S,
    DRA_PLUGIN_TYPE,
    SUPPORTED_SERVICES,
    DraPlugin,
    rpc_error_text,
)

__all__ = ["NotRegisteredError", "PluginWatcher", "Refusal", "choose_service"]

log = structlog.get_logger(__name__)

_RETRY_FIRST_S: Final = 0.5
_RETRY_MAX_S: Final = 122.0
_CHANNEL_OPTIONS = (("grpc.default_authority", "localhost"),)

_Stamp = tuple[int, int]
"""``(inode, mtime ns)`` of a socket file: a new file under the same name is a new plugin."""


class NotRegisteredError(Exception):
    """No instance of the driver is registered; ``str()`` is the kubelet's text."""

    def __init__(self, driver: str) -> None:
        super().__init__(f"DRA driver {driver} is not registered")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A registration that failed: the socket's file name and the kubelet's error text."""

    socket: str
    error: str


class _RegistrationError(Exception):
    """A registration failed; ``str()`` is the kubelet's text."""


def choose_service(name: str, endpoint: str, offered: tuple[str, ...]) -> str:
    """The DRA service to use with a plugin (the first of its list this kubelet speaks);
    ``ValueError`` with the kubelet's text when there is none."""
    if not offered:
        reason = "empty list of supported gRPC services (aka supported versions)"
    else:
        chosen = next((s for s in offered if s in SUPPORTED_SERVICES), None)
        if chosen is not None:
            return chosen
        reason = (
            f"none of services supported by the plugin ({_go_list(offered)}) are supported "
            f"by the kubelet ({_go_list(SUPPORTED_SERVICES)})"
        )
    raise ValueError(
        f"invalid supported gRPC versions of DRA driver plugin {name} at endpoint {endpoint}: "
        f"{reason}"
    )


def _go_list(values: tuple[str, ...]) -> str:
    """A string slice as Go's ``%q`` prints it."""
    return "[" + " ".join(f'"{v}"' for v in values) + "]"


@dataclass(slots=True)
class _Retry:
    stamp: _Stamp
    at: float
    delay: float


class PluginWatcher:
    """Registered DRA drivers of one node; :meth:`run` watches the directory until cancelled."""

    def __init__(
        self,
        directory: Path,
        *,
        node: str,
        interval: float = 1.0,
        dial_timeout: float = 10.0,
        call_timeout: float = DRA_CALL_TIMEOUT_S,
    ) -> None:
        self.directory = directory
        self._node = node
        self._interval = interval
        self._dial_timeout = dial_timeout
        self._call_timeout = call_timeout
        self._by_socket: dict[Path, tuple[_Stamp, DraPlugin]] = {}
        self._instances: dict[str, list[DraPlugin]] = {}
        self._retries: dict[Path, _Retry] = {}
        self._wake = asyncio.Event()
        self.registrations: dict[str, int] = {}
        """How many times each driver registered (tests poll this)."""
        self.refusals: list[Refusal] = []
        """Every failed registration, oldest first."""

    # ----- what the DRA manager asks ---------------------------------------------------

    def get(self, driver: str) -> DraPlugin:
        """The newest registered instance of ``driver``; :class:`NotRegisteredError` if none."""
        instances = self._instances.get(driver)
        if not instances:
            raise NotRegisteredError(driver)
        return instances[-1]

    @property
    def drivers(self) -> Mapping[str, Path]:
        """The endpoint of the instance in use, per registered driver."""
        return {name: found[-1].endpoint for name, found in self._instances.items() if found}

    # ----- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            while True:
                self._wake.clear()
                await self.reconcile()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._interval):
                        await self._wake.wait()
        finally:
            await self.aclose()

    async def forget(self) -> None:
        """A kubelet restart: every plugin connection is dropped; the next pass registers the
        sockets still in the directory again (the kubelet never deletes them)."""
        await self.aclose()
        self._retries.clear()
        self._wake.set()

    async def aclose(self) -> None:
        for _, plugin in list(self._by_socket.values()):
            await plugin.close()
        self._by_socket.clear()
        self._instances.clear()

    # ----- the reconciler ----------------------------------------------------------------

    def _scan(self) -> dict[Path, _Stamp]:
        found: dict[Path, _Stamp] = {}
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return found
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISSOCK(info.st_mode):
                found[Path(entry.path)] = (info.st_ino, info.st_mtime_ns)
        return found

    async def reconcile(self) -> None:
        """One pass: deregister what went or was replaced, register what is new."""
        seen = self._scan()
        for path, (stamp, plugin) in list(self._by_socket.items()):
            if seen.get(path) != stamp:
                await self._deregister(path, plugin)
        for path in list(self._retries):
            if seen.get(path) != self._retries[path].stamp:
                del self._retries[path]
        now = time.monotonic()
        for path, stamp in seen.items():
            retry = self._retries.get(path)
            if path in self._by_socket or (retry is not None and now < retry.at):
                continue
            try:
                await self._register(path, stamp)
            except _RegistrationError as failed:
                delay = _RETRY_FIRST_S if retry is None else min(2 * retry.delay, _RETRY_MAX_S)
                self._retries[path] = _Retry(stamp, time.monotonic() + delay, delay)
                self.refusals.append(Refusal(path.name, str(failed)))
                log.warning("plugin registration failed", node=self._node, error=str(failed))
            else:
                self._retries.pop(path, None)

    async def _deregister(self, path: Path, plugin: DraPlugin) -> None:
        del self._by_socket[path]
        instances = self._instances.get(plugin.name, [])
        if plugin in instances:
            instances.remove(plugin)
        if not instances:
            self._instances.pop(plugin.name, None)
        await plugin.close()
        log.info("DRA plugin deregistered", node=self._node, driver=plugin.name)

    async def _register(self, path: Path, stamp: _Stamp) -> None:
        channel = grpc.aio.insecure_channel(f"unix:{path}", options=_CHANNEL_OPTIONS)
        try:
            try:
                async with asyncio.timeout(self._dial_timeout):
                    await channel.channel_ready()
            except TimeoutError as error:
                raise _RegistrationError(
                    f"RegisterPlugin error -- dial failed at socket {path}, err: "
                    "context deadline exceeded"
                ) from error
            stub = api_pb2_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(api_pb2.InfoRequest(), timeout=self._call_timeout)
            except grpc.aio.AioRpcError as error:
                raise _RegistrationError(
                    "RegisterPlugin error -- failed to get plugin info using RPC GetInfo at "
                    f"socket {path}, err: {rpc_error_text(error)}"
                ) from error
            plugin = await self._admit(stub, path, info)
            self._by_socket[path] = (stamp, plugin)
            self._instances.setdefault(plugin.name, []).append(plugin)
            self.registrations[plugin.name] = self.registrations.get(plugin.name, 0) + 1
            log.info("DRA plugin registered", node=self._node, driver=plugin.name)
            try:  # the registration stands even when the plugin is not told
                await self._notify(stub, registered=True, error="")
            except grpc.aio.AioRpcError as error:
                log.warning(
                    "RegisterPlugin error -- failed to send registration status",
                    node=self._node,
                    socket=str(path),
                    error=rpc_error_text(error),
                )
        finally:
            await channel.close()

    async def _admit(
        self, stub: api_pb2_grpc.RegistrationAsyncStub, path: Path, info: api_pb2.PluginInfo
    ) -> DraPlugin:
        if info.type != DRA_PLUGIN_TYPE:
            await self._refuse(
                stub,
                f"RegisterPlugin error -- no handler registered for plugin type: {info.type} "
                f"at socket {path}",
            )
        endpoint = info.endpoint or str(path)
        try:
            if not info.name:
                raise ValueError("plugin name is empty")
            service = choose_service(info.name, endpoint, tuple(info.supported_versions))
        except ValueError as error:
            await self._refuse(
                stub, f"RegisterPlugin error -- plugin validation failed with err: {error}"
            )
        return DraPlugin(
            name=info.name,
            endpoint=Path(endpoint),
            service=service,
            registration_socket=path,
            call_timeout=self._call_timeout,
        )

    async def _refuse(self, stub: api_pb2_grpc.RegistrationAsyncStub, error: str) -> NoReturn:
        with contextlib.suppress(grpc.aio.AioRpcError):  # the kubelet ignores this failure
            await self._notify(stub, registered=False, error=error)
        raise _RegistrationError(error)

    async def _notify(
        self, stub: api_pb2_grpc.RegistrationAsyncStub, *, registered: bool, error: str
    ) -> None:
        status = api_pb2.RegistrationStatus(plugin_registered=registered, error=error)
        await stub.NotifyRegistrationStatus(status, timeout=self._call_timeout)
