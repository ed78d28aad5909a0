"""Starting and stopping the whole system: kubesim plus the three services as real processes.

``async with running_system(spec) as system:`` does, in order:

1. mints a CA and server certificates for the webhook and the extender, writes one fake-devices
   file per GPU node, and picks free ports — the API server's too — and each node's plugin
   dir (:mod:`.services` holds every service's flags);
2. launches the webhook, the extender (one process per replica; with two or more, Lease
   election and a :class:`~.router.LeaderRouter` in front) and one device
   plugin per GPU node (``--device-backend fake``, ``--kubelet-socket <node plugin
   dir>/kubelet.sock``, ``--pod-resources-socket`` where that node's kubelet stand-in serves
   pod-resources) and, with :attr:`~.spec.SystemSpec.vgpu_monitor`, one vGPU monitor per such
   node (each node's host root is ``<plugin dir>/host``: the plugin's ``--host-root``, where the
   node's kubelet stand-in plays HAMi-core in the containers, and the monitor's ``HOOK_PATH``
   under it), all at once and over TLS where the real ones use it.  Start-up is
   CPU-bound (five Python processes importing their libraries on a small machine), so they are
   launched first and the cluster comes up while they import;
   a DRA node's plugin runs ``--mode dra`` (:mod:`.dra`);
3. starts the simulated cluster (:func:`hami_kubesim.cluster.simulated.running_cluster`) where the
   services were told it would be: the API server, admission dispatch (the webhook's Service
   resolved to its local port) and one kubelet stand-in per node; the
   MutatingWebhookConfiguration (with the generated ``caBundle``) and the spec's objects are
   created with it; then the scheduling loop
   (:class:`~hami_kubesim.scheduler.loop.SchedulingLoop`) from the chart's
   KubeSchedulerConfiguration with only the extender's ``urlPrefix`` replaced — run here rather
   than by ``running_cluster`` so a spec can shorten the pod backoff, a kube-scheduler setting
   the fault suite needs;
   with :attr:`~.spec.SystemSpec.gpumap`, the scheduler's Service (one EndpointSlice per
   replica) and, with monitors, the monitor Service (one EndpointSlice per node's monitor,
   naming the node: how the GPU map finds them, as in the chart);
4. polls each service's ``/readyz`` until it answers, waits until every GPU node's register
   annotation is written, the kubelet advertises the GPUs and every extender replica has them
   in its cache (its ``hami_scheduler_cache_objects`` metric), then yields the
   :class:`~.handle.System`.

Leaving the block stops every process (SIGTERM, then SIGKILL after a bounded wait) — also when
the block fails — then the cluster, and removes the temporary working directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from urllib.parse import urlsplit

import structlog
import yaml

from hami_kubelet_api.constants import KUBELET_SOCKET_NAME
from hami_kubesim.cluster.config import (
    HOST_ROOT_DIR,
    AdmissionSpec,
    ClusterConfig,
    ControllersSpec,
    KubeletDefaults,
    NodeSpec,
    SchedulingSpec,
)
from hami_kubesim.cluster.simulated import Cluster, running_cluster, scheduler_config_for
from hami_kubesim.kubelet.settings import pod_resources_socket_for
from hami_kubesim.objects.services import endpoint_slice, selectorless_service
from hami_kubesim.scheduler.config import parse_scheduler_config
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.stack.system.dra import (
    PLUGIN_WATCH_INTERVAL,
    dra_objects,
    node_dra_paths,
    wait_dra_nodes,
    with_default_scheduler,
)
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.objects import (
    GPUMAP_PORT,
    MONITOR_PORT,
    MONITOR_SERVICE,
    SCHEDULER_HTTPS_PORT,
    SCHEDULER_SERVICE,
    WEBHOOK_SERVICE,
    mutating_webhook_configuration,
)
from hami_kubesim.stack.system.ports import free_port
from hami_kubesim.stack.system.processes import ServiceProcess, stop_all
from hami_kubesim.stack.system.router import LeaderRouter
from hami_kubesim.stack.system.services import (
    HOOK_PATH,
    ServicePlan,
    issue_certificates,
    monitor_processes,
    node_config_file,
    plugin_processes,
    scheduler_processes,
    webhook_process,
)
from hami_kubesim.stack.system.spec import (
    SystemSpec,
    capacity_totals_document,
    dump_yaml,
    fake_devices_document,
    node_config_document,
)
from hami_kubesim.testing import format_url, publish_service

__all__ = ["running_system"]

log = structlog.get_logger(__name__)

_LOOPBACK = "127.0.0.1"
_NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "250", "ephemeral-storage": "1Ti"}


def _check_planned(cluster: Cluster, api_url: str, sockets: Mapping[str, Path]) -> None:
    """The cluster serves where the services were told it would."""
    served = {
        name: (cluster.kubelet(name).kubelet_socket, cluster.kubelet(name).pod_resources_socket)
        for name in sockets
    }
    planned = {name: (s, pod_resources_socket_for(s.parent)) for name, s in sockets.items()}
    if cluster.url != api_url or served != planned:
        raise RuntimeError(
            f"the cluster does not serve where the services look: {cluster.url} and {served}, "
            f"planned {api_url} and {planned}"
        )


def _scheduling_loop(spec: SystemSpec, *, api_url: str, extender_url: str) -> SchedulingLoop:
    """kube-scheduler's stand-in: the chart's KubeSchedulerConfiguration with only the
    extender's ``urlPrefix`` replaced; the pod backoff is the file's unless the spec overrides
    it (a kube-scheduler setting, ``podInitialBackoffSeconds``/``podMaxBackoffSeconds``); in
    the capacity totals mode, the file as the chart renders it in that mode."""
    if spec.capacity_totals:
        document = capacity_totals_document(yaml.safe_load(spec.scheduler_config.read_text()))
        config = dataclasses.replace(
            parse_scheduler_config(yaml.safe_dump(document)).with_extender_url(extender_url),
            preemption_behaviour=spec.preemption_behaviour,
        )
    else:
        config = scheduler_config_for(
            SchedulingSpec(
                enabled=True,
                config=spec.scheduler_config,
                extender_urls=(extender_url,),
                preemption_behaviour=spec.preemption_behaviour,
            )
        )
    return SchedulingLoop(
        with_default_scheduler(config, spec),
        api_url=api_url,
        initial_backoff=spec.pod_initial_backoff,
        max_backoff=spec.pod_max_backoff,
    )


def _cluster_config(
    spec: SystemSpec,
    *,
    plugin_root: Path,
    api_port: int,
    webhook_port: int,
    ca_bundle: str,
    kubelet_grace: float,
) -> ClusterConfig:
    nodes = tuple(
        NodeSpec(
            name=node.name,
            labels={"gpu": "on", **node.labels},
            taints=node.taints,
            capacity=dict(_NODE_CAPACITY),
            allocatable=dict(_NODE_CAPACITY),
            address=f"10.{index // 250}.{index % 250}.10",
            pod_cidr=f"10.{100 + index // 250}.{index % 250}.0/24",
            vendors=node.vendors,
            **node_dra_paths(node, plugin_root / node.name),
        )
        for index, node in enumerate(spec.nodes)
    )
    webhook_config = mutating_webhook_configuration(
        ca_bundle=ca_bundle,
        failure_policy=spec.webhook_failure_policy,
        timeout_seconds=spec.webhook_timeout_seconds,
        dra_claims=spec.dra_claims,
    )
    return ClusterConfig(
        host=_LOOPBACK,
        port=api_port,
        namespaces=tuple(dict.fromkeys(("kube-node-lease", *spec.namespaces))),
        nodes=nodes,
        kubelet=KubeletDefaults(
            plugin_root=plugin_root,
            grace_period=kubelet_grace,
            call_timeout=spec.kubelet_call_timeout,
            hami_core=spec.vgpu_monitor,
            hami_core_interval=spec.workload_interval,
            plugin_watch_interval=PLUGIN_WATCH_INTERVAL,
            dra_retry_interval=spec.dra_retry_interval,
        ),
        admission=AdmissionSpec(
            enabled=True, service_urls={WEBHOOK_SERVICE: f"https://127.0.0.1:{webhook_port}"}
        ),
        # The stack runs the scheduling loop itself (see _scheduling_loop), so it can take the
        # pod backoff override.
        scheduling=SchedulingSpec(enabled=False),
        objects=(webhook_config, *dra_objects(spec), *spec.objects),
        controllers=ControllersSpec(resourceclaim=spec.dra),
    )


@contextlib.asynccontextmanager
async def running_system(
    spec: SystemSpec,
    *,
    deviceplugin_processes: bool = True,
    kubelet_grace: float = 300.0,
    keep_work_dir: bool = False,
) -> AsyncIterator[System]:
    """Run everything ``spec`` describes for the duration of the block (see the module doc).

    ``deviceplugin_processes=False`` starts no device plugins (a caller runs them itself, e.g.
    in-process for a thousand nodes); ``kubelet_grace`` is how long a kubelet keeps a plugin's
    resource after its stream ended.
    """
    temporary = spec.work_dir is None
    work_dir = spec.work_dir or Path(tempfile.mkdtemp(prefix="hami-e2e-"))
    started = time.monotonic()
    try:
        async with _running(
            spec, work_dir, deviceplugin_processes=deviceplugin_processes, grace=kubelet_grace
        ) as system:
            log.info("system ready", seconds=round(time.monotonic() - started, 2), url=system.url)
            yield system
    finally:
        if temporary and not keep_work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)


async def _publish_scheduler_service(
    system: System, scheduler_ports: tuple[int, ...], gpumap_ports: tuple[int, ...]
) -> None:
    """The chart's scheduler Service, with one EndpointSlice per extender replica (the replicas
    share 127.0.0.1, so their ports differ and a slice's ports apply to all its endpoints)."""
    namespace, name = SCHEDULER_SERVICE
    https, gpumap = SCHEDULER_HTTPS_PORT[0], GPUMAP_PORT[0]
    await system.ensure_namespace(namespace)
    await publish_service(
        system.api,
        namespace=namespace,
        name=name,
        ports=dict((SCHEDULER_HTTPS_PORT, GPUMAP_PORT)),
        backends=[
            {https: extender, gpumap: page}
            for extender, page in zip(scheduler_ports, gpumap_ports, strict=True)
        ],
    )


