"""Watch streams over HTTP: event framing, starting points, bookmarks, timeouts, in-stream
errors, dropped and compacted watches, fan-out to many watchers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch

from hami_kubesim.testing import RunningApiServer, eventually, running_apiserver

# Virtual time: the 1 s watch timeouts and 0.2 s bookmarks take no real time.
pytestmark = [pytest.mark.kubesim(bookmark_interval=0.2), pytest.mark.looptime]


@pytest.fixture
async def http(sim: RunningApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=sim.url) as session:
        yield session


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
    }


async def read_events(
    resp: aiohttp.ClientResponse, count: int | None = None
) -> list[dict[str, Any]]:
    """Events until ``count`` are read or the stream ends."""
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(10):
        while count is None or len(out) < count:
            line = await resp.content.readline()
            if not line:
                break
            out.append(json.loads(line))
    return out


async def wait_for_watchers(sim: RunningApiServer, resource: str, count: int) -> None:
    await eventually(
        lambda: sim.server.stats()["watchers"][resource] >= count,
        what=f"{count} {resource} watchers open",
    )


async def test_kubernetes_asyncio_watch_stream(sim: RunningApiServer) -> None:
    core = client.CoreV1Api(sim.api_client())
    await sim.server.create("pods", pod("a"))
    seen: list[tuple[str, str]] = []
    async with watch.Watch().stream(
        core.list_namespaced_pod, "default", timeout_seconds=2
    ) as stream:
        async for event in stream:
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 1:
                await sim.server.patch(
                    "pods", "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default"
                )
            elif len(seen) == 2:
                await sim.server.delete("pods", "a", namespace="default")
            elif len(seen) == 3:
                break
    assert seen == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]


async def test_timeout_ends_stream_cleanly_with_bookmarks(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    async with http.get(
        "/api/v1/nodes", params={"watch": "1", "timeoutSeconds": "1", "allowWatchBookmarks": "true"}
    ) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/json"
        events = await read_events(resp)
    assert events, "bookmarks expected within the timeout"
    assert {e["type"] for e in events} == {"BOOKMARK"}
    assert events[-1]["object"] == {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(sim.server.resource_version)},
    }


async def test_no_bookmarks_unless_allowed(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1/nodes", params={"watch": "true", "timeoutSeconds": "1"}) as resp:
        assert await read_events(resp) == []


async def test_expired_resource_version_is_an_error_event_in_a_200_stream(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    old = sim.server.resource_version
    await sim.server.create("nodes", {"metadata": {"name": "n"}})
    async with http.post("/_sim/compact", json={}) as resp:
        assert (await resp.json())["compactedTo"] == str(sim.server.resource_version)
    async with http.get(
        "/api/v1/nodes", params={"watch": "true", "resourceVersion": str(old)}
    ) as resp:
        assert resp.status == 200
        events = await read_events(resp)
    assert len(events) == 1
    assert events[0]["type"] == "ERROR"
    assert events[0]["object"] == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {old} ({sim.server.resource_version})",
        "reason": "Expired",
        "code": 410,
    }


async def test_forced_history_limit_over_http(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    async with http.post("/_sim/history", json={"size": 1}) as resp:
        assert resp.status == 200
    start = sim.server.resource_version
    for i in range(3):
        await sim.server.create(
            "configmaps", {"metadata": {"name": f"c{i}", "namespace": "default"}}
        )
    async with http.get(
        "/api/v1/configmaps", params={"watch": "1", "resourceVersion": str(start)}
    ) as resp:
        assert (await read_events(resp))[0]["object"]["code"] == 410


async def test_resource_version_start_and_selectors(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    await sim.server.create("pods", pod("old"))
    start = str(sim.server.resource_version)
    params = {"watch": "1", "resourceVersion": start, "fieldSelector": "spec.nodeName=n1"}
    async with http.get("/api/v1/namespaces/default/pods", params=params) as resp:
        await wait_for_watchers(sim, "pods", 1)
        await sim.server.create("pods", pod("new"))
        await sim.server.bind("default", "new", "n1")
        await sim.server.bind("default", "old", "n2")
        (event,) = await read_events(resp, 1)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["name"] == "new"
    assert event["object"]["spec"]["nodeName"] == "n1"
    async with http.get(
        "/api/v1/watch/namespaces/default/pods", params={"timeoutSeconds": "1"}
    ) as resp:
        names = sorted(e["object"]["metadata"]["name"] for e in await read_events(resp))
    assert names == ["new", "old"]


async def test_send_initial_events_ends_with_marked_bookmark(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    await sim.server.create("nodes", {"metadata": {"name": "n"}})
    params = {
        "watch": "1",
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "5",
    }
    async with http.get("/api/v1/nodes", params=params) as resp:
        added, marker = await read_events(resp, 2)
    assert added["type"] == "ADDED"
    assert added["object"]["metadata"]["name"] == "n"
    assert marker["type"] == "BOOKMARK"
    assert marker["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


@pytest.mark.parametrize("mode", ["close", "expire", "abort"])
async def test_drop_watches_over_http(
    sim: RunningApiServer, http: aiohttp.ClientSession, mode: str
) -> None:
    async with http.get(
        "/api/v1/pods", params={"watch": "1", "resourceVersion": str(sim.server.resource_version)}
    ) as resp:
        await wait_for_watchers(sim, "pods", 1)
        async with (
            aiohttp.ClientSession(base_url=sim.url) as admin,
            admin.post("/_sim/drop-watches", json={"resource": "pods", "mode": mode}) as dropped,
        ):
            assert (await dropped.json()) == {"dropped": 1}
        if mode == "abort":
            with pytest.raises(aiohttp.ClientPayloadError):
                await read_events(resp)
        else:
            events = await read_events(resp)
            assert [e["type"] for e in events] == (["ERROR"] if mode == "expire" else [])
    assert sim.server.stats()["watchers"]["pods"] == 0


async def test_fan_out_to_many_watchers(sim: RunningApiServer) -> None:
    start = str(sim.server.resource_version)
    watchers = 40
    async with aiohttp.ClientSession(base_url=sim.url) as session:
        responses = [
            await session.get("/api/v1/configmaps", params={"watch": "1", "resourceVersion": start})
            for _ in range(watchers)
        ]
        await wait_for_watchers(sim, "configmaps", watchers)
        for i in range(5):
            await sim.server.create(
                "configmaps", {"metadata": {"name": f"c{i}", "namespace": "default"}}
            )
        results = await asyncio.gather(*(read_events(r, 5) for r in responses))
        for resp in responses:
            resp.close()
    for events in results:
        assert [e["object"]["metadata"]["name"] for e in events] == [f"c{i}" for i in range(5)]
    await eventually(
        lambda: sim.server.stats()["watchers"]["configmaps"] == 0,
        what="every configmaps watcher closed",
    )


async def test_shutdown_ends_open_watches() -> None:
    async with running_apiserver() as sim, aiohttp.ClientSession(base_url=sim.url) as session:
        resp = await session.get("/api/v1/nodes", params={"watch": "1"})
        await wait_for_watchers(sim, "nodes", 1)
        sim.server.shutdown()
        assert await read_events(resp) == []
        resp.close()


async def test_table_watch_for_kubectl_get_w(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    await sim.server.create("pods", pod("a"))
    headers = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"}
    async with http.get("/api/v1/pods", params={"watch": "1"}, headers=headers) as resp:
        (first,) = await read_events(resp, 1)
        await sim.server.bind("default", "a", "n1")
        (second,) = await read_events(resp, 1)
    assert first["object"]["kind"] == "Table"
    assert [c["name"] for c in first["object"]["columnDefinitions"]][:2] == ["Name", "Ready"]
    assert first["object"]["rows"][0]["cells"][:3] == ["a", "0/1", "Pending"]
    assert second["type"] == "MODIFIED"
    assert second["object"]["columnDefinitions"] == []
    assert second["object"]["rows"][0]["cells"][6] == "n1"


async def test_a_held_client_watch_lags_until_released_and_others_do_not(
    sim: RunningApiServer,
) -> None:
    start = str(sim.server.resource_version)
    query = {"watch": "1", "resourceVersion": start}
    async with (
        aiohttp.ClientSession(base_url=sim.url, headers={"User-Agent": "slow/1.0"}) as slow,
        aiohttp.ClientSession(base_url=sim.url, headers={"User-Agent": "quick/1.0"}) as quick,
        slow.get("/api/v1/pods", params=query) as lagging,
        quick.get("/api/v1/pods", params=query) as current,
    ):
        await wait_for_watchers(sim, "pods", 2)
        assert sim.server.hold_watches("pods", "slow") == 1
        await sim.server.create("pods", pod("a"), namespace="default")
        await sim.server.create("pods", pod("b"), namespace="default")
        seen = await read_events(current, 2)
        assert [e["object"]["metadata"]["name"] for e in seen] == ["a", "b"]
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await lagging.content.readline()
        sim.server.release_watches()
        late = await read_events(lagging, 2)
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in late] == [
            ("ADDED", "a"),
            ("ADDED", "b"),
        ]
