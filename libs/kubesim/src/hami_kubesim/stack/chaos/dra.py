"""DRA incidents (issue 26) that fault scenarios add, each on a DRA node of the system.

Pure, as :mod:`.incidents`: each turns ``(rng, seed, start, node, config)`` into steps; the
``node`` drawn for the other incidents is not used — a DRA incident picks one of
``config.dra_nodes`` (none: no steps).  Pods are named ``s<seed>-<incident>-<role>``, name no
scheduler (the cluster's kube-scheduler allocates their claims) and target the node with a
``kubernetes.io/hostname`` node selector; their claims are written by hand or made from a
ResourceClaimTemplate the steps create.

* ``dra-plugin-restart`` — the plugin is restarted between Prepare and Unprepare: two pods run
  with their claims prepared; the node's device plugin is killed or stopped, one pod is
  deleted (its Unprepare fails while the plugin is down: the kubelet retries), a new pod asks
  for a claim meanwhile (its Prepare fails until the plugin is back), and the plugin starts
  again: it must unprepare the claim it prepared before the restart (its checkpoint) and
  prepare the new one.
* ``dra-device-vanished`` — a device vanishes between allocation and Prepare: the node's
  kubelet is paused, a pod's claim is allocated and the pod bound; then the node's GPUs turn
  unhealthy (they leave the ResourceSlice) and the kubelet resumes: Prepare is refused per
  claim and retried; a second pod asks for a claim while no device is published.  The GPUs
  come back a moment later: both pods run, nothing over-committed.
* ``dra-claim-deleted`` — a claim is deleted while its pod starts: a hand-written claim and a
  pod using it are created, then the claim is deleted at a random moment (before allocation:
  the pod waits for it; after: the delete-protection finalizer keeps it until the pod is gone).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Final

from hami_kubesim import dra_objects as dra
from hami_kubesim.stack.chaos.scenarios import (
    AwaitBound,
    AwaitRunning,
    CreateObject,
    CreatePod,
    DeleteObject,
    DeletePod,
    Incident,
    PauseKubelet,
    ResumeKubelet,
    ScenarioConfig,
    SetGpusHealthy,
    StartService,
    Step,
    StopService,
    pod_manifest,
)

__all__ = ["CLAIMS", "DRA_INCIDENTS", "TEMPLATES", "claim_pod_manifest"]

CLAIMS: Final = "resourceclaims"
TEMPLATES: Final = "resourceclaimtemplates"
_DEFAULT_SCHEDULER: Final = "default-scheduler"


def claim_pod_manifest(
    name: str, config: ScenarioConfig, node: str, *, claim: str = "", template: str = ""
) -> dict[str, Any]:
    """A pod on ``node`` whose container uses one claim (``claim``, or one made from
    ``template``)."""
    pod = pod_manifest(
        name,
        config.namespace,
        {},
        scheduler_name=_DEFAULT_SCHEDULER,
        nodeSelector={"kubernetes.io/hostname": node},
        resourceClaims=[dra.pod_claim("gpu", claim=claim or None, template=template or None)],
    )
    pod["spec"]["containers"][0]["resources"]["claims"] = [dra.container_claim("gpu")]
    return pod


def _request(memory_gib: int) -> dict[str, Any]:
    return dra.exact_request("gpu", capacity={"memory": f"{memory_gib}Gi"})


Build = Callable[[random.Random, int, float, str, ScenarioConfig], list[Step]]


def _on_a_dra_node(build: Build) -> Build:
    """``build`` on one of ``config.dra_nodes`` instead of the node drawn (none: no steps)."""

    def on_dra_node(
        rng: random.Random, seed: int, start: float, _: str, config: ScenarioConfig
    ) -> list[Step]:
        return (
            build(rng, seed, start, rng.choice(config.dra_nodes), config)
            if config.dra_nodes
            else []
        )

    return on_dra_node


def _template(at: float, name: str, config: ScenarioConfig, memory_gib: int) -> CreateObject:
    body = dra.claim_template(name, _request(memory_gib), namespace=config.namespace)
    return CreateObject(at, TEMPLATES, body)


def _hand_claim(at: float, name: str, config: ScenarioConfig, memory_gib: int) -> CreateObject:
    body = dra.resource_claim(name, _request(memory_gib), namespace=config.namespace)
    return CreateObject(at, CLAIMS, body)


def _plugin_restart(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    prefix = f"s{seed}-dra-restart"
    template, claim = f"{prefix}-tpl", f"{prefix}-claim"
    first, second, late = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    steps: list[Step] = [
        _template(start, template, config, rng.choice((1, 2, 4))),
        _hand_claim(start, claim, config, rng.choice((1, 2, 4))),
        CreatePod(start, claim_pod_manifest(first, config, node, template=template)),
        CreatePod(start, claim_pod_manifest(second, config, node, claim=claim)),
        AwaitRunning(start, first),
        AwaitRunning(start, second),
    ]
    service = f"deviceplugin-{node}"
    down = start + 0.05
    if service in config.services:
        steps += [
            StopService(down, service, crash=rng.random() < 0.5),
            StartService(down + rng.uniform(0.3, 1.5), service),
        ]
    victim = rng.choice((first, second))
    return [
        *steps,
        DeletePod(down + rng.uniform(0.0, 0.2), victim),
        CreatePod(
            down + rng.uniform(0.0, 0.3), claim_pod_manifest(late, config, node, template=template)
        ),
    ]


def _device_vanished(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    prefix = f"s{seed}-dra-vanish"
    template = f"{prefix}-tpl"
    first, second = f"{prefix}-a", f"{prefix}-b"
    gone = start + 0.1
    back = gone + rng.uniform(0.8, 2.0)
    return [
        _template(start, template, config, rng.choice((2, 4, 8))),
        PauseKubelet(start, node),
        CreatePod(start, claim_pod_manifest(first, config, node, template=template)),
        AwaitBound(start, first),
        SetGpusHealthy(gone, node, healthy=False),
        ResumeKubelet(gone + rng.uniform(0.3, 0.6), node),
        CreatePod(
            gone + rng.uniform(0.3, 0.6),
            claim_pod_manifest(second, config, node, template=template),
        ),
        SetGpusHealthy(back, node, healthy=True),
    ]


def _claim_deleted(
    rng: random.Random, seed: int, start: float, node: str, config: ScenarioConfig
) -> list[Step]:
    prefix = f"s{seed}-dra-deleted"
    claim, pod = f"{prefix}-claim", f"{prefix}-a"
    return [
        _hand_claim(start, claim, config, rng.choice((1, 2, 4))),
        CreatePod(start, claim_pod_manifest(pod, config, node, claim=claim)),
        DeleteObject(start + rng.uniform(0.0, 0.6), CLAIMS, claim),
    ]


DRA_INCIDENTS: Final = (
    Incident("dra-plugin-restart", _on_a_dra_node(_plugin_restart)),
    Incident("dra-device-vanished", _on_a_dra_node(_device_vanished)),
    Incident("dra-claim-deleted", _on_a_dra_node(_claim_deleted)),
)
"""Every DRA incident, by name (see the module docstring)."""
