"""Small test helpers: object builders, and polling with a deadline (from the emulator)."""

from __future__ import annotations

from typing import Any

from hami_kubesim.testing import eventually

__all__ = ["eventually", "node", "pod"]


def pod(
    name: str,
    *,
    namespace: str = "default",
    node: str | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def node(name: str, *, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}
