"""The reflector against the emulated API server, including a seeded fault schedule.

Every test runs on virtual time (``@pytest.mark.looptime``): the back-off pauses after injected
errors, the watch timeouts and the random pauses between operations take no real time, and they
happen in the order of their deadlines, so a seed gives the same interleaving on any machine.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest

from hami_kube.backoff import BackoffPolicy
from hami_kube.config import KubeSettings
from hami_kube.objects import ObjectView, object_key
from hami_kube.reflector import (
    EventHandlers,
    Reflector,
    ReflectorConfig,
    ReflectorGroup,
    upserting,
)
from hami_kube.resources import NODES, PODS, JsonObject
from hami_kube.rest import KubeClient, open_client
from hami_kube.store import index_by_node_name
from hami_kubesim.testing import RunningApiServer, running_apiserver

from .helpers import eventually, node, pod

pytestmark = pytest.mark.looptime

FAST = ReflectorConfig(watch_timeout_s=1, backoff=BackoffPolicy(initial=0.005, factor=2.0, cap=0.1))


class Mirror:
    """Rebuilds the state from handler calls alone and records any impossible call."""

    def __init__(self) -> None:
        self.objects: dict[str, JsonObject] = {}
        self.violations: list[str] = []
        self.calls: list[tuple[str, str]] = []

    def on_add(self, obj: JsonObject) -> None:
        key = object_key(obj)
        self.calls.append(("add", key))
        if key in self.objects:
            self.violations.append(f"duplicate add {key}")
        self.objects[key] = obj

    async def on_update(self, old: JsonObject, new: JsonObject) -> None:
        key = object_key(new)
        self.calls.append(("update", key))
        if self.objects.get(key) != old:
            self.violations.append(f"update of unknown or stale {key}")
        if ObjectView(old).resource_version == ObjectView(new).resource_version:
            self.violations.append(f"update without a change {key}")
        self.objects[key] = new

    def on_delete(self, obj: JsonObject) -> None:
        key = object_key(obj)
        self.calls.append(("delete", key))
        if self.objects.pop(key, None) is None:
            self.violations.append(f"delete of unknown {key}")

    def handlers(self) -> EventHandlers:
        return EventHandlers(on_add=self.on_add, on_update=self.on_update, on_delete=self.on_delete)


@asynccontextmanager
async def running(reflector: Reflector) -> AsyncIterator[Reflector]:
    task = asyncio.create_task(reflector.run(), name=f"reflector-{reflector.name}")
    try:
        yield reflector
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def server_state(sim: RunningApiServer, resource: str) -> dict[str, JsonObject]:
    return {object_key(obj): obj for obj in sim.server.list(resource)}


async def test_sync_handlers_and_index(sim: RunningApiServer, kube: KubeClient) -> None:
    await sim.server.create("pods", pod("a", node="n1"))
    await sim.server.create("pods", pod("b"))
    mirror = Mirror()
    reflector = Reflector(
        kube,
        PODS,
        config=FAST,
        handlers=[mirror.handlers()],
        indexers={"node": index_by_node_name},
    )
    assert (reflector.has_synced, reflector.resource_version) == (False, "")
    async with running(reflector):
        async with asyncio.timeout(10):
            await reflector.wait_synced()
        assert reflector.has_synced
        assert sorted(reflector.store.keys()) == ["default/a", "default/b"]
        assert [object_key(p) for p in reflector.store.by_index("node", "n1")] == ["default/a"]
        assert all(obj["kind"] == "Pod" for obj in reflector.store.objects())

        await sim.server.bind("default", "b", "n1")
        await sim.server.delete("pods", "a", namespace="default")
        await eventually(
            lambda: reflector.store.keys_by_index("node", "n1") == {"default/b"},
            what="index follows binding and deletion",
        )
    assert sorted(mirror.calls) == sorted(
        [
            ("add", "default/a"),
            ("add", "default/b"),
            ("update", "default/b"),
            ("delete", "default/a"),
        ]
    )
    assert mirror.violations == []


async def test_filtered_reflector(sim: RunningApiServer, kube: KubeClient) -> None:
    await sim.server.create("pods", pod("a", node="n1"))
    await sim.server.create("pods", pod("b", node="n2"))
    config = ReflectorConfig(field_selector="spec.nodeName=n1", watch_timeout_s=1)
    reflector = Reflector(kube, PODS, config=config)
    async with running(reflector):
        async with asyncio.timeout(10):
            await reflector.wait_synced()
        assert reflector.store.keys() == ["default/a"]
        await sim.server.create("pods", pod("c", node="n1"))
        await sim.server.create("pods", pod("d", node="n2"))
        await eventually(lambda: "default/c" in reflector.store, what="matching pod arrives")
    assert "default/d" not in reflector.store


async def test_keep_filters_on_the_client_and_reports_objects_that_stop_matching(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    def labelled(obj: JsonObject) -> bool:
        return "keep" in ObjectView(obj).labels

    await sim.server.create("pods", pod("a", node="n1", labels={"keep": "yes"}))
    await sim.server.create("pods", pod("b", node="n1"))
    mirror = Mirror()
    config = ReflectorConfig(watch_timeout_s=1, keep=labelled)
    handlers = EventHandlers(mirror.on_add, mirror.on_update, mirror.on_delete)
    reflector = Reflector(kube, PODS, config=config, handlers=[handlers])
    async with running(reflector):
        await reflector.wait_synced()
        assert reflector.store.keys() == ["default/a"]
        # b gains the label: it arrives; a loses it: it is reported gone.
        await sim.server.patch(
            "pods", "b", {"metadata": {"labels": {"keep": "1"}}}, namespace="default"
        )
        await eventually(lambda: "default/b" in reflector.store, what="b kept")
        await sim.server.patch(
            "pods", "a", {"metadata": {"labels": {"keep": None}}}, namespace="default"
        )
        await eventually(lambda: "default/a" not in reflector.store, what="a dropped")
    assert mirror.calls == [("add", "default/a"), ("add", "default/b"), ("delete", "default/a")]
    assert mirror.violations == []


async def test_failing_handler_does_not_stop_the_reflector(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    seen: list[str] = []

    def explode(obj: JsonObject) -> None:
        raise RuntimeError("handler bug")

    def record(obj: JsonObject) -> None:
        seen.append(object_key(obj))

    reflector = Reflector(
        kube,
        NODES,
        config=FAST,
        handlers=[EventHandlers(on_add=explode), EventHandlers(on_add=record)],
    )
    async with running(reflector):
        async with asyncio.timeout(10):
            await reflector.wait_synced()
        await sim.server.create("nodes", node("n1"))
        await sim.server.create("nodes", node("n2"))
        await eventually(lambda: seen == ["n1", "n2"], what="later handlers still run")
    assert reflector.stats.handler_errors == 2


async def test_relist_after_compaction_emits_missed_deletes(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    for name in ("a", "b", "c"):
        await sim.server.create("nodes", node(name))
    mirror = Mirror()
    reflector = Reflector(kube, NODES, config=FAST, handlers=[mirror.handlers()])
    async with running(reflector):
        async with asyncio.timeout(10):
            await reflector.wait_synced()
        # Cut the stream, change state and compact before the reflector can re-watch.
        sim.server.inject_error("watch", "nodes", code=500, times=3)
        sim.server.drop_watches("nodes", mode="abort")
        await sim.server.delete("nodes", "a")
        await sim.server.create("nodes", node("d"))
        sim.server.compact()
        await eventually(
            lambda: sorted(reflector.store.keys()) == ["b", "c", "d"], what="relist converges"
        )
    assert mirror.violations == []
    assert ("delete", "a") in mirror.calls
    assert reflector.stats.expired + reflector.stats.lists >= 2


async def test_list_hooks_frame_every_list(sim: RunningApiServer, kube: KubeClient) -> None:
    for name in ("a", "b"):
        await sim.server.create("nodes", node(name))
    mirror = Mirror()
    seen: list[tuple[str, list[str]]] = []

    def before() -> None:
        seen.append(("before", sorted(mirror.objects)))

    async def after(objects: Sequence[JsonObject]) -> None:
        # Called with what the store holds, once the list's own handlers have run.
        assert sorted(object_key(obj) for obj in objects) == sorted(mirror.objects)
        seen.append(("after", sorted(mirror.objects)))

    hooks = EventHandlers(before_list=before, after_list=after)
    reflector = Reflector(kube, NODES, config=FAST, handlers=[mirror.handlers(), hooks])
    async with running(reflector):
        async with asyncio.timeout(10):
            await reflector.wait_synced()
        assert seen == [("before", []), ("after", ["a", "b"])]
        sim.server.inject_error("watch", "nodes", code=500)
        sim.server.drop_watches("nodes", mode="abort")
        await sim.server.delete("nodes", "a")
        await sim.server.create("nodes", node("c"))
        sim.server.compact()
        sim.server.clear_faults()
        await eventually(lambda: len(seen) == 4, what="the re-list ran its hooks")
    assert seen[2:] == [("before", ["a", "b"]), ("after", ["b", "c"])]
    assert mirror.violations == []


async def _random_operations(sim: RunningApiServer, rng: random.Random, count: int) -> None:
    live: list[str] = []
    serial = 0
    for step in range(count):
        roll = rng.random()
        if roll < 0.4 or not live:
            serial += 1
            name = f"p{serial}"
            await sim.server.create("pods", pod(name, node=rng.choice([None, "n1", "n2"])))
            live.append(name)
        elif roll < 0.75:
            name = rng.choice(live)
            labels = {"step": str(step)}
            body: dict[str, Any] = {"metadata": {"labels": labels}}
            await sim.server.patch("pods", name, body, namespace="default", patch_type="merge")
        else:
            name = live.pop(rng.randrange(len(live)))
            await sim.server.delete("pods", name, namespace="default")
        fault = rng.random()
        if fault < 0.04:
            sim.server.compact()
        elif fault < 0.08:
            sim.server.drop_watches("pods", mode=rng.choice(["close", "expire", "abort"]))
        elif fault < 0.10:
            sim.server.drop_watches("pods", mode="abort")
            sim.server.compact()
        if rng.random() < 0.3:
            await asyncio.sleep(rng.random() * 0.01)
        else:
            await asyncio.sleep(0)


@pytest.mark.parametrize("seed", range(6))
async def test_store_converges_under_faults(seed: int) -> None:
    rng = random.Random(seed)
    async with running_apiserver(port=0, history=rng.choice([20, 200, 10_000])) as sim:
        sim.server.faults.reseed(seed)
        sim.server.inject_error("list", "pods", code=500, rate=0.3)
        sim.server.inject_error("watch", "pods", code=503, rate=0.2)
        sim.server.inject_error("watch", "pods", code=429, rate=0.1)
        settings = KubeSettings(kube_url=sim.url, request_timeout_s=5.0)
        async with open_client(settings) as client:
            mirror = Mirror()
            reflector = Reflector(
                client,
                PODS,
                config=FAST,
                handlers=[mirror.handlers()],
                indexers={"node": index_by_node_name},
                rng=random.Random(seed),
            )
            async with running(reflector):
                async with asyncio.timeout(20):
                    await reflector.wait_synced()
                await _random_operations(sim, rng, 150)
                # A guaranteed 410 in every run, whatever the random schedule did.
                sim.server.drop_watches("pods", mode="expire")
                await sim.server.create("pods", pod("last"))
                sim.server.clear_faults()
                expected = server_state(sim, "pods")
                await eventually(
                    lambda: reflector.store.snapshot() == expected,
                    within=20,
                    what="store equals server state",
                )
            assert mirror.violations == []
            assert mirror.objects == expected
            for value in ("n1", "n2"):
                indexed = reflector.store.keys_by_index("node", value)
                assert indexed == {
                    key for key, obj in expected.items() if obj["spec"].get("nodeName") == value
                }
            assert reflector.stats.expired >= 1


async def test_recovers_when_the_server_restarts_with_a_fresh_history() -> None:
    # After the restart the reflector holds a resourceVersion the new server has not reached;
    # waiting cannot help, so it must re-list.
    async with AsyncExitStack() as first_server:
        first = await first_server.enter_async_context(running_apiserver(port=0))
        for index in range(30):
            await first.server.create("nodes", node(f"old-{index}"))
        settings = KubeSettings(kube_url=first.url, request_timeout_s=5.0)
        async with open_client(settings) as client:
            reflector = Reflector(client, NODES, config=FAST)
            async with running(reflector):
                async with asyncio.timeout(10):
                    await reflector.wait_synced()
                assert len(reflector.store) == 30
                stale_version = int(reflector.resource_version)
                await first_server.aclose()
                async with running_apiserver(port=first.port) as second:
                    await second.server.create("nodes", node("new"))
                    assert second.server.resource_version < stale_version
                    await eventually(
                        lambda: reflector.store.keys() == ["new"], what="converges after restart"
                    )


async def test_a_group_of_reflectors_syncs_and_stops_together(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await sim.server.create("nodes", node("n1"))
    await sim.server.create("pods", pod("a", node="n1"))
    seen: dict[str, JsonObject] = {}

    def upsert(obj: JsonObject) -> None:
        seen[object_key(obj)] = obj

    def remove(obj: JsonObject) -> None:
        seen.pop(object_key(obj))

    group = ReflectorGroup(
        Reflector(kube, NODES, config=FAST, handlers=[upserting(upsert, remove)], name="g-nodes"),
        Reflector(kube, PODS, config=FAST, handlers=[upserting(upsert, remove)], name="g-pods"),
    )
    assert not group.synced
    async with asyncio.TaskGroup() as tasks:
        started = group.start(tasks)
        assert sorted(t.get_name() for t in started) == ["reflector-g-nodes", "reflector-g-pods"]
        async with asyncio.timeout(10):
            await group.wait_synced()
        assert group.synced
        assert sorted(seen) == ["default/a", "n1"]
        # An update reaches the same upsert with the new object; a delete reaches remove.
        await sim.server.patch("nodes", "n1", {"metadata": {"labels": {"gpu": "on"}}})
        await eventually(lambda: seen["n1"]["metadata"].get("labels") == {"gpu": "on"}, what="up")
        await sim.server.delete("pods", "a", namespace="default")
        await eventually(lambda: "default/a" not in seen, what="pod removed")
        for task in started:
            task.cancel()
