"""A minimal OpenAPI v3 surface: the index and, per group-version, the PATCH operations with
their ``x-kubernetes-group-version-kind`` and ``fieldValidation`` parameter.

That is what kubectl reads to learn that the server validates fields itself (so it skips
client-side schema validation).  No schemas are published: kubectl then computes apply patches
from its built-in types, as it does against servers without OpenAPI.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hami_kubesim.apiserver.http.discovery import KUBE_VERSION
from hami_kubesim.objects.resources import Registry, ResourceType


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _group_versions(registry: Registry) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for rt in registry.types:
        if (rt.group, rt.version) not in seen:
            seen.append((rt.group, rt.version))
    return seen


def index(registry: Registry) -> dict[str, Any]:
    paths = {}
    for group, version in _group_versions(registry):
        path = _gv_path(group, version)
        digest = hashlib.sha256(path.encode()).hexdigest()[:32].upper()
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
    return {"paths": paths}


def _patch_op(rt: ResourceType) -> dict[str, Any]:
    return {
        "operationId": f"patch{rt.kind}",
        "parameters": [
            {
                "name": "fieldValidation",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
            {
                "name": "fieldManager",
                "in": "query",
                "schema": {"type": "string", "uniqueItems": True},
            },
        ],
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {
            "group": rt.group,
            "version": rt.version,
            "kind": rt.kind,
        },
    }


def group_version(registry: Registry, path: str) -> dict[str, Any] | None:
    """The document for ``api/v1`` or ``apis/<group>/<version>``; ``None`` if unknown."""
    for group, version in _group_versions(registry):
        if _gv_path(group, version) != path:
            continue
        paths: dict[str, Any] = {}
        for rt in registry.in_group_version(group, version):
            base = f"/{_gv_path(group, version)}"
            scope = "/namespaces/{namespace}" if rt.namespaced else ""
            paths[f"{base}{scope}/{rt.plural}/{{name}}"] = {"patch": _patch_op(rt)}
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": KUBE_VERSION["gitVersion"]},
            "paths": paths,
            "components": {"schemas": {}},
        }
    return None
