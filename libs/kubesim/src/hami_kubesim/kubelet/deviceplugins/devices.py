"""Pure device-manager decisions of the kubelet stand-in.

What the kubelet's device manager decides without doing I/O: which resource names a plugin may
register, how a ListAndWatch update becomes node capacity/allocatable, which device-plugin
resources each container of a pod asks for (init containers first), and which device IDs a
container gets (reused init-container devices first, then the plugin's preference among the
available ones, then any available ones) — the order of ``devicesToAllocate`` in the kubelet.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from hami_kube.objects import ContainerView, PodView
from hami_kubelet_api.constants import HEALTHY, SUPPORTED_VERSIONS
from hami_kubesim.objects.quantities import read_quantity
from hami_protocol.errors import RequestError
from hami_protocol.request.quantity import as_integer

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


class DeviceAllocationError(Exception):
    """The device manager cannot satisfy a container; the text is the kubelet's wording."""


def is_extended_resource_name(name: str) -> bool:
    """Mirror the kubelet's ``IsExtendedResourceName`` check on a plugin's resource name.

    Native resources (no ``/`` or in the ``kubernetes.io/`` domain) and names starting with
    ``requests.`` are refused; ``requests.<name>`` must be a qualified name.
    """
    if "/" not in name or "kubernetes.io/" in name or name.startswith("requests."):
        return False
    prefix, _, short = f"requests.{name}".partition("/")
    if "/" in short or not short or len(short) > 63 or not _QUALIFIED_NAME.match(short):
        return False
    return len(prefix) <= 253 and bool(_DNS_SUBDOMAIN.match(prefix))


def register_error(*, version: str, resource_name: str) -> str | None:
    """The kubelet's refusal text for a RegisterRequest, or ``None`` when it is acceptable."""
    if version not in SUPPORTED_VERSIONS:
        supported = "[" + " ".join(f'"{v}"' for v in SUPPORTED_VERSIONS) + "]"
        return (
            f'requested API version "{version}" is not supported by kubelet. '
            f"Supported version is {supported}"
        )
    if not is_extended_resource_name(resource_name):
        return f'the ResourceName "{resource_name}" is invalid'
    return None


@dataclass(frozen=True, slots=True)
class ResourceDevices:
    """The devices of one resource as the kubelet last heard of them."""

    healthy: frozenset[str] = frozenset()
    unhealthy: frozenset[str] = frozenset()

    @property
    def capacity(self) -> int:
        """All devices, healthy or not (kubelet ``GetCapacity``)."""
        return len(self.healthy) + len(self.unhealthy)

    @property
    def allocatable(self) -> int:
        """Healthy devices only."""
        return len(self.healthy)

    @classmethod
    def from_list(cls, devices: Iterable[tuple[str, str]]) -> ResourceDevices:
        """Build from ``(ID, health)`` pairs of one complete ListAndWatch message.

        Only the exact string ``Healthy`` counts as healthy, as in the kubelet.
        """
        healthy: set[str] = set()
        unhealthy: set[str] = set()
        for device_id, health in devices:
            (healthy if health == HEALTHY else unhealthy).add(device_id)
        return cls(frozenset(healthy), frozenset(unhealthy - healthy))

    def all_unhealthy(self) -> ResourceDevices:
        """What the kubelet keeps when a plugin's stream ends: every device, none healthy."""
        return ResourceDevices(frozenset(), self.healthy | self.unhealthy)


ContainerKind = Literal["init", "sidecar", "app"]


@dataclass(frozen=True, slots=True)
class ContainerDemand:
    """The device-plugin resources one container asks for, in pod admission order."""

    name: str
    kind: ContainerKind
    resources: tuple[tuple[str, int], ...]


def _device_count(resource: str, container: str, value: object) -> int:
    # The kubelet reads the quantity's Value(); the API server has made sure it is a whole,
    # non-negative number for an extended resource, so anything else is refused here.
    try:
        count = as_integer(read_quantity(value, key=resource))
    except RequestError:
        count = None
    if count is None or count < 0:
        raise DeviceAllocationError(
            f"invalid quantity {value!r} for {resource} in container {container}"
        )
    return count


def _container_resources(
    container: ContainerView, is_device_resource: Callable[[str], bool]
) -> tuple[tuple[str, int], ...]:
    # Extended resources are read from limits; requests may stand in when limits are absent
    # because the API server defaults one from the other for extended resources.
    asked = {**container.requests, **container.limits}
    name = container.name
    out = [
        (resource, _device_count(resource, name, value))
        for resource, value in sorted(asked.items())
        if is_device_resource(resource)
    ]
    return tuple((resource, count) for resource, count in out if count > 0)


