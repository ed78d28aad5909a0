"""The scheduling loop end to end: the emulated API server, the loop and a real HTTP extender.

Every test runs on virtual time (``@pytest.mark.looptime``): the loop keeps kube-scheduler's
default pod backoff (1 s doubling to 10 s), and retries after a failure still take no real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from hami_kube.config import KubeSettings
from hami_kube.errors import ApiError
from hami_kube.resources import EVENTS, NODES, PODS
from hami_kube.rest import KubeClient, open_client
from hami_kubesim.certs import generate_ca
from hami_kubesim.scheduler.config import parse_scheduler_config
from hami_kubesim.scheduler.loop import SchedulingLoop
from hami_kubesim.testing import RunningApiServer, eventually

pytestmark = [pytest.mark.timeout(60), pytest.mark.looptime]

GPU = "nvidia.com/gpu"

Handler = Callable[[dict[str, Any]], Any]


def config_yaml(
    url: str,
    *,
    node_cache_capable: bool = True,
    bind: bool = True,
    prioritize: bool = False,
    https: bool = False,
) -> str:
    lines = [
        "apiVersion: kubescheduler.config.k8s.io/v1",
        "kind: KubeSchedulerConfiguration",
        "profiles:",
        "- schedulerName: hami-scheduler",
        "extenders:",
        f'- urlPrefix: "{url}"',
        "  filterVerb: filter",
        "  weight: 1",
        f"  nodeCacheCapable: {str(node_cache_capable).lower()}",
        "  httpTimeout: 5s",
        f"  enableHTTPS: {str(https).lower()}",
        "  managedResources:",
        f"  - {{name: {GPU}, ignoredByScheduler: true}}",
    ]
    if bind:
        lines.append("  bindVerb: bind")
    if prioritize:
        lines.append("  prioritizeVerb: prioritize")
    if https:
        lines.append("  tlsConfig: {insecure: true}")
    return "\n".join(lines) + "\n"


@dataclass
class Extender:
    """A scriptable extender: default filter keeps every node; bind posts the Binding."""

    api_url: str
    filter: Handler | None = None
    prioritize: Handler | None = None
    bind: Handler | None = None
    calls: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {"filter": [], "prioritize": [], "bind": []}
    )

    async def handle(self, request: web.Request) -> web.Response:
        verb = request.match_info["verb"]
        assert request.content_type == "application/json"
        args = await request.json()
        self.calls[verb].append(args)
        handler = getattr(self, verb)
        if handler is not None:
            result = handler(args)
            if asyncio.iscoroutine(result):
                result = await result
            return web.json_response(result)
        if verb == "filter":
            names = args["NodeNames"]
            if names is None:
                return web.json_response({"Nodes": args["Nodes"], "NodeNames": None, "Error": ""})
            return web.json_response({"NodeNames": names, "FailedNodes": {}, "Error": ""})
        if verb == "bind":
            return web.json_response(await self.post_binding(args))
        return web.json_response([])

    async def post_binding(self, args: dict[str, Any]) -> dict[str, Any]:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": args["PodName"], "uid": args["PodUID"]},
            "target": {"kind": "Node", "name": args["Node"]},
        }
        async with open_client(KubeSettings(kube_url=self.api_url)) as client:
            try:
                await client.post_subresource(
                    PODS, args["PodName"], "binding", binding, namespace=args["PodNamespace"]
                )
            except ApiError as exc:
                return {"Error": str(exc)}
        return {"Error": ""}


@asynccontextmanager
async def serve_extender(extender: Extender, *, https: bool = False) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_post("/scheduler/{verb}", extender.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    ssl_context = None
    if https:
        ssl_context = generate_ca().issue(["127.0.0.1"]).server_ssl_context()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"{'https' if https else 'http'}://127.0.0.1:{port}/scheduler/"
    finally:
        await runner.cleanup()


@dataclass
class Cluster:
    api: KubeClient
    url: str

    async def add_node(
        self,
        name: str,
        *,
        cpu: str = "4",
        gpus: str = "0",
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> None:
        allocatable = {"cpu": cpu, "memory": "16Gi", "pods": "110", GPU: gpus}
        await self.api.create(
            NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels or {}},
                "spec": {"taints": taints or []},
                "status": {"capacity": allocatable, "allocatable": allocatable},
            },
        )

    async def add_pod(
        self,
        name: str,
        *,
        cpu: str = "100m",
        gpus: int = 0,
        scheduler: str = "hami-scheduler",
        **spec: Any,
    ) -> dict[str, Any]:
        limits = {GPU: str(gpus)} if gpus else {}
        return await self.api.create(
            PODS,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "schedulerName": scheduler,
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": cpu}, "limits": limits},
                        }
                    ],
                    **spec,
                },
            },
            namespace="default",
        )

    async def node_of(self, pod: str) -> str | None:
        obj = await self.api.get(PODS, pod, namespace="default")
        node = obj["spec"].get("nodeName")
        return str(node) if node else None

    async def wait_bound(self, pod: str, within: float = 30.0) -> str:
        found: list[str] = []

        async def bound() -> bool:
            node = await self.node_of(pod)
            found.extend([node] if node else [])
            return node is not None

        await eventually(bound, within=within, what=f"pod {pod} bound")
        return found[-1]

    async def events(self, pod: str, reason: str) -> list[dict[str, Any]]:
        items = (await self.api.list(EVENTS, namespace="default"))["items"]
        return [
            e for e in items if e["involvedObject"]["name"] == pod and e.get("reason") == reason
        ]

    async def wait_event(self, pod: str, reason: str, within: float = 30.0) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        async def recorded() -> bool:
            found[:] = await self.events(pod, reason)
            return bool(found)

        await eventually(recorded, within=within, what=f"a {reason} event for {pod}")
        return found[-1]


@pytest.fixture
def cluster(sim: RunningApiServer, kube: KubeClient) -> Cluster:
    return Cluster(api=kube, url=sim.url)


def scheduling_loop(cluster: Cluster, yaml_text: str, **kw: Any) -> SchedulingLoop:
    """The loop with the configuration's pod backoff: kube-scheduler's 1 s to 10 s."""
    return SchedulingLoop(parse_scheduler_config(yaml_text), api_url=cluster.url, **kw)


async def until(condition: Callable[[], bool], within: float = 30.0) -> None:
    await eventually(condition, within=within)


# -- extender protocol ----------------------------------------------------------------------


async def test_node_names_filter_and_extender_bind(cluster: Cluster) -> None:
    extender = Extender(
        cluster.url,
        filter=lambda args: {
            "NodeNames": ["node-b"],
            "FailedNodes": {"node-a": "CardInsufficientMemory"},
            "FailedAndUnresolvableNodes": {},
            "Error": "",
        },
    )
    await cluster.add_node("node-a", gpus="1")
    await cluster.add_node("node-b", gpus="1")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        pod = await cluster.add_pod("gpu-pod", gpus=1)
        assert await cluster.wait_bound("gpu-pod") == "node-b"
        await until(lambda: loop.stats.scheduled == 1)
        scheduled = await cluster.wait_event("gpu-pod", "Scheduled")
    (filter_args,) = extender.calls["filter"]
    assert set(filter_args) == {"Pod", "Nodes", "NodeNames"}
    assert filter_args["Nodes"] is None
    assert sorted(filter_args["NodeNames"]) == ["node-a", "node-b"]
    assert filter_args["Pod"]["metadata"]["name"] == "gpu-pod"
    assert extender.calls["bind"] == [
        {
            "PodName": "gpu-pod",
            "PodNamespace": "default",
            "PodUID": pod["metadata"]["uid"],
            "Node": "node-b",
        }
    ]
    assert scheduled["type"] == "Normal"
    assert scheduled["message"] == "Successfully assigned default/gpu-pod to node-b"
    assert (loop.stats.attempts, loop.stats.failed) == (1, 0)


async def test_full_nodes_filter_and_default_binding(cluster: Cluster) -> None:
    def keep_last(args: dict[str, Any]) -> dict[str, Any]:
        items = args["Nodes"]["items"]
        return {"Nodes": {"metadata": {}, "items": items[-1:]}, "FailedNodes": None, "Error": ""}

    extender = Extender(cluster.url, filter=keep_last)
    await cluster.add_node("node-a", gpus="1")
    await cluster.add_node("node-b", gpus="1")
    yaml_text = config_yaml("http://placeholder", node_cache_capable=False, bind=False)
    async with serve_extender(extender) as url:
        config = parse_scheduler_config(yaml_text).with_extender_url(url)
        async with SchedulingLoop(config, api_url=cluster.url) as loop:
            await cluster.add_pod("gpu-pod", gpus=1)
            node = await cluster.wait_bound("gpu-pod")
            await until(lambda: loop.stats.scheduled == 1)
    (filter_args,) = extender.calls["filter"]
    assert filter_args["NodeNames"] is None
    sent = filter_args["Nodes"]["items"]
    assert [n["metadata"]["name"] for n in sent] == ["node-a", "node-b"]
    assert sent[0]["status"]["allocatable"][GPU] == "1"  # full objects, not names
    assert node == "node-b"
    assert extender.calls["bind"] == []


async def test_https_extender_with_insecure_tls(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node("node-a", gpus="1")
    async with (
        serve_extender(extender, https=True) as url,
        scheduling_loop(cluster, config_yaml(url, https=True)),
    ):
        await cluster.add_pod("gpu-pod", gpus=1)
        assert await cluster.wait_bound("gpu-pod") == "node-a"
    assert len(extender.calls["filter"]) == 1
    assert len(extender.calls["bind"]) == 1


async def test_pods_the_extender_does_not_manage_skip_it(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node("node-a")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)):
        await cluster.add_pod("cpu-pod")
        assert await cluster.wait_bound("cpu-pod") == "node-a"
    assert extender.calls == {"filter": [], "prioritize": [], "bind": []}


async def test_prioritize_scores_pick_the_node(cluster: Cluster) -> None:
    extender = Extender(
        cluster.url,
        prioritize=lambda args: [
            {"Host": name, "Score": 9 if name == "node-b" else 1} for name in args["NodeNames"]
        ],
    )
    for name in ("node-a", "node-b", "node-c"):
        await cluster.add_node(name, gpus="1")
    async with (
        serve_extender(extender) as url,
        scheduling_loop(cluster, config_yaml(url, prioritize=True)),
    ):
        await cluster.add_pod("gpu-pod", gpus=1)
        assert await cluster.wait_bound("gpu-pod") == "node-b"
    (prioritize_args,) = extender.calls["prioritize"]
    assert sorted(prioritize_args["NodeNames"]) == ["node-a", "node-b", "node-c"]


async def test_other_scheduler_names_are_left_alone(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node("node-a")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("not-mine", scheduler="default-scheduler")
        await cluster.add_pod("mine")
        assert await cluster.wait_bound("mine") == "node-a"
        assert await cluster.node_of("not-mine") is None
        assert loop.stats.attempts == 1


# -- in-tree filters and accounting ---------------------------------------------------------


async def test_node_selector_and_taints_steer_the_pod(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node(
        "tainted",
        labels={"pool": "gpu"},
        taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
    )
    await cluster.add_node("wrong-pool", labels={"pool": "cpu"})
    await cluster.add_node("right", labels={"pool": "gpu"})
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)):
        await cluster.add_pod("picky", nodeSelector={"pool": "gpu"})
        assert await cluster.wait_bound("picky") == "right"
        await cluster.add_pod(
            "tolerant",
            nodeSelector={"pool": "gpu"},
            tolerations=[{"key": "dedicated", "operator": "Exists"}],
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": ["tainted"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
        )
        assert await cluster.wait_bound("tolerant") == "tainted"


async def test_requests_of_bound_and_assumed_pods_count(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node("node-a", cpu="4")
    await cluster.add_node("node-b", cpu="4")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)):
        for index in range(4):
            await cluster.add_pod(f"big-{index}", cpu="2")
        nodes = [await cluster.wait_bound(f"big-{index}") for index in range(4)]
    assert sorted(nodes) == ["node-a", "node-a", "node-b", "node-b"]


async def test_ignored_by_scheduler_resources_are_not_fit_checked(cluster: Cluster) -> None:
    # nvidia.com/gpu is ignoredByScheduler: the node advertises none, only the extender decides
    extender = Extender(cluster.url)
    await cluster.add_node("node-a", gpus="0")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)):
        await cluster.add_pod("gpu-pod", gpus=4)
        assert await cluster.wait_bound("gpu-pod") == "node-a"


# -- failures, events, retries --------------------------------------------------------------


async def test_failed_scheduling_event_then_retry_when_a_node_arrives(cluster: Cluster) -> None:
    extender = Extender(
        cluster.url,
        filter=lambda args: {
            "NodeNames": [n for n in args["NodeNames"] if n != "full-gpu"],
            "FailedNodes": {"full-gpu": "CardInsufficientMemory"},
            "Error": "",
        },
    )
    await cluster.add_node("full-gpu", gpus="1")
    await cluster.add_node("small", cpu="1", gpus="1")
    await cluster.add_node("tiny", cpu="500m", gpus="1")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("waiting", cpu="2", gpus=1)
        event = await cluster.wait_event("waiting", "FailedScheduling")
        assert event["type"] == "Warning"
        # kube-scheduler's FitError text, then DefaultPreemption's own (hence the "..")
        assert event["message"] == (
            "0/3 nodes are available: 1 CardInsufficientMemory, 2 Insufficient cpu. "
            "preemption: 0/3 nodes are available: 1 No preemption victims found for incoming "
            "pod, 2 Preemption is not helpful for scheduling.."
        )
        assert event["source"]["component"] == "hami-scheduler"
        assert await cluster.node_of("waiting") is None
        pod = await cluster.api.get(PODS, "waiting", namespace="default")
        assert {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
        }.items() <= next(
            c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"
        ).items()
        failed_before = loop.stats.failed
        await cluster.add_node("big", cpu="8", gpus="1")
        assert await cluster.wait_bound("waiting") == "big"
        assert loop.stats.failed >= failed_before >= 1
        assert loop.stats.scheduled == 1


async def test_parked_pod_is_not_retried_without_a_change(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node("small", cpu="1")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("waiting", cpu="2")
        await cluster.wait_event("waiting", "FailedScheduling")
        await until(lambda: loop.queue.state_of("default/waiting") == "unschedulable")
        attempts = loop.stats.attempts
        # a scheduled pod elsewhere keeps the loop busy while the parked one stays put
        await cluster.add_pod("fits", cpu="100m")
        await cluster.wait_bound("fits")
        assert loop.stats.attempts == attempts + 1
        assert loop.queue.state_of("default/waiting") == "unschedulable"


async def test_extender_error_is_retried_with_backoff(cluster: Cluster) -> None:
    answers = iter([{"Error": "device cache not ready"}])

    def flaky(args: dict[str, Any]) -> dict[str, Any]:
        return next(answers, {"NodeNames": args["NodeNames"], "Error": ""})

    extender = Extender(cluster.url, filter=flaky)
    await cluster.add_node("node-a", gpus="1")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("gpu-pod", gpus=1)
        assert await cluster.wait_bound("gpu-pod") == "node-a"
        event = await cluster.wait_event("gpu-pod", "FailedScheduling")
        await until(lambda: loop.stats.scheduled == 1)
    assert event["message"] == "device cache not ready"
    assert loop.stats.extender_errors == 1
    assert loop.stats.attempts == 2
    assert len(extender.calls["filter"]) == 2


async def test_extender_http_failure_is_reported(cluster: Cluster) -> None:
    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=500, text="boom")

    app = web.Application()
    app.router.add_post("/scheduler/{verb}", broken)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/scheduler"
    await cluster.add_node("node-a", gpus="1")
    try:
        async with scheduling_loop(cluster, config_yaml(url)):
            await cluster.add_pod("gpu-pod", gpus=1)
            event = await cluster.wait_event("gpu-pod", "FailedScheduling")
    finally:
        await runner.cleanup()
    assert event["message"] == f"failed filter with extender at URL {url}/filter, code 500"


async def test_bind_error_fails_then_succeeds(cluster: Cluster) -> None:
    answers = iter([{"Error": "node lock held by another pod"}])
    extender = Extender(cluster.url)

    async def bind(args: dict[str, Any]) -> dict[str, Any]:
        first = next(answers, None)
        return first if first is not None else await extender.post_binding(args)

    extender.bind = bind
    await cluster.add_node("node-a", gpus="1")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("gpu-pod", gpus=1)
        assert await cluster.wait_bound("gpu-pod") == "node-a"
        event = await cluster.wait_event("gpu-pod", "FailedScheduling")
        await until(lambda: loop.stats.scheduled == 1)
    assert event["message"] == "binding rejected: node lock held by another pod"
    assert loop.stats.bind_failures == 1
    assert len(extender.calls["bind"]) == 2


async def test_repeated_failures_bump_one_event(cluster: Cluster) -> None:
    extender = Extender(cluster.url, filter=lambda args: {"Error": "always broken"})
    await cluster.add_node("node-a", gpus="1")
    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("gpu-pod", gpus=1)
        await until(lambda: loop.stats.failed >= 3)

        async def counted() -> int:
            events = await cluster.events("gpu-pod", "FailedScheduling")
            return sum(e.get("count", 1) for e in events) if len(events) == 1 else -1

        async def bumped_three_times() -> bool:
            return await counted() >= 3

        await eventually(bumped_three_times, within=60, what="one event counted three times")
    assert await counted() >= 3


async def test_loop_stops_cleanly_and_restarts(cluster: Cluster) -> None:
    extender = Extender(cluster.url)
    await cluster.add_node("node-a")
    async with serve_extender(extender) as url:
        loop = scheduling_loop(cluster, config_yaml(url))
        async with loop:
            await cluster.add_pod("first")
            await cluster.wait_bound("first")
        await cluster.add_pod("second")
        assert await cluster.node_of("second") is None
        async with asyncio.TaskGroup() as group:
            task = group.create_task(loop.run(), name="test-scheduler")
            await cluster.wait_bound("second")
            task.cancel()


async def test_will_retry_tells_parked_pods_from_pods_it_will_try_again(
    cluster: Cluster, sim: RunningApiServer
) -> None:
    # What "settled" needs: a pod whose condition says Unschedulable may still be on its way.
    extender = Extender(cluster.url)
    await cluster.add_node("small", cpu="1")

    def retrying(loop: SchedulingLoop) -> frozenset[str]:
        return loop.will_retry(sim.server.list("nodes"), sim.server.list("pods"))

    async with serve_extender(extender) as url, scheduling_loop(cluster, config_yaml(url)) as loop:
        await cluster.add_pod("waiting", cpu="2")
        await until(lambda: loop.queue.state_of("default/waiting") == "unschedulable")
        await eventually(lambda: retrying(loop) == frozenset(), what="parked, caches current")

        # A node change the loop's watch has not delivered yet may wake the pod: in flight.
        await sim.server.patch(
            "nodes",
            "small",
            {"status": {"allocatable": {"cpu": "4"}}},
            patch_type="merge",
            subresource="status",
        )
        assert retrying(loop) == {"default/waiting"}
        # Once delivered, the queue holds it in backoff, its condition still Unschedulable.
        await until(lambda: loop.queue.state_of("default/waiting") == "backoff")
        pod = sim.server.get("pods", "waiting", namespace="default")
        (scheduled,) = (c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
        assert scheduled["reason"] == "Unschedulable"
        assert retrying(loop) == {"default/waiting"}
        assert await cluster.wait_bound("waiting") == "small"
        await until(lambda: loop.stats.scheduled == 1)
        assert retrying(loop) == frozenset()
