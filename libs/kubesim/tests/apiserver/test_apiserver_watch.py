"""Watch semantics in process: starting points, selector transitions, expiry, slow watchers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.apiserver.selectors import FieldSelector
from hami_kubesim.apiserver.server import ApiServer, LocalWatch, LocalWatchEvent
from hami_kubesim.apiserver.store import Store
from hami_kubesim.apiserver.watch import Watcher
from hami_kubesim.objects.patching import MERGE_PATCH as MERGE
from hami_kubesim.objects.resources import CONFIG_MAPS
from hami_protocol.selectors import LabelSelector


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}]}}


async def take(stream: LocalWatch, count: int) -> list[LocalWatchEvent]:
    out: list[LocalWatchEvent] = []
    async with asyncio.timeout(5):
        while len(out) < count:
            out.append(await anext(stream))
    return out


def summary(events: list[LocalWatchEvent]) -> list[tuple[str, str]]:
    return [
        (e.type, e.object.get("metadata", {}).get("name", e.object.get("reason", "")))
        for e in events
    ]


async def test_unset_and_zero_start_with_synthetic_added() -> None:
    for rv in (None, "0"):
        server = ApiServer()
        await server.create("pods", pod("a"))
        stream = server.watch("pods", namespace="default", resource_version=rv)
        (first,) = await take(stream, 1)
        assert (first.type, first.object["metadata"]["name"]) == ("ADDED", "a")
        assert first.object["kind"] == "Pod"
        assert first.object["apiVersion"] == "v1"
        await server.create("pods", pod("b"))
        (second,) = await take(stream, 1)
        assert second.type == "ADDED"
        assert second.object["metadata"]["name"] == "b"
        await stream.aclose()
        assert server.stats()["watchers"]["pods"] == 0


async def test_specific_resource_version_replays_only_later_changes() -> None:
    server = ApiServer()
    created = await server.create("pods", pod("a"))
    start = created["metadata"]["resourceVersion"]
    await server.patch("pods", "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    await server.delete("pods", "a", namespace="default")
    stream = server.watch("pods", resource_version=start)
    events = await take(stream, 2)
    assert summary(events) == [("MODIFIED", "a"), ("DELETED", "a")]
    assert int(events[1].object["metadata"]["resourceVersion"]) == server.resource_version
    await stream.aclose()


async def test_selector_transitions_become_added_and_deleted() -> None:
    server = ApiServer()
    await server.create("pods", pod("a"))
    stream = server.watch(
        "pods", label_selector="team=gpu", resource_version=str(server.resource_version)
    )
    await server.patch("pods", "a", {"metadata": {"labels": {"team": "gpu"}}}, namespace="default")
    await server.patch("pods", "a", {"metadata": {"annotations": {"x": "1"}}}, namespace="default")
    await server.patch("pods", "a", {"metadata": {"labels": {"team": None}}}, namespace="default")
    assert summary(await take(stream, 3)) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    await stream.aclose()


async def test_node_pinned_watchers_get_only_their_pods() -> None:
    server = ApiServer()
    streams = {
        node: server.watch("pods", field_selector=f"spec.nodeName={node}", resource_version="1")
        for node in ("n1", "n2")
    }
    for name, node in (("a", "n1"), ("b", "n2"), ("c", "n1")):
        await server.create("pods", pod(name))
        await server.bind("default", name, node)
    got_n1 = await take(streams["n1"], 2)
    got_n2 = await take(streams["n2"], 1)
    assert summary(got_n1) == [("ADDED", "a"), ("ADDED", "c")]
    assert summary(got_n2) == [("ADDED", "b")]
    assert got_n1[0].object["spec"]["nodeName"] == "n1"
    for stream in streams.values():
        await stream.aclose()


async def test_history_eviction_and_compaction_give_410() -> None:
    server = ApiServer(history=2)
    first = await server.create("pods", pod("a"))
    for i in range(3):
        await server.patch(
            "pods", "a", {"metadata": {"labels": {"i": str(i)}}}, namespace="default"
        )
    stream = server.watch("pods", resource_version=first["metadata"]["resourceVersion"])
    (event,) = await take(stream, 1)
    assert event.type == "ERROR"
    assert event.object["code"] == 410
    assert event.object["reason"] == "Expired"
    assert event.object["message"].startswith(
        f"too old resource version: {first['metadata']['resourceVersion']} ("
    )
    with pytest.raises(StopAsyncIteration):
        await anext(stream)
    recent = str(server.resource_version - 1)
    ok = server.watch("pods", resource_version=recent)
    assert summary(await take(ok, 1)) == [("MODIFIED", "a")]
    await ok.aclose()
    server.compact()
    expired = server.watch("pods", resource_version=recent)
    assert (await take(expired, 1))[0].object["code"] == 410
    current = server.watch("pods", resource_version=str(server.resource_version))
    await server.delete("pods", "a", namespace="default")
    assert summary(await take(current, 1)) == [("DELETED", "a")]
    await current.aclose()


async def test_too_large_resource_version() -> None:
    server = ApiServer()
    stream = server.watch("pods", resource_version=str(server.resource_version + 100))
    (event,) = await take(stream, 1)
    assert (event.type, event.object["code"], event.object["reason"]) == ("ERROR", 504, "Timeout")
    assert event.object["message"].startswith("Too large resource version")


async def test_slow_watcher_is_expired_not_buffered() -> None:
    server = ApiServer(watch_queue_limit=3)
    stream = server.watch("configmaps", resource_version=str(server.resource_version))
    assert server.stats()["watchers"]["configmaps"] == 1  # registered when opened
    pending = asyncio.ensure_future(anext(stream))
    for i in range(5):
        await server.create("configmaps", {"metadata": {"name": f"c{i}", "namespace": "default"}})
    async with asyncio.timeout(5):
        first = await pending
    rest = [first]
    async for event in stream:
        rest.append(event)
    # the consumer saw what it drained before falling behind, then 410
    assert rest[-1].type == "ERROR"
    assert rest[-1].object["code"] == 410
    assert server.stats()["watchers"]["configmaps"] == 0


@pytest.mark.parametrize("mode", ["close", "expire", "abort"])
async def test_drop_watches(mode: str) -> None:
    server = ApiServer()
    stream = server.watch("nodes", resource_version=str(server.resource_version))
    pending = asyncio.ensure_future(anext(stream, None))
    assert server.drop_watches("nodes", mode=mode) == 1
    async with asyncio.timeout(5):
        event = await pending
    if mode == "expire":
        assert event is not None
        assert event.type == "ERROR"
        assert event.object["code"] == 410
    else:
        assert event is None
    assert server.stats()["watchers"]["nodes"] == 0


names = st.sampled_from(["a", "b", "c"])
operations = st.lists(
    st.one_of(
        st.tuples(st.just("create"), names, st.none()),
        st.tuples(st.just("patch"), names, st.sampled_from(["1", "2", None])),
        st.tuples(st.just("delete"), names, st.none()),
        st.tuples(st.just("finalize"), names, st.none()),
    ),
    max_size=25,
)


@given(operations)
def test_watch_replay_reconstructs_state_and_versions_only_grow(
    ops: list[tuple[str, str, Any]],
) -> None:
    """Folding a watch's events over the initial state gives the store's final state; every
    successful write takes exactly the next resourceVersion; failed and no-op writes take none."""
    store = Store(seed=0)
    store.create(
        CONFIG_MAPS, {"metadata": {"name": "a", "finalizers": ["x/y"]}}, namespace="default"
    )
    watcher = Watcher(
        CONFIG_MAPS, namespace=None, labels=LabelSelector(), fields=FieldSelector(), limit=1000
    )
    watcher.replay(store.history(CONFIG_MAPS).since(0) or [])
    store.hubs[CONFIG_MAPS.key].add(watcher)
    for op, name, value in ops:
        before = store.rv
        try:
            if op == "create":
                entry = store.create(CONFIG_MAPS, {"metadata": {"name": name}}, namespace="default")
            elif op == "patch":
                entry = store.patch(CONFIG_MAPS, "default", name, MERGE, {"data": {"k": value}})
            elif op == "delete":
                entry = store.delete(CONFIG_MAPS, "default", name)
            else:
                entry = store.patch(
                    CONFIG_MAPS, "default", name, MERGE, {"metadata": {"finalizers": None}}
                )
        except StatusError:
            assert store.rv == before
            continue
        assert store.rv in (before, before + 1)
        if store.rv == before + 1:
            assert entry.rv == store.rv
    state: dict[str, dict[str, Any]] = {}
    for kind, entry in watcher.drain(max_items=10_000):
        name = entry.obj["metadata"]["name"]
        if kind == "DELETED":
            state.pop(name, None)
        else:
            state[name] = entry.obj
    stored = {e.obj["metadata"]["name"]: e.obj for e in store.select(CONFIG_MAPS).entries}
    assert state == stored
    rvs = [int(o["metadata"]["resourceVersion"]) for o in stored.values()]
    assert all(rv <= store.rv for rv in rvs)
