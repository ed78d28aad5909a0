"""Kubernetes objects the stack creates: the webhook's configuration, namespace quotas and the
names of the scheduler's Service.

:func:`mutating_webhook_configuration` is what the chart's
``charts/webhook/templates/mutatingwebhook.yaml`` renders with its default values (service
``hami-system/hami-webhook`` path ``/webhook``, pods CREATE, the ``hami.io/webhook: ignore``
namespace and object selectors), with the generated CA as ``caBundle``.  The compose stack's
bootstrap (``deploy/compose/bootstrap.py``) writes this same object.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from hami_kubesim.dra_objects import container_claim, pod_claim
from hami_kubesim.stack.system.spec import FailurePolicy

__all__ = [
    "DRA_CLAIMS_LABEL",
    "GPUMAP_PORT",
    "MONITOR_SERVICE",
    "SCHEDULER_GPUMAP_PROXY",
    "SCHEDULER_SERVICE",
    "WEBHOOK_CONFIGURATION_NAME",
    "WEBHOOK_SERVICE",
    "claim_pod",
    "device_pod",
    "gpu_pod",
    "gpu_quota",
    "mutating_webhook_configuration",
]

WEBHOOK_CONFIGURATION_NAME = "hami-webhook"
WEBHOOK_SERVICE = ("hami-system", "hami-webhook")
"""``(namespace, name)`` of the webhook's Service, as the chart names it."""
SCHEDULER_SERVICE = ("kube-system", "hami-scheduler")
"""``(namespace, name)`` of the scheduler's Service: the chart's name, in the namespace
``kubectl hami`` looks in by default."""
GPUMAP_PORT = ("gpumap", 9397)
"""The scheduler Service's GPU map port: name and number (the chart's default)."""
SCHEDULER_HTTPS_PORT = ("https", 443)
MONITOR_SERVICE = ("hami-system", "hami-device-plugin-monitor")
"""``(namespace, name)`` of the vGPU monitors' Service (the chart's ``<base>-device-plugin-monitor``
for a release ``hami`` in ``hami-system``): with ``SystemSpec.vgpu_monitor`` the stack publishes
one EndpointSlice per node's monitor, naming the node, and the GPU map finds them there."""
MONITOR_PORT = ("monitor", 9394)
"""The monitor Service's port: name (what the GPU map looks for) and number (HAMi's)."""
SCHEDULER_GPUMAP_PROXY = (
    f"/api/v1/namespaces/{SCHEDULER_SERVICE[0]}/services/{SCHEDULER_SERVICE[1]}:"
    f"{GPUMAP_PORT[0]}/proxy/"
)
"""The GPU map's page through the API server's service proxy (``SystemSpec.gpumap``)."""

_IGNORE = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}


DRA_CLAIMS_LABEL = ("hami.io/dra-claims", "true")
"""The namespace label that sends pods to the webhook's ``/webhook/dra`` (the chart's
``webhook.draClaims.namespaceLabel`` / ``namespaceLabelValue`` defaults)."""


def mutating_webhook_configuration(
    *,
    ca_bundle: str,
    failure_policy: FailurePolicy = "Ignore",
    timeout_seconds: int = 10,
    dra_claims: bool = False,
) -> dict[str, Any]:
    """The chart's MutatingWebhookConfiguration; with ``dra_claims`` (``webhook.draClaims``) a
    second entry sends the pods of namespaces labelled :data:`DRA_CLAIMS_LABEL` to
    ``/webhook/dra`` and the first leaves them alone."""
    configuration = _webhook_configuration(ca_bundle, failure_policy, timeout_seconds)
    if dra_claims:
        classic = configuration["webhooks"][0]
        converting = copy.deepcopy(classic)
        key, value = DRA_CLAIMS_LABEL
        classic["namespaceSelector"]["matchExpressions"].append(
            {"key": key, "operator": "NotIn", "values": [value]}
        )
        converting["name"] = "dra.vgpu.hami.io"
        converting["sideEffects"] = "NoneOnDryRun"
        converting["clientConfig"]["service"]["path"] = "/webhook/dra"
        converting["namespaceSelector"]["matchExpressions"].append(
            {"key": key, "operator": "In", "values": [value]}
        )
        configuration["webhooks"].append(converting)
    return configuration


