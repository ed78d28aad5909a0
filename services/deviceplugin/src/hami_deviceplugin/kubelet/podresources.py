"""The kubelet's pod-resources API as the identity rule's first source: ``List`` over
``/var/lib/kubelet/pod-resources/kubelet.sock`` (``--pod-resources-socket``; ``none`` turns it
off).

One call per Allocate and per GetPreferredAllocation, under a short deadline (:data:`DEADLINE_S`;
the kubelet answers from memory).  Any failure — no socket (the directory is not mounted), a
kubelet that does not serve ``v1`` (UNIMPLEMENTED), an error, the deadline — gives ``None`` and the
identity rule falls back to its second rule (:mod:`hami_deviceplugin.allocation.identity`).  The
first fallback is logged as a warning with its reason, further ones only when the reason changes,
and a recovery once.  The channel is kept open between calls (a unix socket: nothing to
re-resolve) and dropped after a failure, so a restarted kubelet is reached on its new socket.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Final

import grpc
import structlog

from hami_deviceplugin.allocation.identity import ListedContainer, ListedPod
from hami_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from hami_protocol.keys import ALLOCATE_IDENTITY_POD_RESOURCES

__all__ = ["DEADLINE_S", "PodResourcesClient", "listed_pods"]

log = structlog.get_logger(__name__)

DEADLINE_S: Final = 1.0
"""How long one ``List`` may take (well inside the Allocate deadline)."""


def listed_pods(response: api_pb2.ListPodResourcesResponse) -> tuple[ListedPod, ...]:
    """The answer as plain data."""
    return tuple(
        ListedPod(
            namespace=pod.namespace,
            name=pod.name,
            containers=tuple(
                ListedContainer(
                    container.name,
                    tuple(
                        (devices.resource_name, tuple(devices.device_ids))
                        for devices in container.devices
                    ),
                )
                for container in pod.containers
            ),
        )
        for pod in response.pod_resources
    )


class PodResourcesClient:
    def __init__(self, socket_path: Path | None, *, deadline_s: float = DEADLINE_S) -> None:
        """``socket_path`` None: never asked (every call falls back)."""
        self._path = socket_path
        self._deadline = deadline_s
        self._channel: grpc.aio.Channel | None = None
        self._failing: str | None = None
        """The reason of the last fallback; None while the kubelet answers."""
        self.calls = 0
        self.failures = 0

    @property
    def socket_path(self) -> Path | None:
        return self._path

    async def list(self) -> tuple[ListedPod, ...] | None:
        """The kubelet's active pods and their devices; None when they cannot be had."""
        if self._path is None:
            return None
        self.calls += 1
        try:
            if self._channel is None:
                # Only before a new channel: one that answered is used until a call fails, so
                # a List costs no thread hop (a restarted kubelet fails the call, and the next
                # one looks for its socket again).
                if not await asyncio.to_thread(os.path.exists, self._path):
                    raise FileNotFoundError(f"no socket at {self._path}")
                self._channel = grpc.aio.insecure_channel(f"unix:{self._path}")
            stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
            response = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=self._deadline)
        except (grpc.aio.AioRpcError, OSError) as exc:
            await self._failed(_reason(exc))
            return None
        except asyncio.CancelledError:
            # Another caller's failure closed the shared channel, and grpc.aio cancels the calls
            # on a closing channel: a failed call for this caller, not its cancellation.
            task = asyncio.current_task()
            if task is None or task.cancelling():
                raise
            return None
        if self._failing is not None:
            log.info("kubelet pod-resources API answers again", socket=str(self._path))
            self._failing = None
        return listed_pods(response)

    async def identity(self) -> str | None:
        """What the node may say of this plugin (``hami.io/node-allocate-identity``): that it
        tells pods apart through the kubelet, while the kubelet answers; None otherwise."""
        if self._path is None or await self.list() is None:
            return None
        return ALLOCATE_IDENTITY_POD_RESOURCES

    async def _failed(self, reason: str) -> None:
        self.failures += 1
        if reason != self._failing:
            log.warning(
                "kubelet pod-resources API unavailable; pods are identified without it",
                socket=str(self._path),
                reason=reason,
            )
        self._failing = reason
        await self.close()

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()


def _reason(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        code = exc.code()
        return f"{code.name if code is not None else 'UNKNOWN'}: {exc.details()}"
    return str(exc)