def container_demands(
    pod: PodView, is_device_resource: Callable[[str], bool]
) -> tuple[ContainerDemand, ...]:
    """Every container of ``pod`` with its device-plugin requests: init containers first.

    Containers asking for no device-plugin resource are included (with no resources) so the
    caller sees the whole admission order. Raises :class:`DeviceAllocationError` for a count
    that is not a non-negative integer.
    """
    demands: list[ContainerDemand] = []
    for container in pod.init_containers:
        sidecar = container.restart_policy == "Always"
        kind: ContainerKind = "sidecar" if sidecar else "init"
        demands.append(
            ContainerDemand(
                container.name, kind, _container_resources(container, is_device_resource)
            )
        )
    demands.extend(
        ContainerDemand(container.name, "app", _container_resources(container, is_device_resource))
        for container in pod.containers
    )
    return tuple(demands)


@dataclass(frozen=True, slots=True)
class SelectionStart:
    """Where ``devicesToAllocate`` stands before it asks the plugin for a preference."""

    chosen: tuple[str, ...]
    """Devices already taken (reused from init containers); ``mustInclude`` for the plugin."""
    available: tuple[str, ...]
    """Healthy devices not in use by any container, sorted."""
    required: int

    @property
    def done(self) -> bool:
        return len(self.chosen) >= self.required


def start_selection(
    *,
    resource: str,
    required: int,
    healthy: frozenset[str],
    in_use: frozenset[str],
    reusable: Sequence[str],
) -> SelectionStart:
    """First half of the kubelet's choice: reuse, then check enough devices are available.

    ``reusable`` are devices of the pod's finished init containers (already counted in
    ``in_use``). Raises :class:`DeviceAllocationError` with the kubelet's text when too few
    healthy devices are free.
    """
    chosen = tuple(sorted(reusable))[:required]
    if len(chosen) >= required:
        return SelectionStart(chosen, (), required)
    available = tuple(sorted(healthy - in_use - set(chosen)))
    needed = required - len(chosen)
    if len(available) < needed:
        raise DeviceAllocationError(
            f"requested number of devices unavailable for {resource}. "
            f"Requested: {needed}, Available: {len(available)}"
        )
    return SelectionStart(chosen, available, required)


def finish_selection(start: SelectionStart, preferred: Sequence[str]) -> tuple[str, ...]:
    """Second half: the plugin's preferred IDs (only those available), then any available ones."""
    chosen = list(start.chosen)
    available = set(start.available)
    for candidates in (preferred, start.available):
        for device_id in candidates:
            if len(chosen) >= start.required:
                return tuple(chosen)
            if device_id in available and device_id not in chosen:
                chosen.append(device_id)
    if len(chosen) < start.required:
        raise DeviceAllocationError(
            "unexpectedly allocated less resources than required. "
            f"Requested: {start.required}, Got: {len(chosen)}"
        )
    return tuple(chosen)


class DeviceLedger:
    """Which device IDs each container of each admitted pod holds (kubelet ``podDevices``).

    Devices of init containers stay recorded for the pod's lifetime, as in the kubelet, so they
    are never handed to another pod while the pod is active.
    """

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {}

    def record(self, pod_uid: str, container: str, resource: str, ids: Sequence[str]) -> None:
        self._pods.setdefault(pod_uid, {}).setdefault(container, {})[resource] = tuple(ids)

    def container_devices(self, pod_uid: str, container: str, resource: str) -> tuple[str, ...]:
        return self._pods.get(pod_uid, {}).get(container, {}).get(resource, ())

    def pod_devices(self, pod_uid: str) -> dict[str, dict[str, tuple[str, ...]]]:
        """What each container of a pod holds so far, by container and resource (a copy)."""
        return {
            container: dict(resources)
            for container, resources in self._pods.get(pod_uid, {}).items()
        }

    def in_use(self, resource: str) -> frozenset[str]:
        return frozenset(
            device_id
            for containers in self._pods.values()
            for resources in containers.values()
            for device_id in resources.get(resource, ())
        )

    def release(self, pod_uid: str) -> bool:
        """Forget a pod's devices; ``True`` when it held any record."""
        return self._pods.pop(pod_uid, None) is not None

    def pod_uids(self) -> frozenset[str]:
        return frozenset(self._pods)