async def _publish_monitor_service(system: System) -> None:
    """The chart's vGPU monitor Service, one EndpointSlice per node's monitor naming its node
    (as the DaemonSet's pods' would): where the GPU map finds each node's monitor."""
    namespace, name = MONITOR_SERVICE
    port_name, port = MONITOR_PORT
    await system.ensure_namespace(namespace)
    await system.api.create("services", selectorless_service(namespace, name, {port_name: port}))
    for node, monitor in system.monitors.items():
        local = urlsplit(monitor.spec.metrics_url).port
        assert local is not None
        await system.api.create(
            "endpointslices",
            endpoint_slice(
                namespace, name, f"{name}-{node}", "127.0.0.1", {port_name: local}, node_name=node
            ),
        )


@contextlib.asynccontextmanager
async def _running(
    spec: SystemSpec, work_dir: Path, *, deviceplugin_processes: bool, grace: float
) -> AsyncIterator[System]:
    for sub in ("logs", "devices", "p"):
        (work_dir / sub).mkdir(parents=True, exist_ok=True)
    ca_bundle, webhook_tls, scheduler_tls = issue_certificates(work_dir)
    replicas = max(1, spec.scheduler.replicas)
    scheduler_ports = tuple(free_port() for _ in range(replicas))
    router = None
    if replicas > 1:
        router = LeaderRouter(target=lambda: None)
        front = await router.start()
    else:
        front = scheduler_ports[0]
    gpumap_ports = tuple(free_port() for _ in range(replicas)) if spec.gpumap else ()
    plan = ServicePlan(work_dir, free_port(), scheduler_ports, front, gpumap_ports)
    for node in spec.nodes:
        dump_yaml(fake_devices_document(node), plan.devices_file(node.name))
        node_config = node_config_document(node)
        if node_config is not None:
            node_config_file(plan.devices_file(node.name)).write_text(
                json.dumps(node_config), encoding="utf-8"
            )
    # Everything the services need to know is chosen up front (the API server's port, each
    # node's kubelet.sock), so they can start before the cluster does: see below.
    api_port, plugin_root = free_port(), (work_dir / "p").absolute()
    api_url = format_url(_LOOPBACK, api_port)
    sockets = {n.name: plugin_root / n.name / KUBELET_SOCKET_NAME for n in spec.nodes}
    for socket in sockets.values():
        socket.parent.mkdir(parents=True, exist_ok=True)
    # The rule of the cluster config's kubelet.hamiCore: a node's host root is <plugin dir>/host.
    host_roots = (
        {name: socket.parent / HOST_ROOT_DIR for name, socket in sockets.items()}
        if spec.vgpu_monitor
        else {}
    )
    for root in host_roots.values():
        (root / HOOK_PATH / "containers").mkdir(parents=True, exist_ok=True)
    config = _cluster_config(
        spec,
        plugin_root=plugin_root,
        api_port=api_port,
        webhook_port=plan.webhook_port,
        ca_bundle=ca_bundle,
        kubelet_grace=grace,
    )
    webhook = webhook_process(spec, plan, api_url, webhook_tls)
    schedulers = scheduler_processes(spec, plan, api_url, scheduler_tls)
    plugins = (
        plugin_processes(spec, plan, api_url, sockets, host_roots) if deviceplugin_processes else {}
    )
    monitors = monitor_processes(spec, plan, api_url, host_roots)
    processes: list[ServiceProcess] = [
        webhook,
        *schedulers,
        *plugins.values(),
        *monitors.values(),
    ]
    follower: asyncio.Task[None] | None = None
    try:
        # A service spends its first second or two importing its libraries, CPU-bound: launch
        # them all now and bring the cluster up meanwhile (each retries until the API server
        # and its kubelet.sock answer, long before it gets that far).
        await asyncio.gather(*(p.start(wait=False) for p in processes))
        async with (
            running_cluster(config) as cluster,
            _scheduling_loop(spec, api_url=cluster.url, extender_url=plan.extender_url) as loop,
        ):
            _check_planned(cluster, api_url, sockets if deviceplugin_processes else {})
            served_roots = {n: cluster.kubelet(n).settings.host_root for n in host_roots}
            if served_roots != host_roots:
                raise RuntimeError(f"the kubelets' host roots {served_roots}, planned {host_roots}")
            system = System(
                spec=spec,
                cluster=cluster,
                work_dir=work_dir,
                webhook=webhook,
                schedulers=schedulers,
                deviceplugins=plugins,
                extender_url=plan.extender_url,
                scheduling_loop=loop,
                router=router,
                identities={
                    s.name: port for s, port in zip(schedulers, scheduler_ports, strict=True)
                },
                monitors=monitors,
                host_roots=host_roots,
                gpumap_ports={
                    s.name: port for s, port in zip(schedulers, gpumap_ports, strict=False)
                },
            )
            if spec.gpumap:
                await _publish_scheduler_service(system, scheduler_ports, gpumap_ports)
                if monitors:
                    await _publish_monitor_service(system)
            if router is not None:
                router.set_target(system.leader_port)
                follower = asyncio.create_task(router.follow_leader(), name="stack-router")
            try:
                await asyncio.gather(*(p.wait_ready() for p in processes))
                if deviceplugin_processes:
                    await system.wait_nodes_registered(within=spec.start_timeout)
                    counted = sum(node.extender_gpus for node in spec.nodes)
                    await system.wait_schedulers_see_nodes(counted, within=spec.start_timeout)
                    await wait_dra_nodes(cluster, spec, within=spec.start_timeout)
                if router is not None:
                    await system.wait_for(
                        lambda _: system.leader() is not None,
                        within=spec.start_timeout,
                        what="an extender replica to lead",
                    )
                yield system
            finally:
                await stop_all(processes)
    finally:
        for process in processes:
            process.kill_now()
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        if router is not None:
            await router.stop()
