"""Discovery documents: ``/version``, ``/api``, ``/apis`` and the per-group-version resource
lists that kubectl and client libraries read to map kinds to URLs."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from hami_kubesim.objects.resources import VERBS_ALL, Registry, ResourceType

KUBE_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "proxy": ["create", "delete", "get", "patch", "update"],
}
_SUBRESOURCE_KINDS = {"binding": "Binding", "proxy": "ServiceProxyOptions"}


def version() -> dict[str, Any]:
    return dict(KUBE_VERSION)


def api_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(registry: Registry, name: str, versions: list[str]) -> dict[str, Any]:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def api_group_list(registry: Registry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(registry, g, vs) for g, vs in sorted(registry.groups().items())],
    }


def api_group(registry: Registry, name: str) -> dict[str, Any] | None:
    versions = registry.groups().get(name)
    if versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(registry, name, versions)}


def _storage_hash(rt: ResourceType) -> str:
    digest = hashlib.sha256(f"{rt.api_version}/{rt.kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode()


def _resource(rt: ResourceType) -> list[dict[str, Any]]:
    main: dict[str, Any] = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(VERBS_ALL),
        "storageVersionHash": _storage_hash(rt),
    }
    if rt.short_names:
        main["shortNames"] = list(rt.short_names)
    if rt.categories:
        main["categories"] = list(rt.categories)
    out = [main]
    for sub in rt.subresources:
        out.append(
            {
                "name": f"{rt.plural}/{sub}",
                "singularName": "",
                "namespaced": rt.namespaced,
                "kind": _SUBRESOURCE_KINDS.get(sub, rt.kind),
                "verbs": _SUBRESOURCE_VERBS.get(sub, ["get"]),
            }
        )
    return out


def resource_list(registry: Registry, group: str, version: str) -> dict[str, Any] | None:
    types = registry.in_group_version(group, version)
    if not types:
        return None
    resources: list[dict[str, Any]] = []
    if not group:
        resources.append(
            {
                "name": "bindings",
                "singularName": "binding",
                "namespaced": True,
                "kind": "Binding",
                "verbs": ["create"],
            }
        )
    for rt in types:
        resources.extend(_resource(rt))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }
