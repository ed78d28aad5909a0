"""Which REST paths a Kubernetes resource lives at (reading objects: :mod:`hami_kube.objects`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

JsonObject = dict[str, Any]
"""A Kubernetes object as decoded JSON."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A REST resource: ``plural`` under ``/api/{version}`` or ``/apis/{group}/{version}``."""

    plural: str
    kind: str
    version: str = "v1"
    group: str = ""
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """The objects' ``apiVersion``: ``v1`` or ``group/version``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def _prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def collection_path(self, namespace: str | None = None) -> str:
        """Collection URL path; ``namespace=None`` on a namespaced resource means all namespaces."""
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.plural} is cluster-scoped; no namespace allowed")
        if namespace is None:
            return f"{self._prefix()}/{self.plural}"
        return f"{self._prefix()}/namespaces/{_segment(namespace)}/{self.plural}"

    def object_path(
        self, name: str, namespace: str | None = None, subresource: str | None = None
    ) -> str:
        """URL path of one object (and optionally a subresource such as ``binding``/``status``)."""
        if self.namespaced and not namespace:
            raise ValueError(f"{self.plural} is namespaced; a namespace is required")
        if not name:
            raise ValueError("an object name is required")
        path = f"{self.collection_path(namespace if self.namespaced else None)}/{_segment(name)}"
        return f"{path}/{_segment(subresource)}" if subresource else path


def _segment(value: str) -> str:
    return quote(value, safe="")


PODS = Resource("pods", "Pod")
NODES = Resource("nodes", "Node", namespaced=False)
NAMESPACES = Resource("namespaces", "Namespace", namespaced=False)
EVENTS = Resource("events", "Event")
CONFIGMAPS = Resource("configmaps", "ConfigMap")
RESOURCE_QUOTAS = Resource("resourcequotas", "ResourceQuota")
LEASES = Resource("leases", "Lease", group="coordination.k8s.io")
ENDPOINT_SLICES = Resource("endpointslices", "EndpointSlice", group="discovery.k8s.io")
RESOURCE_SLICES = Resource(
    "resourceslices", "ResourceSlice", group="resource.k8s.io", namespaced=False
)
DEVICE_CLASSES = Resource("deviceclasses", "DeviceClass", group="resource.k8s.io", namespaced=False)
RESOURCE_CLAIMS = Resource("resourceclaims", "ResourceClaim", group="resource.k8s.io")
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resourceclaimtemplates", "ResourceClaimTemplate", group="resource.k8s.io"
)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    group="admissionregistration.k8s.io",
    namespaced=False,
)


__all__ = [
    "CONFIGMAPS",
    "DEVICE_CLASSES",
    "ENDPOINT_SLICES",
    "EVENTS",
    "LEASES",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "RESOURCE_CLAIMS",
    "RESOURCE_CLAIM_TEMPLATES",
    "RESOURCE_QUOTAS",
    "RESOURCE_SLICES",
    "JsonObject",
    "Resource",
]
