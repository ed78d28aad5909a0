"""A fake DRA driver for the kubelet stand-in's tests, over real gRPC on unix sockets.

:class:`FakeDraDriver` serves ``pluginregistration.Registration`` on
``<registry dir>/<driver>-reg.sock`` and ``v1.DRAPlugin`` on ``<plugins dir>/<driver>/dra.sock``
(the kubelet-plugin helper's layout), records every call the kubelet makes and every
registration status it is told. NodePrepareResources answers each claim with the devices the
test gave it (:attr:`FakeDraDriver.devices`, default one ``gpu-0`` for request ``gpu``) and
writes a transient CDI spec ``k8s.<driver>-claim_<uid>.json`` (kind ``k8s.<driver>/claim``,
one device ``<uid>-<device>`` per device, env from :attr:`FakeDraDriver.env`); Unprepare
removes it. Both are idempotent. It stands for an external component; the project's own driver
is ``hami_deviceplugin``'s DRA mode.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from hami_kubelet_api.dra.v1 import api_pb2 as dra_pb2
from hami_kubelet_api.dra.v1 import api_pb2_grpc as dra_grpc
from hami_kubelet_api.pluginregistration.v1 import api_pb2 as reg_pb2
from hami_kubelet_api.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from hami_kubesim.kubelet.deviceplugins.registration import UnixGrpcServer

__all__ = ["FakeDevice", "FakeDraDriver"]

_Context = grpc.aio.ServicerContext[object, object]


@dataclass(frozen=True, slots=True)
class FakeDevice:
    """A device the fake driver prepares for a claim."""

    device: str = "gpu-0"
    requests: tuple[str, ...] = ("gpu",)
    env: Mapping[str, str] | None = None
    """Env of its CDI device (default: :attr:`FakeDraDriver.env` of the claim)."""
    mounts: Sequence[Mapping[str, Any]] = ()
    """CDI ``mounts`` entries of its CDI device."""


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, driver: FakeDraDriver) -> None:
        self._driver = driver

    async def GetInfo(  # noqa: N802 - gRPC method name
        self, request: reg_pb2.InfoRequest, context: _Context
    ) -> reg_pb2.PluginInfo:
        d = self._driver
        d.info_calls += 1
        return reg_pb2.PluginInfo(
            type=d.plugin_type,
            name=d.name,
            endpoint=d.endpoint if d.endpoint is not None else str(d.dra_socket),
            supported_versions=list(d.versions),
        )

    async def NotifyRegistrationStatus(  # noqa: N802 - gRPC method name
        self, request: reg_pb2.RegistrationStatus, context: _Context
    ) -> reg_pb2.RegistrationStatusResponse:
        self._driver.notifications.append((request.plugin_registered, request.error))
        if not request.plugin_registered:  # what the kubelet-plugin helper does
            await context.abort(grpc.StatusCode.UNKNOWN, f"failed registration: {request.error}")
        return reg_pb2.RegistrationStatusResponse()


class _Dra(dra_grpc.DRAPluginServicer):
    def __init__(self, driver: FakeDraDriver) -> None:
        self._driver = driver

    async def NodePrepareResources(  # noqa: N802 - gRPC method name
        self, request: dra_pb2.NodePrepareResourcesRequest, context: _Context
    ) -> dra_pb2.NodePrepareResourcesResponse:
        d = self._driver
        claims = [(c.namespace, c.name, c.uid) for c in request.claims]
        d.prepare_calls.append(claims)
        if d.call_error is not None:
            await context.abort(grpc.StatusCode.INTERNAL, d.call_error)
        answer = dra_pb2.NodePrepareResourcesResponse()
        for namespace, name, uid in claims:
            if d.prepare_error is not None:
                answer.claims[uid].error = d.prepare_error
                continue
            answer.claims[uid].devices.extend(d.prepare_claim(namespace, name, uid))
        return answer

    async def NodeUnprepareResources(  # noqa: N802 - gRPC method name
        self, request: dra_pb2.NodeUnprepareResourcesRequest, context: _Context
    ) -> dra_pb2.NodeUnprepareResourcesResponse:
        d = self._driver
        d.unprepare_calls.append([(c.namespace, c.name, c.uid) for c in request.claims])
        answer = dra_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            if d.unprepare_error is not None:
                answer.claims[claim.uid].error = d.unprepare_error
                continue
            d.spec_path(claim.uid).unlink(missing_ok=True)
            answer.claims[claim.uid].error = ""
        return answer


class FakeDraDriver:
    """A DRA driver with settable answers that records the kubelet's calls."""

    def __init__(
        self,
        *,
        registry_dir: Path,
        plugins_dir: Path,
        cdi_dir: Path,
        name: str = "gpu.hami.io",
        node: str = "node-a",
    ) -> None:
        self.name = name
        self.node = node
        self.cdi_dir = cdi_dir
        self.reg_socket = registry_dir / f"{name}-reg.sock"
        self.dra_socket = plugins_dir / name / "dra.sock"
        self.plugin_type = "DRAPlugin"
        self.versions: tuple[str, ...] = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
        self.endpoint: str | None = None
        """``PluginInfo.endpoint`` (None: the DRA socket's path)."""
        self.devices: dict[str, tuple[FakeDevice, ...]] = {}
        """What to prepare per claim name (default: one :class:`FakeDevice`)."""
        self.env: Callable[[str, str], Mapping[str, str]] = lambda name, uid: {
            "FAKE_CLAIM": name,
            "FAKE_CLAIM_UID": uid,
        }
        self.prepare_error: str | None = None
        """Answer every claim with this error."""
        self.call_error: str | None = None
        """Fail every NodePrepareResources call as a whole (gRPC INTERNAL) with this text."""
        self.unprepare_error: str | None = None
        """Answer every claim of NodeUnprepareResources with this error (nothing removed)."""
        self.info_calls = 0
        self.notifications: list[tuple[bool, str]] = []
        self.prepare_calls: list[list[tuple[str, str, str]]] = []
        self.unprepare_calls: list[list[tuple[str, str, str]]] = []
        self._dra = UnixGrpcServer(
            self.dra_socket, lambda s: dra_grpc.add_DRAPluginServicer_to_server(_Dra(self), s)
        )
        self._registration = UnixGrpcServer(
            self.reg_socket,
            lambda s: reg_grpc.add_RegistrationServicer_to_server(_Registration(self), s),
        )

    @property
    def kind(self) -> str:
        return f"k8s.{self.name}/claim"

    def spec_path(self, uid: str) -> Path:
        return self.cdi_dir / f"k8s.{self.name}-claim_{uid}.json"

    def cdi_id(self, uid: str, device: str) -> str:
        return f"{self.kind}={uid}-{device}"

    def prepare_claim(self, namespace: str, name: str, uid: str) -> list[dra_pb2.Device]:
        """Write the claim's CDI spec and return its devices (the same again each time)."""
        devices = self.devices.get(name, (FakeDevice(),))
        spec = {
            "cdiVersion": "0.5.0",  # device names start with the claim UID, maybe a digit
            "kind": self.kind,
            "devices": [
                {
                    "name": f"{uid}-{d.device}",
                    "containerEdits": {
                        "env": [f"{k}={v}" for k, v in (d.env or self.env(name, uid)).items()],
                        "mounts": list(d.mounts),
                    },
                }
                for d in devices
            ],
        }
        self.cdi_dir.mkdir(parents=True, exist_ok=True)
        self.spec_path(uid).write_text(json.dumps(spec))
        return [
            dra_pb2.Device(
                request_names=list(d.requests),
                pool_name=self.node,
                device_name=d.device,
                cdi_device_ids=[self.cdi_id(uid, d.device)],
            )
            for d in devices
        ]

    async def serve(self) -> None:
        """Serve the DRA service, then the registration socket (the kubelet sees it last)."""
        await self._dra.start()
        await self._registration.start()

    async def stop(self) -> None:
        """Stop both servers; their socket files go (the kubelet deregisters the driver)."""
        await self._registration.stop()
        await self._dra.stop()
