"""Pure: the half of an Allocate decision both plugins share: the pod as Allocate reads it
(:class:`AllocatingPod`, a frozen snapshot taken through :class:`hami_kube.objects.PodView`) and
serving the kubelet's requests from the pod's ``hami.io/<x>-devices-to-allocate`` list.

The kubelet names no pod and no container in ``Allocate``; it only sends device IDs, one request
per container that asks for the resource, init containers first.  So each request is served by
the next entry of the list that still holds devices (the list has one entry per container, init
containers first), and that entry's container is the one being answered.  What the container
gets is the plugin's business (:mod:`hami_deviceplugin.gpu.plan` for GPUs,
:mod:`hami_deviceplugin.rdma.plan` for RDMA NICs).

The consumed entry becomes an empty segment (the canonical decode keeps the list from growing);
when no entry of any vendor is left the pod is done (bind-phase ``success``, node lock released).
Every way the inputs can be wrong raises :class:`~hami_deviceplugin.errors.AllocateError` with
the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

from hami_deviceplugin.allocation.pending import others_pending
from hami_deviceplugin.errors import invalid
from hami_kube.objects import ContainerView, PodView
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import BIND_PHASE, BIND_PHASE_FAILED, VGPU_NODE
from hami_protocol.pod import envs
from hami_protocol.pod.devices import (
    ContainerDevices,
    PodSingleDevice,
    decode_pod_devices_canonical,
    encode_pod_devices,
    has_pending,
    pop_next_pending,
)

__all__ = [
    "AllocatingContainer",
    "AllocatingPod",
    "ContainerKind",
    "ContainerTurn",
    "ListPlan",
    "allocating_pod",
    "check_pod",
    "consume_entries",
    "decode_entries",
]

G = TypeVar("G")

_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})


ContainerKind = Literal["init", "sidecar", "app"]
"""An ordinary init container, a restartable one (sidecar), or an app container."""


@dataclass(frozen=True, slots=True)
class AllocatingContainer:
    name: str
    disable_control: bool = False
    limits: tuple[tuple[str, str], ...] = ()
    """Resource limits (requests where no limit is given), as written, sorted by name."""
    kind: ContainerKind = "app"

    def limit(self, resource: str) -> str | None:
        return next((value for name, value in self.limits if name == resource), None)


@dataclass(frozen=True, slots=True)
class AllocatingPod:
    """What Allocate reads from a pod: identity, containers (init first), annotations, and the
    state the identity rule (:mod:`hami_deviceplugin.allocation.identity`) looks at."""

    namespace: str
    name: str
    uid: str
    containers: tuple[AllocatingContainer, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    phase: str = ""
    """``status.phase``; "" (not reported yet) reads as Pending."""
    deleting: bool = False
    scheduler_name: str = ""
    resource_version: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ContainerTurn:
    """One request of the kubelet's call with the list entry that serves it."""

    number: int
    """The request's position in the call."""
    index: int
    """The entry's position in the list, which is its container's (init containers first)."""
    container: AllocatingContainer
    devices: ContainerDevices
    """The entry: what the scheduler gave the container."""
    requested: Sequence[str]
    """The kubelet's device IDs for the container."""


@dataclass(frozen=True, slots=True)
class ListPlan(Generic[G]):
    """What one Allocate call decided from one ``-devices-to-allocate`` list."""

    grants: tuple[G, ...]
    remaining: str
    """The list's new value."""
    done: bool
    """No list of any vendor waits any more: bind-phase success, release the lock."""


# --- reading the pod ----------------------------------------------------------------------------


def _disable_control(container: ContainerView) -> bool:
    for variable in container.env:
        if variable.get("name") == envs.CUDA_DISABLE_CONTROL:
            value = variable.get("value")
            if isinstance(value, str) and value in _GO_TRUE:
                return True
    return False


def _limits(container: ContainerView) -> tuple[tuple[str, str], ...]:
    merged: dict[str, str] = {}
    for values in (container.requests, container.limits):
        merged.update((str(k), str(v)) for k, v in values.items())
    return tuple(sorted(merged.items()))


def _container(container: ContainerView, kind: ContainerKind) -> AllocatingContainer:
    return AllocatingContainer(
        container.name, _disable_control(container), _limits(container), kind
    )


def allocating_pod(raw: Mapping[str, Any]) -> AllocatingPod:
    """The parts of a pod object Allocate needs (a missing or mistyped field reads as empty)."""
    pod = PodView(raw)
    init = tuple(
        _container(c, "sidecar" if c.restart_policy == "Always" else "init")
        for c in pod.init_containers
    )
    return AllocatingPod(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        containers=init + tuple(_container(c, "app") for c in pod.containers),
        annotations=dict(pod.annotations),
        node_name=pod.node_name,
        phase=pod.phase,
        deleting=pod.deleting,
        scheduler_name=pod.scheduler_name,
        resource_version=pod.resource_version,
    )


def decode_entries(pod: AllocatingPod, key: str) -> PodSingleDevice:
    """The pod's ``key`` list, one entry per container."""
    value = pod.annotations.get(key)
    if value is None:
        raise invalid(f"pod has no {key} annotation")
    try:
        return decode_pod_devices_canonical(value, key=key)
    except ProtocolError as exc:
        raise invalid(str(exc)) from None


# --- deciding -----------------------------------------------------------------------------------


def check_pod(pod: AllocatingPod, node_name: str) -> None:
    """Refuse a pod placed on another node or whose allocation already failed."""
    placed = pod.annotations.get(VGPU_NODE)
    if placed is not None and placed != node_name:
        raise invalid(f"pod was scheduled to node {placed!r}, not {node_name!r}")
    if pod.annotations.get(BIND_PHASE) == BIND_PHASE_FAILED:
        raise invalid("the pod's device allocation has already failed (bind-phase failed)")


def consume_entries(
    pod: AllocatingPod,
    requests: Sequence[Sequence[str]],
    *,
    key: str,
    entries: PodSingleDevice,
    waiting_for: str,
    grant: Callable[[ContainerTurn], G],
) -> ListPlan[G]:
    """Serve ``requests`` (one per container, in the kubelet's order) from ``entries``, the
    pod's decoded ``key`` list: each takes the next entry that still holds devices and
    ``grant`` answers it (raising :class:`~hami_deviceplugin.errors.AllocateError` when it
    cannot).

    ``waiting_for`` names the devices in the error for a request no entry is left for.
    """
    current = entries
    grants: list[G] = []
    for number, requested in enumerate(requests):
        popped = pop_next_pending(current)
        if popped is None:
            raise invalid(
                f"no container of pod {pod.namespace}/{pod.name} is waiting for {waiting_for} "
                f"({key} has nothing left)"
            )
        index, devices, current = popped
        if index >= len(pod.containers):
            raise invalid(
                f"{key} entry {index} has no container (the pod has {len(pod.containers)})"
            )
        grants.append(
            grant(ContainerTurn(number, index, pod.containers[index], devices, requested))
        )
    try:
        remaining = encode_pod_devices(current)
    except ProtocolError as exc:
        raise invalid(str(exc)) from None
    done = not has_pending(current) and not others_pending(pod.annotations, own_key=key)
    return ListPlan(grants=tuple(grants), remaining=remaining, done=done)
