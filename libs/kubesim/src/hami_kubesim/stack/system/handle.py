"""A running system as tests, benches and the demo hold it: :class:`System`, its views, actions
and waits.

:func:`~.lifecycle.running_system` builds one once everything is up. The views read the
in-process API server and the service processes (each node's kubelet stand-in, the extender
replica that leads, where the files are); the actions act as a client would (create, delete,
clear a namespace) or as the operator of the machines (every GPU of a node (un)healthy); each
wait polls with a deadline and names what it waited for.

:meth:`System.state` snapshots the cluster together with the pods the scheduling loop will try
again on its own, so :func:`~.settle.settled` never takes a pod backing off
after a node change for one the scheduler has given up on.

:meth:`System.monitor_usage` reads back what the vGPU monitors report per container and
:meth:`System.wait_monitors` waits until that matches what the scheduler allocated
(:mod:`hami_kubesim.stack.checks.usage`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from hami_kube.objects import NodeView, ObjectView, PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.cluster.simulated import Cluster
from hami_kubesim.kubelet.standin import KubeletStandIn
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.stack.checks.usage import MonitorUsage, monitor_problems, parse_usage
from hami_kubesim.stack.metrics import sample_value, scrape
from hami_kubesim.stack.state import CdiFile, ClusterState
from hami_kubesim.stack.system.processes import ServiceProcess
from hami_kubesim.stack.system.router import LeaderRouter
from hami_kubesim.stack.system.services import LEASE
from hami_kubesim.stack.system.settle import POLL_INTERVAL, until, wait_for
from hami_kubesim.stack.system.spec import (
    GpuNode,
    SystemSpec,
    dump_yaml,
    fake_devices_document,
)
from hami_protocol import keys

__all__ = ["System"]


@dataclass(slots=True)
class System:
    """A running system: the cluster, the service processes and where their files are."""

    spec: SystemSpec
    cluster: Cluster
    work_dir: Path
    webhook: ServiceProcess
    schedulers: tuple[ServiceProcess, ...]
    deviceplugins: Mapping[str, ServiceProcess]
    extender_url: str
    scheduling_loop: SchedulingLoop
    router: LeaderRouter | None = None
    identities: Mapping[str, int] = field(default_factory=dict)
    """Scheduler replica identity → its extender port (replicated mode)."""
    monitors: Mapping[str, ServiceProcess] = field(default_factory=dict)
    """The vGPU monitor of each node, by node name (with ``spec.vgpu_monitor``)."""
    host_roots: Mapping[str, Path] = field(default_factory=dict)
    """Each node's host root, by node name (with ``spec.vgpu_monitor``)."""
    gpumap_ports: Mapping[str, int] = field(default_factory=dict)
    """Scheduler replica name → its GPU map port (with ``spec.gpumap``); the API server's
    service proxy reaches them at :data:`~.objects.SCHEDULER_GPUMAP_PROXY`."""

    # ----- views ---------------------------------------------------------------------------
    @property
    def api(self) -> ApiServer:
        """The in-process API server (reads, writes, fault injection)."""
        return self.cluster.apiserver.server

    @property
    def url(self) -> str:
        return self.cluster.url

    @property
    def logs_dir(self) -> Path:
        return self.work_dir / "logs"

    def kubelet(self, node: str) -> KubeletStandIn:
        return self.cluster.kubelet(node)

    def services(self) -> tuple[ServiceProcess, ...]:
        return (
            self.webhook,
            *self.schedulers,
            *self.deviceplugins.values(),
            *self.monitors.values(),
        )

    def node(self, name: str) -> GpuNode:
        return next(n for n in self.spec.nodes if n.name == name)

    def fake_devices_file(self, node: str) -> Path:
        return self.work_dir / "devices" / f"{node}.yaml"

    def metrics_urls(self) -> dict[str, str]:
        return {p.name: p.spec.metrics_url for p in self.services() if p.spec.metrics_url}

    def state(self) -> ClusterState:
        """A snapshot of pods, nodes and events, read in-process, with the pods the scheduling
        loop will try again on its own (:attr:`ClusterState.retrying`)."""
        pods, nodes = tuple(self.api.list("pods")), tuple(self.api.list("nodes"))
        dra = self.spec.dra
        # Claims, then the kubelets' pending unprepares, then the files: a file seen for a
        # claim already gone was then either still to be unprepared or never will be.
        claims = tuple(self.api.list("resourceclaims")) if dra else ()
        unpreparing = self.unpreparing() if dra else frozenset()
        return ClusterState(
            pods=pods,
            nodes=nodes,
            events=tuple(self.api.list("events")),
            taken_at=datetime.now(UTC),
            retrying=self.scheduling_loop.will_retry(nodes, pods),
            preemptions=self.scheduling_loop.preemptions.records(),
            claims=claims,
            slices=tuple(self.api.list("resourceslices")) if dra else (),
            cdi_files=self.cdi_files() if dra else (),
            unpreparing=unpreparing,
        )

    def dra_nodes(self) -> tuple[str, ...]:
        """The DRA nodes with a kubelet stand-in."""
        return tuple(n.name for n in self.spec.nodes if n.dra and n.name in self.cluster.kubelets)

    def cdi_files(self) -> tuple[CdiFile, ...]:
        """The per-claim CDI spec files in every DRA node's CDI dirs."""
        found: list[CdiFile] = []
        for node in self.dra_nodes():
            for directory in self.kubelet(node).settings.cdi_dirs:
                with contextlib.suppress(FileNotFoundError):
                    for path in sorted(directory.iterdir()):
                        uid = claim_uid_of_spec(path.name)
                        if uid:
                            found.append(CdiFile(node=node, claim_uid=uid, name=path.name))
        return tuple(found)

    def unpreparing(self) -> frozenset[str]:
        """UIDs of claims some kubelet still holds for no pod (unprepare due or retried)."""
        return frozenset(
            claim.ref.uid
            for node in self.dra_nodes()
            for claim in self.kubelet(node).prepared_claims().values()
            if not claim.pods
        )

    async def monitor_usage(self) -> MonitorUsage:
        """What every running vGPU monitor reports per container now (a monitor that does not
        answer reports nothing)."""
        usage = MonitorUsage()
        for monitor in self.monitors.values():
            if not monitor.running:
                continue
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                usage = usage.merged(parse_usage(await scrape(monitor.spec.metrics_url)))
        return usage

    async def wait_monitors(self, *, within: float) -> tuple[MonitorUsage, list[str]]:
        """Until the monitors report every running container with devices as allocated
        (:func:`~hami_kubesim.stack.checks.usage.monitor_problems` finds nothing), at most
        ``within`` seconds; returns the last reading and its problems (empty when it got there,
        or when the system runs no monitor)."""
        if not self.monitors:
            return MonitorUsage(), []
        last: list[tuple[MonitorUsage, list[str]]] = []

        async def reported() -> bool:
            usage = await self.monitor_usage()
            last[:] = [(usage, monitor_problems(self.state(), usage))]
            return not last[0][1]

        with contextlib.suppress(TimeoutError):
            await until(reported, within=within, what="the vGPU monitors report every container")
        return last[0]

    def leader(self) -> ServiceProcess | None:
        """The extender replica that holds the Lease and runs (the only one if unreplicated)."""
        if len(self.schedulers) == 1:
            return self.schedulers[0]
        namespace, name = LEASE
        lease = ObjectView(self.api.try_get("leases", name, namespace=namespace) or {})
        holder = str(lease.spec.get("holderIdentity") or "")
        # A campaigning replica holds the Lease as ``<identity>_<unique suffix>``.
        replica = next(
            (s for s in self.schedulers if holder == s.name or holder.startswith(s.name + "_")),
            None,
        )
        return replica if replica is not None and replica.running else None

    def leader_port(self) -> int | None:
        """The extender port of the current leader (None while there is none)."""
        leader = self.leader()
        return None if leader is None else self.identities.get(leader.name)

    # ----- actions -------------------------------------------------------------------------
    async def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Create an object as a client would (pods pass through admission)."""
        kind = str(obj.get("kind", "Pod"))
        plurals = {
            "Pod": "pods",
            "ResourceQuota": "resourcequotas",
            "PriorityClass": "priorityclasses",
        }
        resource = plurals.get(kind, kind.lower() + "s")
        return await self.api.create(resource, dict(obj))

    async def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod (no error when it is already gone)."""
        with contextlib.suppress(StatusError):
            await self.api.delete("pods", name, namespace=namespace)

    async def ensure_namespace(self, name: str) -> None:
        if self.api.try_get("namespaces", name) is None:
            await self.api.create(
                "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )

    async def clear_pods(self, namespace: str, *, within: float = 30.0) -> None:
        """Delete every pod of ``namespace`` and wait until they are gone."""
        for pod in self.api.list("pods", namespace=namespace):
            await self.delete_pod(namespace, PodView(pod).name)
        await self.wait_for(
            lambda state: not any(PodView(p).namespace == namespace for p in state.pods),
            within=within,
            what=f"every pod of namespace {namespace} gone",
        )

    async def clear_claims(self, namespace: str) -> None:
        """Delete every ResourceClaim and ResourceClaimTemplate of ``namespace`` (a claim still
        reserved goes once the resourceclaim controller has released it)."""
        if not self.spec.dra:
            return
        for resource in ("resourceclaims", "resourceclaimtemplates"):
            for item in self.api.list(resource, namespace=namespace):
                with contextlib.suppress(StatusError):
                    await self.api.delete(resource, ObjectView(item).name, namespace=namespace)

    def set_gpus_healthy(self, node: str, healthy: bool) -> None:
        """Rewrite ``node``'s fake-devices file with every GPU (un)healthy."""
        dump_yaml(
            fake_devices_document(self.node(node), healthy=healthy), self.fake_devices_file(node)
        )

    async def wait_for(
        self,
        condition: Callable[[ClusterState], bool],
        *,
        within: float,
        what: str,
        progress: Callable[[ClusterState, float], None] | None = None,
    ) -> ClusterState:
        """Poll snapshots until ``condition`` holds; ``TimeoutError`` naming ``what``."""
        return await wait_for(self.state, condition, within=within, what=what, progress=progress)

    async def wait_nodes_registered(self, *, within: float = 30.0) -> None:
        """Until every node whose device plugin registers GPUs (not a DRA node's) has its
        register annotation and GPU capacity."""
        names = {n.name for n in self.spec.nodes if n.extender_gpus}
        interval = POLL_INTERVAL if len(names) < 50 else 0.5

        async def registered() -> bool:
            nodes = self.api.list("nodes")
            return names <= {NodeView(n).name for n in nodes if _registered(NodeView(n))}

        await until(
            registered,
            within=within,
            what=f"device registration of {len(names)} nodes",
            interval=interval,
        )

    async def wait_schedulers_see_nodes(self, count: int, *, within: float = 30.0) -> None:
        """Until every running extender replica has ``count`` registered nodes in its cache."""
        deadline = time.monotonic() + within
        for replica in self.schedulers:
            while replica.running:
                with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                    samples = await scrape(replica.spec.metrics_url)
                    seen = sample_value(
                        samples, "hami_scheduler_cache_objects", kind="registered_nodes"
                    )
                    if seen is not None and seen >= count:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{replica.name} did not see {count} GPU nodes in {within} s"
                    )
                await asyncio.sleep(POLL_INTERVAL)


CDI_SPEC_PREFIX = "k8s.gpu.hami.io-claim_"
"""Our driver's per-claim CDI spec files: ``k8s.gpu.hami.io-claim_<claim UID>.json``."""


def claim_uid_of_spec(name: str) -> str:
    """The claim UID of one of our driver's CDI spec file names ("" for any other file)."""
    if not name.startswith(CDI_SPEC_PREFIX) or not name.endswith(".json"):
        return ""
    return name.removeprefix(CDI_SPEC_PREFIX).removesuffix(".json")


def _registered(node: NodeView) -> bool:
    gpus = str(node.allocatable.get("nvidia.com/gpu", "0"))
    return keys.NVIDIA_REGISTER in node.annotations and gpus != "0"
