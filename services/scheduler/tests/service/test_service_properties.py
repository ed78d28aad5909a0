"""No sequence of filters, binds, deletes and watch deliveries over-commits a device.

The scheduler's cache layer is driven as the service drives it: ``FilterService.filter``
(single mode: release, select, assume, keep the decision for the bind), binds (the Binding
carrying the kept decision, or failing and releasing), pods deleted (unbound ones reach the
scheduler only through the pending-bind sweep) or finished, and watch events delivered late, in
order, as the API server would send them to a watch of bound pods carrying an allocation.  The
API server here is a dictionary of pods plus an ordered event stream, so hypothesis can explore
thousands of interleavings.  After every step:

* no device holds more slots, memory or cores than it registered;
* the incrementally kept node usage equals a rebuild from scratch of what the pods hold;
* the namespace quota ledger equals the sum of the holdings and stays within the quota.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections import deque
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo
from hami_protocol.pod.allocation import allocation_keys
from hami_protocol.vendor.table import DEFAULT_VENDORS, NVIDIA
from hami_scheduler.bind.pending import PendingBinds
from hami_scheduler.cache.pods import carries_allocation
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import (
    FailureReasons,
    NodeUsage,
    PodPlan,
    SelectMemo,
    build_node_usage,
    select_node,
)
from hami_scheduler.events import SchedulerEvents
from hami_scheduler.filter import FilterService
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.selection.plan import Planner
from hami_scheduler.wire import ExtenderArgs

from ..core_helpers import node_st, plan_st
from ..service_helpers import container, gpu_limits, node_object, pod_object, register_annotations

QUOTA_MEMORY = 20_000


class MemoryApi:
    """Pods as the API server keeps them; every write appends a watch event, delivered only
    for bound pods carrying an allocation (the scheduler's field selector and keep filter)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.stream: deque[tuple[str, dict[str, Any]]] = deque()
        self.failing = False
        self._version = 0
        self._allocation = allocation_keys(DEFAULT_VENDORS)

    def _emit(self, kind: str, pod: dict[str, Any]) -> None:
        self._version += 1
        pod["metadata"]["resourceVersion"] = str(self._version)
        self.stream.append((kind, copy.deepcopy(pod)))

    def create(self, pod: dict[str, Any]) -> dict[str, Any]:
        self.pods[pod["metadata"]["name"]] = pod
        self._emit("upsert", pod)
        return copy.deepcopy(pod)

    def bind(self, name: str, pending: PendingBinds, cache: SchedulerCache) -> None:
        """What the bind does with a kept decision: the Binding carries it, or fails."""
        pod = self.pods[name]
        uid = pod["metadata"]["uid"]
        entry = pending.take(uid)
        if entry is None or entry.record is None or pod.get("spec", {}).get("nodeName"):
            return
        if self.failing:
            cache.release(uid)
            return
        pod["metadata"].setdefault("annotations", {}).update(entry.record.annotations)
        pod["spec"]["nodeName"] = entry.record.holding.node
        self._emit("upsert", pod)

    def bound(self, name: str) -> bool:
        return bool(self.pods[name].get("spec", {}).get("nodeName"))

    def finish(self, name: str) -> None:
        pod = self.pods[name]
        pod["status"] = {"phase": "Succeeded"}
        self._emit("upsert", pod)

    def delete(self, name: str, pending: PendingBinds) -> None:
        pod = self.pods.pop(name)
        self._emit("delete", pod)
        if not pod.get("spec", {}).get("nodeName"):
            # Never seen by the watch: the sweep finds it gone and drops its decision.
            pending.drop(pod["metadata"]["uid"])

    def deliver(self, cache: SchedulerCache, count: int) -> None:
        for _ in range(min(count, len(self.stream))):
            kind, pod = self.stream.popleft()
            if not pod.get("spec", {}).get("nodeName"):
                continue
            if kind == "delete":
                cache.remove_pod(pod)
            elif carries_allocation(pod, self._allocation):
                cache.upsert_pod(pod)


def node_devices(name: str, draw: Any) -> list[DeviceInfo]:
    return [
        DeviceInfo(
            id=f"GPU-{name}-{i}",
            index=i,
            count=draw(st.sampled_from([1, 2, 4, 10])),
            devmem=draw(st.sampled_from([4000, 8000, 16000])),
            devcore=100,
            type="NVIDIA-Tesla T4",
            numa=i % 2,
            health=True,
        )
        for i in range(draw(st.integers(1, 4)))
    ]


def gpu_container(draw: Any, name: str) -> dict[str, Any]:
    return container(
        name,
        gpu_limits(
            draw(st.sampled_from([1, 1, 1, 2])),
            mem=draw(st.sampled_from([None, 1000, 3000, 6000])),
            cores=draw(st.sampled_from([None, 0, 20, 50, 100])),
        ),
    )


def new_pod(draw: Any, name: str) -> dict[str, Any]:
    app = [gpu_container(draw, f"c{i}") for i in range(draw(st.integers(1, 2)))]
    init = [gpu_container(draw, f"i{i}") for i in range(draw(st.integers(0, 1)))]
    annotations = {
        keys.GPU_SCHEDULER_POLICY: draw(st.sampled_from(["spread", "binpack", "mutex"])),
        keys.NODE_SCHEDULER_POLICY: draw(st.sampled_from(["binpack", "spread"])),
    }
    pod = pod_object(
        name,
        *app,
        namespace=draw(st.sampled_from(["team", "other"])),
        init=init,
        annotations=annotations,
    )
    pod["metadata"]["uid"] = f"uid-{name}"
    return pod


def check(cache: SchedulerCache, registry: Mapping[str, list[DeviceInfo]]) -> None:
    by_node: dict[str, list[Any]] = {}
    by_namespace: dict[str, list[int]] = {}
    for _uid, _name, holding in cache.holdings():
        by_node.setdefault(holding.node, []).extend(holding.usage)
        total = by_namespace.setdefault(holding.namespace, [0, 0])
        total[0] += sum(s.usedmem for s in holding.usage)
        total[1] += sum(s.usedcores for s in holding.usage)
    for name, devices in registry.items():
        node = cache.nodes[name]
        for dev in node.devices:
            assert 0 <= dev.used <= dev.count, dev
            assert 0 <= dev.usedmem <= dev.totalmem, dev
            assert 0 <= dev.usedcores <= dev.totalcore, dev
        scratch = build_node_usage(name, {NVIDIA: devices}, usages=by_node.get(name, []))
        assert node.devices == scratch.devices
    for namespace in ("team", "other"):
        expected = tuple(by_namespace.get(namespace, [0, 0]))
        assert cache.ledger.used(namespace, NVIDIA) == expected
    assert cache.ledger.used("team", NVIDIA)[0] <= QUOTA_MEMORY


@settings(max_examples=150)
@given(st.data())
def test_no_sequence_of_service_operations_over_commits(data: st.DataObject) -> None:
    draw = data.draw
    cache = SchedulerCache(DEFAULT_VENDORS)
    registry: dict[str, list[DeviceInfo]] = {}
    for name in ("n0", "n1", "n2"):
        registry[name] = node_devices(name, draw)
        cache.upsert_node(node_object(name, register_annotations(registry[name])))
    cache.upsert_quota(
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": str(QUOTA_MEMORY)}},
        }
    )
    api = MemoryApi()
    pending = PendingBinds(cache)
    filters = FilterService(
        cache=cache,
        planner=Planner(DEFAULT_VENDORS),
        events=SchedulerEvents(None),
        metrics=SchedulerMetrics(),
        pending=pending,
    )
    names = list(registry)

    async def filter_pod(pod: dict[str, Any]) -> None:
        await filters.filter(ExtenderArgs(pod=copy.deepcopy(pod), node_names=names))

    async def scenario() -> None:
        created = 0
        for _ in range(draw(st.integers(1, 25))):
            action = draw(
                st.sampled_from(
                    [
                        "new",
                        "new",
                        "new",
                        "again",
                        "bind",
                        "bind",
                        "deliver",
                        "deliver",
                        "delete",
                        "finish",
                        "toggle-failure",
                    ]
                )
            )
            live = sorted(api.pods)
            unbound = [name for name in live if not api.bound(name)]
            if action == "new" or not live:
                pod = api.create(new_pod(draw, f"p{created}"))
                created += 1
                await filter_pod(pod)
            elif action == "again" and unbound:
                await filter_pod(api.pods[draw(st.sampled_from(unbound))])
            elif action == "bind" and unbound:
                api.bind(draw(st.sampled_from(unbound)), pending, cache)
            elif action == "deliver":
                api.deliver(cache, draw(st.integers(1, 6)))
            elif action == "delete":
                api.delete(draw(st.sampled_from(live)), pending)
            elif action == "finish":
                api.finish(draw(st.sampled_from(live)))
            elif action == "toggle-failure":
                api.failing = not api.failing
            check(cache, registry)
        api.deliver(cache, len(api.stream))
        check(cache, registry)
        # Every bound decision has been seen, every failed or abandoned one forgotten: what is
        # still assumed is exactly what waits for a bind.
        waiting = [e for e in pending._entries.values() if e.record is not None]
        assert cache.assumed_count() == len(waiting)
        assert all(not api.bound(e.pod.name) for e in waiting)

    asyncio.run(scenario())


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        keys.NVIDIA_REGISTER,
        keys.NVIDIA_HANDSHAKE,
        keys.NVIDIA_SCORE,
        keys.DEVICE_CORDON,
        keys.VGPU_NODE,
        keys.NVIDIA_DEVICES_ALLOCATED,
        keys.GPU_SCHEDULER_POLICY,
        keys.DEVICE_SCORING_WEIGHTS,
        keys.NVIDIA_NUMA_BIND,
        "other",
    ]
)
ANNOTATION_VALUES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            "[{]",
            '[{"id": 5}]',
            "GPU-0,10,8000,100,T4,0,true:",
            "GPU-x,NVIDIA,1,1:;",
            "GPU-x,NVIDIA:;",
            "Requesting_2020-01-01 00:00:00",
            "slot=1,core=-1,memory=1",
        ]
    ),
    JSON.map(json.dumps),
)


