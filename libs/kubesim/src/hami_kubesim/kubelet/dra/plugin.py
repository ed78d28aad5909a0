"""The kubelet's gRPC client of one registered DRA driver (``k8s.io.kubelet.pkg.apis.dra.v1``).

:class:`DraPlugin` dials ``unix:<endpoint>`` and makes NodePrepareResources /
NodeUnprepareResources calls, each with the kubelet's 45 s deadline; the answers become plain
data (:class:`~.claims.PreparedDevice` lists and per-claim error texts), a failed call a
:class:`DraCallError` whose text is Go's ``rpc error: code = ... desc = ...``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import grpc

from hami_kubelet_api.constants import DRA_CALL_TIMEOUT_SECONDS, DRA_PLUGIN_TYPE, DRA_V1_VERSION
from hami_kubelet_api.dra.v1 import api_pb2, api_pb2_grpc
from hami_kubesim.kubelet.dra.claims import PreparedDevice
from hami_kubesim.kubelet.status import grpc_error_text

__all__ = [
    "DRA_CALL_TIMEOUT_S",
    "DRA_PLUGIN_TYPE",
    "SUPPORTED_SERVICES",
    "ClaimRef",
    "DraCallError",
    "DraPlugin",
    "PrepareResult",
    "rpc_error_text",
]

SUPPORTED_SERVICES: Final = (DRA_V1_VERSION,)
"""The DRA gRPC services this kubelet speaks (a 1.34+ kubelet also speaks ``v1beta1``)."""
DRA_CALL_TIMEOUT_S: Final = float(DRA_CALL_TIMEOUT_SECONDS)
"""The kubelet's deadline for each NodePrepareResources / NodeUnprepareResources."""

_CHANNEL_OPTIONS = (("grpc.default_authority", "localhost"),)
_CONNECTION_CLOSING = "rpc error: code = Canceled desc = grpc: the client connection is closing"


class DraCallError(Exception):
    """A call to a driver failed as a whole; ``str()`` is the gRPC error as Go prints it."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it to a driver (all three fields are required)."""

    namespace: str
    name: str
    uid: str

    def message(self) -> api_pb2.Claim:
        return api_pb2.Claim(namespace=self.namespace, uid=self.uid, name=self.name)


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """One claim's entry in a NodePrepareResources answer."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class DraPlugin:
    """One registered instance of a DRA driver: its name, endpoint and gRPC channel."""

    def __init__(
        self,
        *,
        name: str,
        endpoint: Path,
        service: str,
        registration_socket: Path,
        call_timeout: float = DRA_CALL_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.endpoint = endpoint
        self.service = service
        """The chosen gRPC service (``v1.DRAPlugin``)."""
        self.registration_socket = registration_socket
        self._timeout = call_timeout
        # Like grpc.NewClient: connects on the first call, reconnects by itself.
        self._channel = grpc.aio.insecure_channel(f"unix:{endpoint}", options=_CHANNEL_OPTIONS)
        self._stub = api_pb2_grpc.DRAPluginStub(self._channel)
        self.closed = False

    def __repr__(self) -> str:
        return f"DraPlugin({self.name!r}, {str(self.endpoint)!r})"

    async def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareResult]:
        """NodePrepareResources for ``claims``: the answer per claim UID."""
        request = api_pb2.NodePrepareResourcesRequest(claims=[c.message() for c in claims])
        try:
            reply = await self._stub.NodePrepareResources(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise DraCallError(rpc_error_text(error)) from error
        except asyncio.CancelledError:
            self._closed_mid_call()
            raise
        return {
            uid: PrepareResult(
                devices=tuple(
                    PreparedDevice(
                        driver=self.name,
                        pool=d.pool_name,
                        device=d.device_name,
                        request_names=tuple(d.request_names),
                        cdi_ids=tuple(d.cdi_device_ids),
                        share_id=d.share_id if d.HasField("share_id") else None,
                    )
                    for d in result.devices
                ),
                error=result.error,
            )
            for uid, result in reply.claims.items()
        }

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """NodeUnprepareResources for ``claims``: the error text per claim UID ("" = done)."""
        request = api_pb2.NodeUnprepareResourcesRequest(claims=[c.message() for c in claims])
        try:
            reply = await self._stub.NodeUnprepareResources(request, timeout=self._timeout)
        except grpc.aio.AioRpcError as error:
            raise DraCallError(rpc_error_text(error)) from error
        except asyncio.CancelledError:
            self._closed_mid_call()
            raise
        return {uid: result.error for uid, result in reply.claims.items()}

    def _closed_mid_call(self) -> None:
        """grpc.aio cancels the calls of a channel being closed, so the awaiting task sees a
        ``CancelledError`` it was never sent; the kubelet's Go client gets an error instead.
        A task that is itself being cancelled keeps its cancellation."""
        task = asyncio.current_task()
        if self.closed and (task is None or not task.cancelling()):
            raise DraCallError(_CONNECTION_CLOSING) from None

    async def close(self) -> None:
        self.closed = True
        await self._channel.close()


def rpc_error_text(error: grpc.aio.AioRpcError) -> str:
    """A gRPC error as the kubelet's Go client prints it."""
    return grpc_error_text(error.code().name, error.details() or "")
