"""Read-only views over Kubernetes object JSON: one way to read a pod or a node.

Objects arrive as decoded JSON (watch events, GET and LIST bodies, AdmissionReview requests,
extender arguments).  A view wraps such a mapping without copying it and answers the questions
every component asks — name, namespace, uid, resourceVersion, labels, annotations, the node a pod
is bound to, its containers — with the same tolerance everywhere: a missing or mistyped field reads
as empty (``""``, ``{}``, ``()``), never as an exception, because a malformed object must not
crash a watch handler.  Labels and annotations keep only string values, as the API server would.

Views are pure (no I/O, nothing awaited) and cheap: ``__slots__``, the label and annotation maps
are filtered once per view.  Writing goes through patches, never through a view.

    pod = PodView(event_object)
    pod.key, pod.uid, pod.node_name, pod.annotations.get(BIND_PHASE)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final

__all__ = [
    "TERMINAL_POD_PHASES",
    "ContainerView",
    "NodeView",
    "ObjectView",
    "PodView",
    "key_for",
    "object_key",
    "string_map",
]

TERMINAL_POD_PHASES: Final = frozenset({"Succeeded", "Failed"})

_EMPTY: Final[Mapping[str, Any]] = MappingProxyType({})


def _mapping(value: object) -> Mapping[str, Any]:
    # Decoded JSON is made of dicts: the exact-type check spares the slow ABC check.
    if type(value) is dict or isinstance(value, Mapping):
        return value
    return _EMPTY


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def string_map(value: object) -> Mapping[str, str]:
    """The string-valued entries of a JSON object (labels, annotations, selectors)."""
    if type(value) is not dict and not isinstance(value, Mapping):
        return _EMPTY
    if all(isinstance(v, str) for v in value.values()):
        return value
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def key_for(namespace: str | None, name: str) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    return f"{namespace}/{name}" if namespace else name


def object_key(obj: Mapping[str, Any]) -> str:
    """The store key of a raw object (``namespace/name`` or ``name``)."""
    meta = _mapping(obj.get("metadata"))
    return key_for(_text(meta.get("namespace")), _text(meta.get("name")))


class ObjectView:
    """What every object has: ``metadata``."""

    __slots__ = ("_annotations", "_labels", "meta", "raw")

    def __init__(self, raw: Mapping[str, Any]) -> None:
        self.raw = raw
        self.meta: Mapping[str, Any] = _mapping(raw.get("metadata"))
        self._labels: Mapping[str, str] | None = None
        self._annotations: Mapping[str, str] | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"

    @property
    def name(self) -> str:
        return _text(self.meta.get("name"))

    @property
    def namespace(self) -> str:
        return _text(self.meta.get("namespace"))

    @property
    def generate_name(self) -> str:
        """``metadata.generateName``: the prefix of a name the API server has yet to pick."""
        return _text(self.meta.get("generateName"))

    @property
    def key(self) -> str:
        return key_for(self.namespace, self.name)

    @property
    def uid(self) -> str:
        return _text(self.meta.get("uid"))

    @property
    def resource_version(self) -> str:
        return _text(self.meta.get("resourceVersion"))

    @property
    def creation_timestamp(self) -> str:
        return _text(self.meta.get("creationTimestamp"))

    @property
    def deleting(self) -> bool:
        """``metadata.deletionTimestamp`` is set."""
        return bool(self.meta.get("deletionTimestamp"))

    @property
    def labels(self) -> Mapping[str, str]:
        if self._labels is None:
            self._labels = string_map(self.meta.get("labels"))
        return self._labels

    @property
    def annotations(self) -> Mapping[str, str]:
        if self._annotations is None:
            self._annotations = string_map(self.meta.get("annotations"))
        return self._annotations

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("status"))


class ContainerView:
    """One entry of ``spec.containers`` / ``spec.initContainers``."""

    __slots__ = ("raw", "resources")

    def __init__(self, raw: object) -> None:
        self.raw: Mapping[str, Any] = _mapping(raw)
        # Read once: the webhook and the scheduler ask for limits and requests of every
        # container on their hot paths.
        self.resources: Mapping[str, Any] = _mapping(self.raw.get("resources"))

    def __repr__(self) -> str:
        return f"ContainerView({self.name!r})"

    @property
    def name(self) -> str:
        return _text(self.raw.get("name"))

    @property
    def image(self) -> str:
        return _text(self.raw.get("image"))

    @property
    def restart_policy(self) -> str:
        """``Always`` marks a native sidecar among init containers; ``""`` otherwise."""
        return _text(self.raw.get("restartPolicy"))

    @property
    def limits(self) -> Mapping[str, Any]:
        return _mapping(self.resources.get("limits"))

    @property
    def requests(self) -> Mapping[str, Any]:
        return _mapping(self.resources.get("requests"))

    @property
    def env(self) -> tuple[Mapping[str, Any], ...]:
        """``env`` entries that are objects (``name``/``value``/``valueFrom``)."""
        items = self.raw.get("env")
        if not isinstance(items, list):
            return ()
        return tuple(e for e in items if isinstance(e, Mapping))


def _objects(items: object) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(items, list):
        return ()
    return tuple(i for i in items if type(i) is dict or isinstance(i, Mapping))


def _containers(spec: Mapping[str, Any], field: str) -> tuple[ContainerView, ...]:
    items = spec.get(field)
    if not isinstance(items, list):
        return ()
    return tuple(ContainerView(c) for c in items if isinstance(c, Mapping))


class PodView(ObjectView):
    """A pod: where it is bound, what it runs, how far it got."""

    __slots__ = ()

    @property
    def node_name(self) -> str:
        """``spec.nodeName``: the node the pod is bound to, ``""`` while unbound."""
        return _text(self.spec.get("nodeName"))

    @property
    def scheduler_name(self) -> str:
        return _text(self.spec.get("schedulerName"))

    @property
    def phase(self) -> str:
        return _text(self.status.get("phase"))

    @property
    def terminal(self) -> bool:
        """Succeeded or Failed: the pod holds nothing any more."""
        return self.phase in TERMINAL_POD_PHASES

    @property
    def containers(self) -> tuple[ContainerView, ...]:
        return _containers(self.spec, "containers")

    @property
    def init_containers(self) -> tuple[ContainerView, ...]:
        return _containers(self.spec, "initContainers")

    def all_containers(self) -> Iterator[ContainerView]:
        """Init containers first, then the app containers (the kubelet's admission order)."""
        yield from self.init_containers
        yield from self.containers

    @property
    def priority(self) -> int:
        value = self.spec.get("priority")
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    @property
    def nominated_node_name(self) -> str:
        return _text(self.status.get("nominatedNodeName"))

    @property
    def conditions(self) -> tuple[Mapping[str, Any], ...]:
        return _objects(self.status.get("conditions"))

    def condition(self, kind: str) -> Mapping[str, Any] | None:
        """The ``status.conditions`` entry of ``type`` ``kind`` (``PodScheduled``, ...)."""
        for condition in self.conditions:
            if condition.get("type") == kind:
                return condition
        return None

    @property
    def container_statuses(self) -> tuple[Mapping[str, Any], ...]:
        return _objects(self.status.get("containerStatuses"))

    @property
    def init_container_statuses(self) -> tuple[Mapping[str, Any], ...]:
        return _objects(self.status.get("initContainerStatuses"))


class NodeView(ObjectView):
    """A node: what it offers and whether new pods may land on it."""

    __slots__ = ()

    @property
    def unschedulable(self) -> bool:
        return self.spec.get("unschedulable") is True

    @property
    def capacity(self) -> Mapping[str, Any]:
        return _mapping(self.status.get("capacity"))

    @property
    def allocatable(self) -> Mapping[str, Any]:
        return _mapping(self.status.get("allocatable"))

    @property
    def taints(self) -> tuple[Mapping[str, Any], ...]:
        return _objects(self.spec.get("taints"))

    @property
    def addresses(self) -> tuple[Mapping[str, Any], ...]:
        return _objects(self.status.get("addresses"))