def messy(draw: Any) -> dict[str, Any]:
    """A Kubernetes-shaped object whose every part may be of the wrong type."""
    annotations = draw(st.dictionaries(KEYS, ANNOTATION_VALUES, max_size=5) | JSON)
    metadata = draw(
        st.fixed_dictionaries(
            {"name": st.text(max_size=5) | JSON, "annotations": st.just(annotations)},
            optional={"uid": st.text(max_size=5) | JSON, "namespace": st.text(max_size=5)},
        )
        | JSON
    )
    containers = draw(
        st.lists(
            st.fixed_dictionaries(
                {"name": st.text(max_size=3)},
                optional={"resources": JSON | st.just({"limits": {"nvidia.com/gpu": "1"}})},
            )
            | JSON,
            max_size=2,
        )
        | JSON
    )
    return {
        "metadata": metadata,
        "spec": draw(st.just({"containers": containers}) | JSON),
        "status": draw(JSON),
    }


@settings(max_examples=150)
@given(st.data())
def test_nothing_a_client_or_an_annotation_sends_raises(data: st.DataObject) -> None:
    cache = SchedulerCache(DEFAULT_VENDORS)
    cache.upsert_node(
        node_object("good-node", register_annotations(node_devices("good-node", data.draw)))
    )
    filters = FilterService(
        cache=cache,
        planner=Planner(DEFAULT_VENDORS),
        events=SchedulerEvents(None),
        metrics=SchedulerMetrics(),
    )
    for _ in range(3):
        obj = messy(data.draw)
        cache.upsert_node(copy.deepcopy(obj))
        cache.upsert_pod(copy.deepcopy(obj))
        cache.upsert_quota(copy.deepcopy(obj))
        cache.remove_pod(copy.deepcopy(obj))
        cache.remove_node(copy.deepcopy(obj))
    cache.check_handshakes(cache.node_names(), datetime.now(UTC))
    pod = messy(data.draw)
    nodes = [messy(data.draw) for _ in range(data.draw(st.integers(0, 2)))]

    async def ask() -> None:
        names = ["good-node", "ghost", *cache.node_names()]
        for args in (
            ExtenderArgs(pod=pod, node_names=names),
            ExtenderArgs(pod=pod, nodes=nodes),
        ):
            reply = await filters.filter(args)
            assert reply.error or reply.failed is not None
            filters.prioritize(args)

    asyncio.run(ask())
    assert "good-node" in cache.nodes


@given(node_st("a", with_usage=True), node_st("b", with_usage=True), plan_st(simple=True))
def test_resolved_reasons_equal_reading_them_one_by_one(
    a: NodeUsage, b: NodeUsage, plan: PodPlan
) -> None:
    memo = SelectMemo()
    nodes = {"a": a, "b": b}
    for _ in range(2):
        failed = select_node(plan, nodes, candidates=["a", "b", "c"], memo=memo).failed
        assert isinstance(failed, FailureReasons)
        assert failed.resolved() == dict(failed)
