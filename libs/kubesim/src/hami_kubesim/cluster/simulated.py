"""A whole simulated cluster: the API server plus the configured control-plane stand-ins.

``async with running_cluster(config) as cluster:`` serves the API server, creates the configured
namespaces and nodes, connects the admission dispatcher (webhook calls on pod CREATE), creates the
initial objects, then starts the scheduling loop, the disruption controller (and, when configured,
the resourceclaim controller) and one kubelet
stand-in per node, together.  It returns once everything has synced; from then on, pods on those
nodes are deleted gracefully (their kubelet stand-in finishes the deletion).  A stand-in that
crashes cancels the block, which then raises the stand-in's error.  Leaving the block stops
everything — each stand-in within its bound (:mod:`hami_kubesim.background_tasks`), a stuck one
named in the log and left behind — and removes any temporary plugin directory it created.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from hami_kube.objects import ObjectView
from hami_kubesim.admission.dispatch import AdmissionDispatcher
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.background_tasks import RunsInBackground, crash_cancels_the_block
from hami_kubesim.cluster.config import (
    HOST_ROOT_DIR,
    ClusterConfig,
    ClusterConfigError,
    SchedulingSpec,
    load_cluster_config,
)
from hami_kubesim.controllers.disruption import DisruptionController
from hami_kubesim.controllers.resourceclaim import ResourceClaimController
from hami_kubesim.kubelet.settings import KubeletSettings
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.objects.resources import ResourceType
from hami_kubesim.scheduler.config import (
    SchedulerConfig,
    load_scheduler_config,
)
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.testing import RunningApiServer, running_apiserver
from hami_kubesim.vendors.agent import VendorAgent

log = structlog.get_logger(__name__)

_MAX_PLUGIN_DIR = 90
"""Longest plugin dir path accepted: unix socket paths are limited to 107 bytes, and plugin
socket names (``nvidia-gpu.sock``) need room after it."""


@dataclass(frozen=True, slots=True)
class Cluster:
    """A running simulated cluster."""

    url: str
    """The API server's plain-http URL."""
    config: ClusterConfig
    apiserver: RunningApiServer
    """The served API server (``apiserver.server`` for in-process access and fault injection)."""
    kubelets: Mapping[str, KubeletStandIn]
    """Kubelet stand-ins by node name (restart simulation, allocation records)."""
    plugin_dirs: Mapping[str, Path]
    """Where each node's ``kubelet.sock`` is: point that node's device plugin here (and at
    ``kubelet(node).pod_resources_socket`` for pod-resources)."""
    admission: AdmissionDispatcher | None
    scheduler: SchedulingLoop | None
    vendor_agents: Mapping[str, VendorAgent] = field(default_factory=dict)
    """The vendor device-plugin stand-ins by node name (nodes with ``vendors``)."""
    disruption: DisruptionController | None = None
    """kube-controller-manager's disruption controller (PodDisruptionBudget status)."""
    resourceclaim: ResourceClaimController | None = None
    """kube-controller-manager's resourceclaim controller (``controllers.resourceclaim``)."""

    def kubelet(self, node: str) -> KubeletStandIn:
        return self.kubelets[node]

    def info(self) -> dict[str, Any]:
        """What a script needs to drive the cluster, as JSON-ready data."""
        nodes: dict[str, dict[str, str]] = {}
        for name, path in self.plugin_dirs.items():
            kubelet = self.kubelets[name]
            nodes[name] = {
                "pluginDir": str(path),
                "kubeletSocket": str(kubelet.kubelet_socket),
                "podResourcesSocket": str(kubelet.pod_resources_socket),
            }
            if kubelet.settings.host_root is not None:
                nodes[name]["hostRoot"] = str(kubelet.settings.host_root)
        return {"url": self.url, "nodes": nodes}


def scheduler_config_for(spec: SchedulingSpec) -> SchedulerConfig:
    """The KubeSchedulerConfiguration to run, with ``extenderURLs`` applied in order and the
    preemption behaviour of the release the spec names."""
    config = SchedulerConfig() if spec.config is None else load_scheduler_config(spec.config)
    config = dataclasses.replace(
        config,
        preemption_behaviour=spec.preemption_behaviour,
        dynamic_resources=spec.dynamic_resources,
    )
    if spec.default_scheduler:
        config = config.with_default_profile()
    for index, url in enumerate(spec.extender_urls):
        try:
            config = config.with_extender_url(url, index=index)
        except IndexError as error:
            raise ClusterConfigError(
                f"scheduling.extenderURLs[{index}]", url, str(error)
            ) from error
    return config


