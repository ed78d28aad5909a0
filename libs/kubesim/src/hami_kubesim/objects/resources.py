"""The resource types the emulator serves and how each is addressed (group, version, scope)."""

from __future__ import annotations

from dataclasses import dataclass

VERBS_ALL = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource, e.g. ``pods`` in the core group, version ``v1``."""

    group: str
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    allow_unconditional_update: bool = True
    allow_create_on_update: bool = False
    has_status: bool = False
    field_labels: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    index_field: str | None = None
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def key(self) -> str:
        """Storage key: ``pods`` or ``leases.coordination.k8s.io``."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def wire_prefix(self) -> bytes:
        """The leading JSON members (``apiVersion``, ``kind``) of a single object on the wire."""
        return f'{{"kind":"{self.kind}","apiVersion":"{self.api_version}",'.encode()


_POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

NAMESPACES = ResourceType(
    "",
    "v1",
    "Namespace",
    "namespaces",
    "namespace",
    namespaced=False,
    short_names=("ns",),
    subresources=("status",),
    has_status=True,
    field_labels=("metadata.name", "status.phase"),
)
NODES = ResourceType(
    "",
    "v1",
    "Node",
    "nodes",
    "node",
    namespaced=False,
    short_names=("no",),
    subresources=("status",),
    has_status=True,
    field_labels=("metadata.name", "spec.unschedulable"),
)
PODS = ResourceType(
    "",
    "v1",
    "Pod",
    "pods",
    "pod",
    namespaced=True,
    short_names=("po",),
    subresources=("status", "binding"),
    has_status=True,
    field_labels=_POD_FIELDS,
    index_field="spec.nodeName",
    categories=("all",),
)
EVENTS = ResourceType(
    "",
    "v1",
    "Event",
    "events",
    "event",
    namespaced=True,
    short_names=("ev",),
    allow_create_on_update=True,
    field_labels=_EVENT_FIELDS,
)
EVENTS_V1 = ResourceType(
    "events.k8s.io",
    "v1",
    "Event",
    "events",
    "event",
    namespaced=True,
    short_names=("ev",),
    allow_create_on_update=True,
)
RESOURCE_QUOTAS = ResourceType(
    "",
    "v1",
    "ResourceQuota",
    "resourcequotas",
    "resourcequota",
    namespaced=True,
    short_names=("quota",),
    subresources=("status",),
    has_status=True,
)
CONFIG_MAPS = ResourceType(
    "", "v1", "ConfigMap", "configmaps", "configmap", namespaced=True, short_names=("cm",)
)
LEASES = ResourceType(
    "coordination.k8s.io",
    "v1",
    "Lease",
    "leases",
    "lease",
    namespaced=True,
    allow_unconditional_update=False,
)
MUTATING_WEBHOOKS = ResourceType(
    "admissionregistration.k8s.io",
    "v1",
    "MutatingWebhookConfiguration",
    "mutatingwebhookconfigurations",
    "mutatingwebhookconfiguration",
    namespaced=False,
    categories=("api-extensions",),
    field_labels=("metadata.name",),
)
PRIORITY_CLASSES = ResourceType(
    "scheduling.k8s.io",
    "v1",
    "PriorityClass",
    "priorityclasses",
    "priorityclass",
    namespaced=False,
    short_names=("pc",),
    field_labels=("metadata.name",),
)
POD_DISRUPTION_BUDGETS = ResourceType(
    "policy",
    "v1",
    "PodDisruptionBudget",
    "poddisruptionbudgets",
    "poddisruptionbudget",
    namespaced=True,
    short_names=("pdb",),
    subresources=("status",),
    has_status=True,
)
SERVICES = ResourceType(
    "",
    "v1",
    "Service",
    "services",
    "service",
    namespaced=True,
    short_names=("svc",),
    subresources=("status", "proxy"),
    has_status=True,
    categories=("all",),
)
ENDPOINT_SLICES = ResourceType(
    "discovery.k8s.io",
    "v1",
    "EndpointSlice",
    "endpointslices",
    "endpointslice",
    namespaced=True,
)
# resource.k8s.io/v1 (DRA, GA in 1.34): ``pkg/registry/resource/*/strategy.go``.  Only claims
# have a status subresource; slices, classes and templates are spec-only objects.
RESOURCE_SLICES = ResourceType(
    "resource.k8s.io",
    "v1",
    "ResourceSlice",
    "resourceslices",
    "resourceslice",
    namespaced=False,
    field_labels=("metadata.name", "spec.nodeName", "spec.driver"),
)
DEVICE_CLASSES = ResourceType(
    "resource.k8s.io",
    "v1",
    "DeviceClass",
    "deviceclasses",
    "deviceclass",
    namespaced=False,
    field_labels=("metadata.name",),
)
RESOURCE_CLAIMS = ResourceType(
    "resource.k8s.io",
    "v1",
    "ResourceClaim",
    "resourceclaims",
    "resourceclaim",
    namespaced=True,
    subresources=("status",),
    has_status=True,
)
RESOURCE_CLAIM_TEMPLATES = ResourceType(
    "resource.k8s.io",
    "v1",
    "ResourceClaimTemplate",
    "resourceclaimtemplates",
    "resourceclaimtemplate",
    namespaced=True,
)

ALL_TYPES: tuple[ResourceType, ...] = (
    NAMESPACES,
    NODES,
    PODS,
    EVENTS,
    RESOURCE_QUOTAS,
    CONFIG_MAPS,
    LEASES,
    MUTATING_WEBHOOKS,
    EVENTS_V1,
    PRIORITY_CLASSES,
    POD_DISRUPTION_BUDGETS,
    SERVICES,
    ENDPOINT_SLICES,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    RESOURCE_CLAIMS,
    RESOURCE_CLAIM_TEMPLATES,
)


class Registry:
    """Looks resource types up by URL parts (group, version, plural) or by short name."""

    def __init__(self, types: tuple[ResourceType, ...] = ALL_TYPES) -> None:
        self.types = types
        self._by_path = {(t.group, t.version, t.plural): t for t in types}
        self._by_name: dict[str, ResourceType] = {}
        for t in reversed(types):  # earlier entries win on shared names (core events)
            for name in (t.plural, t.singular, t.kind, t.key, *t.short_names):
                self._by_name[name] = t

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_path.get((group, version, plural))

    def resolve(self, name: str) -> ResourceType:
        """A type by plural, singular, kind, short name or ``plural.group``; ``KeyError`` if
        unknown."""
        return self._by_name[name]

    def groups(self) -> dict[str, list[str]]:
        """``group -> versions`` for the named groups (the core group excluded)."""
        out: dict[str, list[str]] = {}
        for t in self.types:
            if t.group and t.version not in out.setdefault(t.group, []):
                out[t.group].append(t.version)
        return out

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [t for t in self.types if t.group == group and t.version == version]
