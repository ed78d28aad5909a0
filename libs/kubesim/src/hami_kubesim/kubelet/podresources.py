"""The kubelet's pod-resources API (``v1.PodResourcesLister``) as the kubelet stand-in serves it.

Served on ``<pod-resources dir>/kubelet.sock`` (the kubelet's
``/var/lib/kubelet/pod-resources/kubelet.sock``). What it answers, as the kubelet does:

* ``List``: the *active* pods of the node — pods that entered the pod manager (a pod enters it
  when its admission starts, before any ``Allocate``) and are neither terminal nor rejected nor
  deleted — with, per container, the devices recorded so far. A container's devices are
  recorded right after the plugin's ``Allocate`` returns for it, so while a plugin answers
  ``Allocate`` (or ``GetPreferredAllocation``) the pod being admitted is listed with no devices
  for that container yet. Restartable init containers (sidecars) are listed first, then the
  app containers; ordinary init containers are not listed. One ``ContainerDevices`` per
  resource (the stand-in keeps no NUMA topology).
* ``Get``: one pod of the pod manager by namespace and name (terminal ones too);
  ``pod <name> in namespace <ns> not found`` (gRPC ``UNKNOWN``, a plain Go error) otherwise.
* ``GetAllocatableResources``: every healthy device of every registered resource, one
  ``ContainerDevices`` per device. No CPU ids (no CPU manager here).

The answers are built from a :class:`PodResourcesSource` (the stand-in) at each call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from hami_kube.objects import PodView
from hami_kubelet_api.podresources.v1 import api_pb2, api_pb2_grpc
from hami_kubesim.kubelet.deviceplugins.registration import UnixGrpcServer

ContainerDevices = Mapping[str, Mapping[str, Sequence[str]]]
"""Devices recorded per container name, then per resource name."""


@dataclass(frozen=True, slots=True)
class ListedContainer:
    name: str
    devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(resource, device IDs)`` per resource the container holds, sorted by resource."""


@dataclass(frozen=True, slots=True)
class ListedPod:
    namespace: str
    name: str
    containers: tuple[ListedContainer, ...] = ()


def listed_pod(pod: PodView, devices: ContainerDevices) -> ListedPod:
    """How ``List`` shows ``pod``: sidecars, then app containers, each with its devices."""
    shown = [c for c in pod.init_containers if c.restart_policy == "Always"]
    shown.extend(pod.containers)
    return ListedPod(
        namespace=pod.namespace or "default",
        name=pod.name,
        containers=tuple(
            ListedContainer(
                c.name,
                tuple(
                    (resource, tuple(ids))
                    for resource, ids in sorted((devices.get(c.name) or {}).items())
                    if ids
                ),
            )
            for c in shown
        ),
    )


class PodResourcesSource(Protocol):
    """What the server reads at each call (the kubelet stand-in)."""

    def active_pods(self) -> Sequence[ListedPod]: ...

    def known_pod(self, namespace: str, name: str) -> ListedPod | None: ...

    def allocatable_devices(self) -> Mapping[str, Sequence[str]]: ...


def _message(pod: ListedPod) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            api_pb2.ContainerResources(
                name=container.name,
                devices=[
                    api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids))
                    for resource, ids in container.devices
                ],
            )
            for container in pod.containers
        ],
    )


class _Lister(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, source: PodResourcesSource, calls: Counter[str]) -> None:
        self._source = source
        self._calls = calls

    async def List(  # noqa: N802 - gRPC method name
        self,
        request: api_pb2.ListPodResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.ListPodResourcesResponse:
        self._calls["List"] += 1
        pods = [_message(pod) for pod in self._source.active_pods()]
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)

    async def Get(  # noqa: N802 - gRPC method name
        self,
        request: api_pb2.GetPodResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.GetPodResourcesResponse:
        self._calls["Get"] += 1
        pod = self._source.known_pod(request.namespace, request.name)
        if pod is None:
            await context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.name} in namespace {request.namespace} not found",
            )
        return api_pb2.GetPodResourcesResponse(pod_resources=_message(pod))

    async def GetAllocatableResources(  # noqa: N802 - gRPC method name
        self,
        request: api_pb2.AllocatableResourcesRequest,
        context: grpc.aio.ServicerContext[object, object],
    ) -> api_pb2.AllocatableResourcesResponse:
        self._calls["GetAllocatableResources"] += 1
        devices = [
            api_pb2.ContainerDevices(resource_name=resource, device_ids=[device_id])
            for resource, ids in sorted(self._source.allocatable_devices().items())
            for device_id in sorted(ids)
        ]
        return api_pb2.AllocatableResourcesResponse(devices=devices)


class PodResourcesServer(UnixGrpcServer):
    """``v1.PodResourcesLister`` on ``<directory>/kubelet.sock``; start, stop, start again."""

    def __init__(self, *, socket_path: Path, source: PodResourcesSource) -> None:
        self.calls: Counter[str] = Counter()
        """Calls answered so far, by method name."""
        servicer = _Lister(source, self.calls)
        super().__init__(
            socket_path,
            lambda server: api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server),
        )
