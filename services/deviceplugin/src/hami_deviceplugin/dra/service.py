"""The kubelet-facing gRPC services of the DRA mode.

* ``pluginregistration.Registration`` on the registration socket: ``GetInfo`` answers type
  ``DRAPlugin``, name ``gpu.hami.io``, the DRA socket's absolute path and
  ``["v1.DRAPlugin", "v1beta1.DRAPlugin"]`` (the kubelet takes the first it knows: 1.34+ v1,
  1.32–1.33 v1beta1); ``NotifyRegistrationStatus`` records the outcome and, like the Go helper,
  fails the call when the kubelet did not register the plugin.
* ``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` and its v1beta1 twin on the DRA socket, both
  answered by one :class:`~.driver.DraDriver` (v1beta1 has no ``share_id``).  Every claim of a
  request gets an entry; a claim that fails carries its ``error``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import grpc
import structlog

from hami_deviceplugin.dra.claims import ClaimRef
from hami_deviceplugin.dra.driver import DraDriver
from hami_deviceplugin.kubelet.servicer import Context
from hami_kubelet_api.constants import DRA_PLUGIN_TYPE, DRA_V1_VERSION, DRA_V1BETA1_VERSION
from hami_kubelet_api.dra.v1 import api_pb2 as v1
from hami_kubelet_api.dra.v1 import api_pb2_grpc as v1_grpc
from hami_kubelet_api.dra.v1beta1 import api_pb2 as v1beta1
from hami_kubelet_api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from hami_kubelet_api.pluginregistration.v1 import api_pb2 as registration
from hami_kubelet_api.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from hami_protocol.dra_driver import DRIVER

__all__ = [
    "SUPPORTED_VERSIONS",
    "DraV1Service",
    "DraV1beta1Service",
    "RegistrationService",
    "RegistrationState",
]

log = structlog.get_logger(__name__)

SUPPORTED_VERSIONS: Final = (DRA_V1_VERSION, DRA_V1BETA1_VERSION)


@dataclass
class RegistrationState:
    """What the kubelet last said about the registration."""

    registered: bool = False
    error: str = ""
    notifications: int = 0
    info_calls: int = 0
    history: list[tuple[bool, str]] = field(default_factory=list)


class RegistrationService(registration_grpc.RegistrationServicer):
    def __init__(self, endpoint: Path, state: RegistrationState) -> None:
        self._endpoint = str(endpoint)
        self._state = state

    async def GetInfo(  # noqa: N802 - gRPC method name
        self, request: registration.InfoRequest, context: Context
    ) -> registration.PluginInfo:
        self._state.info_calls += 1
        return registration.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=DRIVER,
            endpoint=self._endpoint,
            supported_versions=list(SUPPORTED_VERSIONS),
        )

    async def NotifyRegistrationStatus(  # noqa: N802 - gRPC method name
        self,
        request: registration.RegistrationStatus,
        context: Context,
    ) -> registration.RegistrationStatusResponse:
        state = self._state
        state.registered = request.plugin_registered
        state.error = request.error
        state.notifications += 1
        state.history.append((request.plugin_registered, request.error))
        if not request.plugin_registered:
            log.error("the kubelet did not register the DRA plugin", error=request.error)
            await context.abort(
                grpc.StatusCode.UNKNOWN, f"plugin registration failed: {request.error}"
            )
        log.info("registered with the kubelet", driver=DRIVER, endpoint=self._endpoint)
        return registration.RegistrationStatusResponse()


def _refs(claims: Iterable[Any]) -> list[ClaimRef]:
    return [ClaimRef(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]


async def _prepare(driver: DraDriver, request: Any, api: ModuleType, *, share_ids: bool) -> Any:
    outcomes = await driver.prepare(_refs(request.claims))
    response = api.NodePrepareResourcesResponse()
    for uid, outcome in outcomes.items():
        entry = response.claims[uid]
        if outcome.error:
            entry.error = outcome.error
            continue
        for device in outcome.devices:
            added = entry.devices.add(
                request_names=list(device.request_names),
                pool_name=device.pool,
                device_name=device.device,
                cdi_device_ids=list(device.cdi_ids),
            )
            if share_ids and device.share_id is not None:
                added.share_id = device.share_id
    return response


async def _unprepare(driver: DraDriver, request: Any, api: ModuleType) -> Any:
    errors = await driver.unprepare(_refs(request.claims))
    response = api.NodeUnprepareResourcesResponse()
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


class _DraMethods:
    """Both API versions' methods: the same driver, each version's own messages."""

    _api: ModuleType
    _share_ids: bool

    def __init__(self, driver: DraDriver) -> None:
        self._driver = driver

    async def NodePrepareResources(  # noqa: N802 - gRPC method name
        self, request: Any, context: Context
    ) -> Any:
        return await _prepare(self._driver, request, self._api, share_ids=self._share_ids)

    async def NodeUnprepareResources(  # noqa: N802 - gRPC method name
        self, request: Any, context: Context
    ) -> Any:
        return await _unprepare(self._driver, request, self._api)


class DraV1Service(_DraMethods, v1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin`` (with ``share_id``)."""

    _api = v1
    _share_ids = True


class DraV1beta1Service(_DraMethods, v1beta1_grpc.DRAPluginServicer):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin`` (no ``share_id``)."""

    _api = v1beta1
    _share_ids = False
