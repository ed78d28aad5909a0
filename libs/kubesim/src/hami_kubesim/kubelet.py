"""A kubelet stand-in for one simulated node.

It serves the device-plugin ``Registration`` service on ``<plugin dir>/kubelet.sock``, keeps the
node's device capacity/allocatable current from every plugin's ListAndWatch stream, and admits
the pods bound to its node one at a time, like the kubelet's pod workers. No container runs.

What it copies from the kubelet (``pkg/kubelet/cm/devicemanager``):

* Node status: per resource, capacity = all devices, allocatable = devices reported
  ``Healthy`` (merge patches on ``nodes/<node>/status``; other resources untouched). It patches
  as soon as a plugin reports a change, where the kubelet waits for its next status sync.
* A plugin's stream ending: all its devices become unhealthy (capacity kept, allocatable 0);
  after the grace period (5 min) without a new registration the resource is dropped and reported
  with capacity and allocatable 0. A re-registration replaces the old endpoint at once.
* Admission: see :mod:`.kubelet_devicemanager`. A refusal marks the pod ``Failed`` with reason
  ``UnexpectedAdmissionError`` and message ``Pod was rejected: Allocate failed due to <error>,
  which is unexpected`` and posts a Warning Event, as ``rejectPod`` does. Pods asking for no
  device-plugin resource go straight to ``Running``.
* Devices are freed when a pod is deleted or reaches ``Succeeded``/``Failed``; a pod marked for
  deletion is deleted with grace period 0 once "stopped".
* Restart (:meth:`KubeletStandIn.restart`): every unix socket in the plugin dir is deleted
  (plugin sockets included, other files kept), plugin connections drop, ``kubelet.sock`` is
  created again; pod allocations survive (the kubelet's checkpoint) and device lists stay empty
  until the plugins register again. Node status is not rewritten meanwhile.

What each container was given (device IDs, envs, mounts, devices, annotations, CDI devices) is
kept in memory (:attr:`KubeletStandIn.allocations`) and, for pods that got any device, written
to the emulator's own pod annotation ``kubesim.hami.io/container-allocations`` as JSON
``{"node": N, "containers": [{"name", "kind": init|sidecar|app, "resources": [{"resource",
"deviceIDs", "envs", "mounts", "devices", "annotations", "cdiDevices"}]}]}`` before the pod is
marked ``Running``. A failing ``PreStartContainer`` leaves the pod ``Pending`` with that
container waiting in ``CreateContainerConfigError`` (no retry). Status writes are retried on
5xx/429 and lost connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import aiohttp
import structlog

from hami_kube.deviceplugin_api.constants import (
    ENDPOINT_STOP_GRACE_PERIOD_SECONDS,
    KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS,
)
from hami_kubesim.errors import ApiError
from hami_kubesim.kubelet_client import KubeApi, WatchEvent, node_path, pod_path
from hami_kubesim.kubelet_devicemanager import AdmissionError, DeviceManager, PreStartError
from hami_kubesim.kubelet_devices import ResourceDevices
from hami_kubesim.kubelet_registration import RegistrationServer
from hami_kubesim.kubelet_status import (
    ALLOCATIONS_ANNOTATION,
    REASON_UNEXPECTED_ADMISSION,
    PodAllocation,
    admission_failure_message,
    capacity_patch,
    next_pod_ip,
    rejected_status,
    rejection_event,
    running_status,
    start_failed_status,
)

log = structlog.get_logger(__name__)

_TERMINAL = frozenset({"Succeeded", "Failed"})


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class KubeletSettings:
    """How one kubelet stand-in runs.

    ``plugin_dir`` plays ``/var/lib/kubelet/device-plugins/``; keep its path short (unix socket
    paths are limited to 107 bytes). ``pod_cidr`` is where pod IPs come from; ``host_ip`` is used
    when the node object has no ``InternalIP`` address.
    """

    node_name: str
    plugin_dir: Path
    api_url: str
    pod_cidr: str = "10.244.0.0/24"
    host_ip: str = "127.0.0.1"
    dial_timeout: float = float(KUBELET_REGISTER_DIAL_TIMEOUT_SECONDS)
    call_timeout: float = 60.0
    """Deadline for GetPreferredAllocation/Allocate (the kubelet sets none; a safeguard here)."""
    grace_period: float = float(ENDPOINT_STOP_GRACE_PERIOD_SECONDS)


class KubeletStandIn:
    """Run with ``async with KubeletStandIn(settings) as kubelet:`` or ``await run()``."""

    def __init__(self, settings: KubeletSettings) -> None:
        self.settings = settings
        self._wake_publisher = asyncio.Event()
        self._devices = DeviceManager(
            node=settings.node_name,
            publish=self._wake_publisher.set,
            grace_period=settings.grace_period,
        )
        self._registration = RegistrationServer(
            plugin_dir=settings.plugin_dir,
            on_register=self._devices.register,
            dial_timeout=settings.dial_timeout,
            call_timeout=settings.call_timeout,
        )
        self._pods: dict[str, dict[str, Any]] = {}
        self._handled: set[str] = set()
        self._finalizing: set[str] = set()
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._allocations: dict[tuple[str, str], PodAllocation] = {}
        self._pod_ips: dict[str, str] = {}
        self._ready = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self.restarts = 0

    # ----- public views ------------------------------------------------------------------

    @property
    def node_name(self) -> str:
        return self.settings.node_name

    @property
    def plugin_dir(self) -> Path:
        return self.settings.plugin_dir

    @property
    def kubelet_socket(self) -> Path:
        return self._registration.socket_path

    @property
    def registrations(self) -> Mapping[str, int]:
        """Registrations accepted so far, per resource name."""
        return dict(self._devices.registrations)

    def resources(self) -> dict[str, ResourceDevices]:
        """Devices per registered resource, as last reported by the plugins."""
        return self._devices.resources()

    @property
    def allocations(self) -> Mapping[tuple[str, str], PodAllocation]:
        """What each admitted pod's containers were given, by ``(namespace, name)``."""
        return dict(self._allocations)

    def allocation(self, namespace: str, name: str) -> PodAllocation | None:
        return self._allocations.get((namespace, name))

    def devices_in_use(self, resource: str) -> frozenset[str]:
        """Device IDs held by active pods on this node."""
        return self._devices.in_use(resource)

    # ----- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._runner = asyncio.create_task(self.run(), name=f"kubelet-{self.node_name}")
        ready = asyncio.create_task(self._ready.wait(), name=f"kubelet-{self.node_name}-ready")
        done, _ = await asyncio.wait({self._runner, ready}, return_when=asyncio.FIRST_COMPLETED)
        if self._runner in done:
            ready.cancel()
            await self._runner
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner

    async def wait_ready(self) -> None:
        """Until kubelet.sock is served and the first pod list has been read."""
        await self._ready.wait()

    async def run(self) -> None:
        """Serve until cancelled."""
        self.settings.plugin_dir.mkdir(parents=True, exist_ok=True)
        try:
            async with KubeApi(base_url=self.settings.api_url) as api:
                self._remove_sockets()
                await self._registration.start()
                async with asyncio.TaskGroup() as group:
                    name = self.node_name
                    group.create_task(self._publish_loop(api), name=f"kubelet-{name}-node-status")
                    group.create_task(self._admit_loop(api), name=f"kubelet-{name}-admission")
                    group.create_task(self._watch_loop(api), name=f"kubelet-{name}-pod-watch")
        finally:
            self._ready.clear()
            await self._registration.stop()
            await self._devices.aclose()

    async def restart(self) -> None:
        """Simulate a kubelet restart as the plugins see it.

        The Registration server goes away, every unix socket in the plugin dir is deleted (the
        kubelet's start-up clean-up; other files stay), all plugin connections are dropped and
        ``kubelet.sock`` is created again. Pod allocations survive (the kubelet's checkpoint);
        device lists are empty until each plugin registers again.
        """
        await self._registration.stop()
        self._remove_sockets()
        await self._devices.forget_plugins()
        await self._registration.start()
        self.restarts += 1
        log.info("kubelet restarted", node=self.node_name)

    def _remove_sockets(self) -> None:
        """The kubelet's start-up clean-up: every unix socket in the plugin dir goes."""
        for entry in self.settings.plugin_dir.iterdir():
            if entry.is_socket():
                entry.unlink(missing_ok=True)

    # ----- node status -------------------------------------------------------------------

    async def _publish_loop(self, api: KubeApi) -> None:
        backoff = 0.05
        while True:
            await self._wake_publisher.wait()
            self._wake_publisher.clear()
            patch = capacity_patch(self._devices.capacity_view())
            try:
                await api.merge_patch(node_path(self.node_name, "status"), patch)
                backoff = 0.05
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as error:
                log.warning("node status patch failed", node=self.node_name, error=str(error))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
                self._wake_publisher.set()

    # ----- pods --------------------------------------------------------------------------

    async def _watch_loop(self, api: KubeApi) -> None:
        selector = f"spec.nodeName={self.node_name}"
        async for event in api.list_and_watch("/api/v1/pods", field_selector=selector):
            await self._on_event(api, event)
            if event.type == "SYNC":
                self._ready.set()

    async def _on_event(self, api: KubeApi, event: WatchEvent) -> None:
        if event.type == "SYNC":
            current = {str((o.get("metadata") or {}).get("uid", "")): o for o in event.objects}
            for uid in set(self._pods) - set(current):
                self._forget(uid)
            for pod in current.values():
                await self._observe(api, pod)
        elif event.type == "DELETED":
            self._forget(str((event.obj.get("metadata") or {}).get("uid", "")))
        elif event.type in {"ADDED", "MODIFIED"}:
            await self._observe(api, event.obj)

    async def _observe(self, api: KubeApi, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if (pod.get("spec") or {}).get("nodeName") != self.node_name:
            self._forget(uid)
            return
        self._pods[uid] = pod
        phase = (pod.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            self._free(uid)
            await self._finalize(api, pod)
        elif phase in _TERMINAL:
            self._free(uid)
            self._handled.add(uid)
        elif uid not in self._handled:
            self._handled.add(uid)
            if phase == "Running":
                return  # started before this stand-in knew it; nothing to admit
            self._queue.put_nowait(uid)

    def _free(self, uid: str) -> None:
        # Freed devices change nothing on the node object: allocatable never subtracts usage.
        self._devices.release(uid)
        self._pod_ips.pop(uid, None)

    def _forget(self, uid: str) -> None:
        self._free(uid)
        pod = self._pods.pop(uid, None)
        self._handled.discard(uid)
        self._finalizing.discard(uid)
        if pod is not None:
            meta = pod.get("metadata") or {}
            key = (str(meta.get("namespace", "default")), str(meta.get("name", "")))
            found = self._allocations.get(key)
            if found is not None and found.uid == uid:
                del self._allocations[key]

    async def _finalize(self, api: KubeApi, pod: Mapping[str, Any]) -> None:
        """Confirm a graceful deletion: the containers are 'stopped', delete with grace 0."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        if uid in self._finalizing:
            return
        self._finalizing.add(uid)
        options = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        path = pod_path(str(meta.get("namespace", "default")), str(meta.get("name", "")))
        with contextlib.suppress(ApiError, aiohttp.ClientError, OSError, TimeoutError):
            await api.delete(path, options)

    async def _admit_loop(self, api: KubeApi) -> None:
        while True:
            uid = await self._queue.get()
            pod = self._pods.get(uid)
            if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                await self._admit(api, pod)
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as error:
                log.warning("pod admission write failed", node=self.node_name, error=str(error))
            except Exception:
                # One bad pod must not stop the node's pod worker.
                log.exception("pod admission crashed", node=self.node_name)

    async def _admit(self, api: KubeApi, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid", ""))
        namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
        try:
            allocation = await self._devices.admit(pod)
        except AdmissionError as error:
            await self._reject(api, pod, admission_failure_message(str(error)))
            return
        if uid not in self._pods:  # deleted while the plugins were answering
            self._free(uid)
            return
        self._allocations[(namespace, name)] = allocation
        if allocation.has_devices:
            annotations = {ALLOCATIONS_ANNOTATION: allocation.annotation_value()}
            patch = {"metadata": {"annotations": annotations}}
            if await api.merge_patch_retrying(pod_path(namespace, name), patch) is None:
                self._forget(uid)
                return
        try:
            await self._devices.pre_start(allocation)
        except PreStartError as error:
            status = start_failed_status(pod, error.container, str(error))
            await api.merge_patch_retrying(pod_path(namespace, name, "status"), {"status": status})
            return
        host_ip = await self._host_ip(api)
        spec = pod.get("spec") or {}
        pod_ip = host_ip if spec.get("hostNetwork") else self._pod_ip(uid)
        status = running_status(pod, host_ip=host_ip, pod_ip=pod_ip, now=_now())
        status_path = pod_path(namespace, name, "status")
        if await api.merge_patch_retrying(status_path, {"status": status}) is not None:
            log.info("pod running", node=self.node_name, pod=f"{namespace}/{name}")
        else:
            self._forget(uid)

    async def _reject(self, api: KubeApi, pod: Mapping[str, Any], message: str) -> None:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "default")), str(meta.get("name", ""))
        log.info("pod rejected", node=self.node_name, pod=f"{namespace}/{name}", message=message)
        await api.merge_patch_retrying(
            pod_path(namespace, name, "status"), {"status": rejected_status(pod, message)}
        )
        event = rejection_event(
            pod,
            node=self.node_name,
            reason=REASON_UNEXPECTED_ADMISSION,
            message=message,
            now=_now(),
            suffix=secrets.token_hex(8),
        )
        with contextlib.suppress(ApiError, aiohttp.ClientError, OSError, TimeoutError):
            await api.create(f"/api/v1/namespaces/{namespace}/events", event)

    async def _host_ip(self, api: KubeApi) -> str:
        try:
            node = await api.get(node_path(self.node_name))
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError):
            return self.settings.host_ip
        for address in (node.get("status") or {}).get("addresses") or []:
            if address.get("type") == "InternalIP" and address.get("address"):
                return str(address["address"])
        return self.settings.host_ip

    def _pod_ip(self, uid: str) -> str:
        if uid not in self._pod_ips:
            taken = frozenset(self._pod_ips.values())
            self._pod_ips[uid] = next_pod_ip(self.settings.pod_cidr, taken, node=self.node_name)
        return self._pod_ips[uid]