def _webhook_configuration(
    ca_bundle: str, failure_policy: FailurePolicy, timeout_seconds: int
) -> dict[str, Any]:
    namespace, name = WEBHOOK_SERVICE
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {
            "name": WEBHOOK_CONFIGURATION_NAME,
            "labels": {"app.kubernetes.io/name": "hami"},
        },
        "webhooks": [
            {
                "name": "vgpu.hami.io",
                "admissionReviewVersions": ["v1", "v1beta1"],
                "sideEffects": "None",
                "failurePolicy": failure_policy,
                "reinvocationPolicy": "Never",
                "timeoutSeconds": timeout_seconds,
                "matchPolicy": "Equivalent",
                "clientConfig": {
                    "service": {
                        "name": name,
                        "namespace": namespace,
                        "path": "/webhook",
                        "port": 443,
                    },
                    "caBundle": ca_bundle,
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchExpressions": [dict(_IGNORE)]},
                "objectSelector": {"matchExpressions": [dict(_IGNORE)]},
            }
        ],
    }


def gpu_quota(
    namespace: str,
    *,
    memory_mib: int | None = None,
    cores: int | None = None,
    name: str = "",
    memory_resource: str = "nvidia.com/gpumem",
    cores_resource: str = "nvidia.com/gpucores",
) -> dict[str, Any]:
    """A ResourceQuota capping a namespace's device memory and/or cores (HAMi's ``limits.``
    keys; NVIDIA's resources unless another vendor's are named)."""
    hard: dict[str, str] = {}
    if memory_mib is not None:
        hard[f"limits.{memory_resource}"] = str(memory_mib)
    if cores is not None:
        hard[f"limits.{cores_resource}"] = str(cores)
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name or "gpu-quota", "namespace": namespace},
        "spec": {"hard": hard},
    }


def gpu_pod(
    name: str,
    *,
    namespace: str = "default",
    gpus: int = 1,
    memory_mib: int | None = None,
    memory_percentage: int | None = None,
    cores: int | None = None,
    containers: int = 1,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod asking for ``gpus`` shared GPUs per container (no schedulerName: the webhook sets
    it)."""
    limits: dict[str, str] = {"nvidia.com/gpu": str(gpus)}
    if memory_mib is not None:
        limits["nvidia.com/gpumem"] = str(memory_mib)
    if memory_percentage is not None:
        limits["nvidia.com/gpumem-percentage"] = str(memory_percentage)
    if cores is not None:
        limits["nvidia.com/gpucores"] = str(cores)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "cuda" if containers == 1 else f"cuda-{index}",
                    "image": "example.invalid/cuda-app:latest",
                    "resources": {"limits": dict(limits)},
                }
                for index in range(containers)
            ],
        },
    }


def device_pod(
    name: str,
    limits: Mapping[str, str | int],
    *,
    namespace: str = "default",
    containers: int = 1,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose every container has ``limits`` (any vendor's resources; no schedulerName:
    the webhook sets it)."""
    pod = gpu_pod(name, namespace=namespace, containers=containers, annotations=annotations)
    for index, container in enumerate(pod["spec"]["containers"]):
        container["name"] = "app" if containers == 1 else f"app-{index}"
        container["resources"] = {"limits": {k: str(v) for k, v in limits.items()}}
    return pod


def claim_pod(
    name: str,
    *,
    namespace: str = "default",
    claim: str | None = None,
    template: str | None = None,
    containers: int = 1,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose containers all use one DRA claim (pod claim ``gpu``): the ResourceClaim
    ``claim`` or one made for the pod from the ResourceClaimTemplate ``template`` (give one).
    No schedulerName: the cluster's own kube-scheduler, which allocates the claim."""
    pod = gpu_pod(name, namespace=namespace, containers=containers, labels=labels)
    pod["spec"]["resourceClaims"] = [pod_claim("gpu", claim=claim, template=template)]
    for container in pod["spec"]["containers"]:
        container["resources"] = {"claims": [container_claim("gpu")]}
    return pod
