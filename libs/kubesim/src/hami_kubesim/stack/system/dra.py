"""The DRA side of a whole system: what a spec with DRA nodes (``GpuNode.dra``) adds to the
cluster, and the wait until each DRA node's GPUs can be claimed.

A DRA node's kubelet stand-in gets the plugin's directories (:func:`~.services.dra_dirs`: the
cluster config's ``pluginsRegistryDir`` and ``cdiDirs``); a cluster with any DRA node runs the
resourceclaim controller and has the ``gpu.hami.io`` DeviceClass (the one the chart ships), and
its scheduling loop plays the cluster's own kube-scheduler (``default-scheduler``) beside the
chart's ``hami-scheduler`` profile: claims are allocated by kube-scheduler itself, so a DRA pod
names no scheduler.  The extender is called only for pods asking for its managed resources,
which a DRA pod does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hami_kube.objects import ObjectView
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.cluster.simulated import Cluster
from hami_kubesim.dra_objects import DRIVER, device_class
from hami_kubesim.scheduler.config import SchedulerConfig
from hami_kubesim.stack.system.services import dra_dirs
from hami_kubesim.stack.system.settle import until
from hami_kubesim.stack.system.spec import GpuNode, SystemSpec

__all__ = [
    "PLUGIN_WATCH_INTERVAL",
    "dra_objects",
    "node_dra_paths",
    "published_slices",
    "wait_dra_nodes",
    "with_default_scheduler",
]

PLUGIN_WATCH_INTERVAL = 0.2
"""How often the kubelet stand-ins look for new DRA plugins (the kubelet's watcher is
inotify-driven: at once)."""


def node_dra_paths(node: GpuNode, plugin_dir: Path) -> dict[str, Any]:
    """The ``NodeSpec`` fields of a DRA node's kubelet (none for other nodes)."""
    if not node.dra:
        return {}
    dirs = dra_dirs(plugin_dir)
    return {"plugins_registry_dir": dirs.registry_dir, "cdi_dirs": (dirs.cdi_dir,)}


def dra_objects(spec: SystemSpec) -> tuple[dict[str, Any], ...]:
    """The DeviceClass, created with the cluster when any node is a DRA node."""
    return (device_class(),) if spec.dra else ()


def with_default_scheduler(config: SchedulerConfig, spec: SystemSpec) -> SchedulerConfig:
    """With DRA nodes, ``config`` plus a ``default-scheduler`` profile like its first one."""
    return config.with_default_profile() if spec.dra else config


def published_slices(api: ApiServer) -> dict[str, tuple[Mapping[str, Any], ...]]:
    """Our driver's ResourceSlices by node name."""
    found: dict[str, list[Mapping[str, Any]]] = {}
    for item in api.list("resourceslices"):
        spec = ObjectView(item).spec
        if spec.get("driver") == DRIVER and spec.get("nodeName"):
            found.setdefault(str(spec["nodeName"]), []).append(item)
    return {node: tuple(items) for node, items in found.items()}


async def wait_dra_nodes(cluster: Cluster, spec: SystemSpec, *, within: float) -> None:
    """Until every DRA node with a plugin has its ResourceSlice published and its kubelet has
    registered the driver."""
    names = {n.name for n in spec.nodes if n.dra and n.device_plugin and n.gpus}
    if not names:
        return
    api = cluster.apiserver.server

    async def ready() -> bool:
        sliced = published_slices(api)
        return all(
            sliced.get(name) and DRIVER in cluster.kubelet(name).dra_drivers for name in names
        )

    await until(ready, within=within, what=f"DRA slices and plugin registration of {sorted(names)}")
