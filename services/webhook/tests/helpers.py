"""Pod and review builders, and polling with a deadline."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from hami_kubesim.certs import ServerCertificate, TlsFiles, ca_bundle_b64
from hami_kubesim.testing import eventually

__all__ = [
    "MWC_PATH",
    "SERVICE_HOST",
    "WEBHOOK",
    "WebhookTls",
    "container",
    "eventually",
    "gpu",
    "pod",
    "review",
    "webhook_configuration",
]

SERVICE_HOST = "hami-webhook.kube-system.svc"
MWC_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
WEBHOOK = "vgpu.hami.io"


@dataclass(frozen=True, slots=True)
class WebhookTls:
    """A server certificate and where its files were written."""

    cert: ServerCertificate
    files: TlsFiles


def container(
    name: str = "main",
    *,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    env: list[dict[str, Any]] | None = None,
    privileged: bool | None = None,
) -> dict[str, Any]:
    ctr: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if resources:
        ctr["resources"] = resources
    if env is not None:
        ctr["env"] = env
    if privileged is not None:
        ctr["securityContext"] = {"privileged": privileged}
    return ctr


def gpu(count: int | str = 1, **extra: Any) -> dict[str, Any]:
    """Limits asking for ``count`` NVIDIA GPUs plus ``extra`` short names (mem, cores, pct)."""
    names = {
        "mem": "nvidia.com/gpumem",
        "cores": "nvidia.com/gpucores",
        "pct": "nvidia.com/gpumem-percentage",
        "priority": "nvidia.com/priority",
    }
    limits: dict[str, Any] = {"nvidia.com/gpu": str(count)}
    for key, value in extra.items():
        limits[names[key]] = str(value)
    return limits


def pod(
    *containers: dict[str, Any],
    name: str = "p",
    namespace: str | None = "default",
    init: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    body: dict[str, Any] = {"containers": list(containers) or [container()]}
    if init is not None:
        body["initContainers"] = init
    body.update(spec)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body}


def review(
    obj: Any,
    *,
    version: str = "admission.k8s.io/v1",
    uid: str | None = None,
    namespace: str = "default",
    operation: str = "CREATE",
    kind: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": (obj or {}).get("metadata", {}).get("name", "")
            if isinstance(obj, dict)
            else "",
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "admin", "groups": ["system:masters"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def webhook_configuration(
    webhook_url: str,
    ca: bytes,
    *,
    failure_policy: str = "Ignore",
    version: str = "v1",
    path: str = "/webhook",
    side_effects: str = "None",
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration: CREATE pods, ignore-label selectors, 10 s
    timeout, calling ``webhook_url`` + ``path`` with ``ca`` as its caBundle."""
    ignore = {
        "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
    }
    hook = {
        "name": WEBHOOK,
        "clientConfig": {"url": webhook_url + path, "caBundle": ca_bundle_b64(ca)},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "failurePolicy": failure_policy,
        "sideEffects": side_effects,
        "timeoutSeconds": 10,
        "reinvocationPolicy": "Never",
        "admissionReviewVersions": [version],
        "namespaceSelector": ignore,
        "objectSelector": ignore,
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "hami-webhook"},
        "webhooks": [hook],
    }