@contextlib.asynccontextmanager
async def running_cluster(
    config: ClusterConfig | Path | str,
    *,
    host: str | None = None,
    port: int | None = None,
) -> AsyncIterator[Cluster]:
    """Run the cluster ``config`` describes (a parsed config or a path to its YAML file)."""
    if not isinstance(config, ClusterConfig):
        config = load_cluster_config(config)
    scheduler_config = (
        scheduler_config_for(config.scheduling) if config.scheduling.enabled else None
    )
    admission = (
        AdmissionDispatcher(service_urls=config.admission.service_urls)
        if config.admission.enabled
        else None
    )
    async with contextlib.AsyncExitStack() as stack:
        plugin_dirs = _plugin_dirs(config, stack)
        sim = await stack.enter_async_context(
            running_apiserver(
                admission=admission,
                host=host if host is not None else config.host,
                port=port if port is not None else config.port,
            )
        )
        await _create_nodes_and_namespaces(sim.server, config)
        if admission is not None:
            await stack.enter_async_context(admission.connected(sim.url))
        await _create_objects(sim.server, config)
        kubelets = {
            node.name: KubeletStandIn(
                KubeletSettings(
                    node_name=node.name,
                    plugin_dir=plugin_dirs[node.name],
                    api_url=sim.url,
                    pod_cidr=node.pod_cidr,
                    host_ip=node.address,
                    grace_period=config.kubelet.grace_period,
                    call_timeout=config.kubelet.call_timeout,
                    pod_resources_dir=node.pod_resources_dir,
                    host_root=plugin_dirs[node.name] / HOST_ROOT_DIR
                    if config.kubelet.hami_core
                    else None,
                    workload_interval=config.kubelet.hami_core_interval,
                    plugins_registry_dir=node.plugins_registry_dir,
                    cdi_spec_dirs=node.cdi_dirs,
                    plugin_watch_interval=config.kubelet.plugin_watch_interval,
                    dra_retry_interval=config.kubelet.dra_retry_interval,
                )
            )
            for node in config.nodes
            if node.kubelet
        }
        agents = {
            node.name: VendorAgent(
                node=node.name,
                plugin_dir=plugin_dirs[node.name],
                api_url=sim.url,
                vendors=node.vendors,
            )
            for node in config.nodes
            if node.kubelet and node.vendors
        }
        scheduler = (
            None if scheduler_config is None else SchedulingLoop(scheduler_config, api_url=sim.url)
        )
        disruption = DisruptionController(sim.url) if config.controllers.disruption else None
        claims = ResourceClaimController(sim.url) if config.controllers.resourceclaim else None
        cluster = Cluster(
            url=sim.url,
            config=config,
            apiserver=sim,
            kubelets=kubelets,
            plugin_dirs=plugin_dirs,
            admission=admission,
            scheduler=scheduler,
            vendor_agents=agents,
            disruption=disruption,
            resourceclaim=claims,
        )
        stand_ins: list[RunsInBackground] = [*kubelets.values()]
        if scheduler is not None:
            stand_ins.append(scheduler)
        if disruption is not None:
            stand_ins.append(disruption)
        if claims is not None:
            stand_ins.append(claims)
        async with asyncio.TaskGroup() as starting:  # a failed start cancels the others
            for stand_in in stand_ins:
                starting.create_task(stack.enter_async_context(stand_in))
        # The vendor plugins register on kubelet.sock: after the kubelets serve it.
        async with asyncio.TaskGroup() as starting:
            for agent in agents.values():
                starting.create_task(stack.enter_async_context(agent))
        stand_ins.extend(agents.values())
        log.info("cluster ready", url=sim.url, nodes=sorted(plugin_dirs))
        sim.server.kubelets.update(kubelets)  # /_sim/kubelets/<node>/...
        stack.callback(sim.server.kubelets.clear)
        # Their kubelets finish pods' graceful deletions from now on; once the block is left
        # (stand-ins stopping), a DELETE removes a pod at once again.
        sim.server.delete_pods_gracefully()
        stack.callback(sim.server.delete_pods_gracefully, False)
        async with crash_cancels_the_block(stand_ins):
            yield cluster


def _plugin_dirs(config: ClusterConfig, stack: contextlib.AsyncExitStack) -> dict[str, Path]:
    root = config.kubelet.plugin_root
    if root is None and any(n.kubelet and n.plugin_dir is None for n in config.nodes):
        root = Path(tempfile.mkdtemp(prefix="kubesim-"))
        stack.callback(shutil.rmtree, root, ignore_errors=True)
    dirs: dict[str, Path] = {}
    for node in config.nodes:
        if not node.kubelet:
            continue
        path = node.plugin_dir or (root or Path()) / node.name
        path = path.absolute()
        if len(str(path)) > _MAX_PLUGIN_DIR:
            raise ClusterConfigError(
                f"plugin dir of {node.name}",
                str(path),
                f"must be at most {_MAX_PLUGIN_DIR} characters (unix socket path limit)",
            )
        path.mkdir(parents=True, exist_ok=True)
        dirs[node.name] = path
    return dirs


async def _create_nodes_and_namespaces(server: ApiServer, config: ClusterConfig) -> None:
    for namespace in config.namespaces:
        if server.try_get("namespaces", namespace) is None:
            await server.create(
                "namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            )
    for node in config.nodes:
        await server.create("nodes", node.to_object())
        # Status is set through its subresource too, in case creation drops it.
        await server.patch(
            "nodes", node.name, {"status": node.status()}, patch_type="merge", subresource="status"
        )


async def _create_objects(server: ApiServer, config: ClusterConfig) -> None:
    for index, obj in enumerate(config.objects):
        rt = _resource_type(server, str(obj["apiVersion"]), str(obj["kind"]))
        if rt is None:
            raise ClusterConfigError(
                f"objects[{index}]",
                f"{obj['apiVersion']} {obj['kind']}",
                "kind not served by the emulator",
            )
        namespace = ObjectView(obj).namespace or "default"
        await server.create(rt, dict(obj), namespace=namespace if rt.namespaced else None)


def _resource_type(server: ApiServer, api_version: str, kind: str) -> ResourceType | None:
    return next(
        (t for t in server.registry.types if t.api_version == api_version and t.kind == kind),
        None,
    )
