"""The GPU map through its own port against the emulated API server: the map matches the
allocations, a pending pod's verdict is kept while it is pending and dropped on bind, the fit
probe answers without touching the cache, and the server is read-only with bounded input."""

from __future__ import annotations

import base64
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hami_kubesim.testing import eventually, running_apiserver
from hami_scheduler.gpumap.parts import RunningGpuMap
from hami_scheduler.settings import LeaderElectSettings

from ..service_helpers import (
    Harness,
    container,
    gpu_limits,
    gpus,
    harness,
    metric,
    pod_object,
    scheduler_on,
)

pytestmark = pytest.mark.timeout(60)


def served(h: Harness) -> RunningGpuMap:
    gpumap = h.scheduler.gpumap
    assert gpumap is not None
    return gpumap


async def get(h: Harness, path: str, **params: str) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with h.http.get(f"{served(h).url()}/{path}", params=params) as response:
        body = await response.read()
        kind = response.headers.get("Content-Type", "")
        parsed = json.loads(body) if kind.startswith("application/json") else body.decode()
        return response.status, parsed, response


@contextlib.asynccontextmanager
async def mapped(**overrides: Any) -> AsyncIterator[Harness]:
    async with harness(gpumap_bind_address="127.0.0.1:0", **overrides) as h:
        await h.add_node("n", gpus("n", 2, mem=8000))
        await h.add_node("m", gpus("m", 1, mem=16000, model="NVIDIA-A100"))
        await h.synced_node("n")
        await h.synced_node("m")
        await eventually(lambda: served(h).watch.has_synced, what="pending watch listed")
        yield h


def manifest(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


async def test_map_shows_each_card_with_the_pods_holding_it() -> None:
    async with mapped() as h:
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=3000, cores=30))))
        reply = await h.schedule(pod, ["n"])
        assert reply["NodeNames"] == ["n"]
        uid = pod["metadata"]["uid"]
        await eventually(lambda: h.scheduler.cache.holding(uid) is not None, what="held")
        status, doc, _ = await get(h, "api/v1/map")
        assert status == 200
        assert doc["apiVersion"] == "gpumap.hami.io/v1"
        assert doc["kind"] == "GpuMap"
        nodes = {node["name"]: node for node in doc["nodes"]}
        assert set(nodes) == {"m", "n"}
        cards = {card["id"]: card for card in nodes["n"]["devices"]}
        (granted,) = h.granted("p", "NVIDIA")
        held = cards[granted]
        assert [(x["namespace"], x["pod"], x["memory"], x["cores"]) for x in held["holders"]] == [
            ("default", "p", 3000, 30)
        ]
        assert held["holders"][0]["uid"] == uid
        assert held["memory"] == {"total": 8000, "allocated": 3000, "free": 5000}
        assert held["shares"] == {"total": 10, "used": 1}
        other = next(card for card in cards.values() if card["id"] != granted)
        assert other["holders"] == []
        assert nodes["n"]["free"] == {
            "memory": 5000 + 8000,
            "largestMemory": 8000,
            "cores": 70 + 100,
            "largestCores": 100,
        }
        cluster = doc["cluster"]
        assert cluster["nodes"] == 2
        assert cluster["devices"] == 3
        assert cluster["memory"] == {
            "total": 32000,
            "allocated": 3000,
            "free": 29000,
            "largestFree": 16000,
        }
        # Filters and paging are the server's.
        _, only_a100, _ = await get(h, "api/v1/map", vendor="a100")
        assert [node["name"] for node in only_a100["nodes"]] == ["m"]
        assert only_a100["cluster"]["devices"] == 1
        _, paged, _ = await get(h, "api/v1/map", perPage="1", page="2")
        assert [node["name"] for node in paged["nodes"]] == ["n"]
        assert paged["page"] == {"page": 2, "perPage": 1, "total": 2, "pages": 2}


async def test_pending_verdict_is_kept_while_pending_and_dropped_on_bind() -> None:
    async with mapped() as h:
        big = await h.add_pod(pod_object("big", container(limits=gpu_limits(1, mem=20000))))
        reply = await h.filter(big, ["n", "m"])
        assert not reply["NodeNames"]
        _, doc, _ = await get(h, "api/v1/pending")
        assert doc["kind"] == "PendingGpuPods"
        assert doc["verdicts"]["recordedHere"] is True
        (item,) = doc["items"]
        assert (item["namespace"], item["name"]) == ("default", "big")
        assert item["request"]["containers"][0]["memory"] == 20000
        verdict = item["verdict"]
        assert (verdict["nodes"], verdict["fitting"], verdict["chosen"]) == (2, 0, None)
        assert verdict["reasons"] == [
            {"reason": "CardInsufficientMemory", "nodes": 2, "examples": ["n", "m"]}
        ]
        assert item["policy"] == {"node": "binpack", "gpu": "spread"}
        # A pod that fits: its verdict is kept until it is bound, then dropped with it.
        small = await h.add_pod(pod_object("small", container(limits=gpu_limits(1, mem=1000))))
        uid = small["metadata"]["uid"]
        assert (await h.filter(small, ["n", "m"]))["NodeNames"]
        verdicts = served(h).verdicts
        kept = verdicts.get(uid)
        assert kept is not None
        assert (kept.fitting, kept.nodes) == (2, 2)
        _, doc, _ = await get(h, "api/v1/pending")
        assert {i["name"] for i in doc["items"]} == {"big", "small"}
        assert doc["items"][0]["name"] == "big"  # the longest wait first
        node = (await h.filter(small, ["n", "m"]))["NodeNames"][0]
        assert await h.bind(small, node) == ""
        await eventually(lambda: verdicts.get(uid) is None, what="verdict dropped on bind")
        _, doc, _ = await get(h, "api/v1/pending")
        assert [i["name"] for i in doc["items"]] == ["big"]
        # Deleted: gone too.
        big_uid = big["metadata"]["uid"]
        await h.api.delete("pods", "big", namespace="default")
        await eventually(lambda: verdicts.get(big_uid) is None, what="verdict dropped on delete")


async def test_pending_shows_kubernetes_side_causes_apart() -> None:
    async with mapped() as h:
        gated = pod_object("gated", container(limits=gpu_limits(1)))
        gated["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
        await h.add_pod(gated)
        await h.add_pod(
            pod_object("elsewhere", container(limits=gpu_limits(1)), scheduler="default-scheduler")
        )
        await h.add_pod(pod_object("cpu-only", container()))
        await eventually(lambda: len(served(h).pending.pods) == 2, what="the two GPU pods pending")
        _, doc, _ = await get(h, "api/v1/pending")
        causes = {item["name"]: item["kubernetes"] for item in doc["items"]}
        assert causes["gated"]["reason"] == "SchedulingGated"
        assert "example.com/quota" in causes["gated"]["message"]
        assert causes["elsewhere"]["reason"] == "NotThisScheduler"
        assert all(item["verdict"] is None for item in doc["items"])
        _, only, _ = await get(h, "api/v1/pending", namespace="other")
        assert only["items"] == []


async def test_fit_probe_answers_without_touching_the_cache() -> None:
    async with mapped() as h:
        cache = h.scheduler.cache
        before = dict(cache.nodes)
        status, doc, _ = await get(h, "api/v1/fit", gpus="1", memory="12000")
        assert status == 200
        assert doc["kind"] == "FitProbe"
        assert doc["fits"] is True
        (placement,) = doc["placements"]
        assert placement["node"] == "m"
        assert placement["devices"] == [
            {
                "id": "GPU-m-0",
                "vendor": "NVIDIA",
                "type": "NVIDIA-A100",
                "memory": 12000,
                "cores": 0,
            }
        ]
        _, doc, _ = await get(h, "api/v1/fit", gpus="1", memory="4000", type="T4")
        assert [p["node"] for p in doc["placements"]] == ["n"]
        _, doc, _ = await get(h, "api/v1/fit", gpus="1", memory="30000")
        assert doc["fits"] is False
        assert doc["placements"] == []
        assert doc["binding"] == {"reason": "CardInsufficientMemory", "nodes": 2}
        pod = (
            "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n"
            "  - name: a\n    resources: {limits: {nvidia.com/gpu: 2, nvidia.com/gpumem: 100}}\n"
        )
        _, doc, _ = await get(h, "api/v1/fit", manifest=manifest(pod))
        assert [p["node"] for p in doc["placements"]] == ["n"]
        # A dry run: the same node versions, nothing assumed, no pod written.
        assert all(cache.nodes[name] is usage for name, usage in before.items())
        assert cache.assumed_count() == 0
        assert h.api.list("pods") == []
        assert len(served(h).verdicts) == 0


async def test_bad_input_is_a_clear_400() -> None:
    async with mapped() as h:
        status, doc, _ = await get(h, "api/v1/fit", manifest="%%%not-base64")
        assert (status, doc) == (
            400,
            {"error": "manifest: not base64url (RFC 4648 §5, padding optional)"},
        )
        status, doc, _ = await get(h, "api/v1/fit", manifest=manifest("spec: [1,\n  {"))
        assert status == 400
        assert doc["error"].startswith("manifest: not YAML or JSON at line")
        status, doc, _ = await get(h, "api/v1/fit", manifest=manifest("kind: ConfigMap"))
        assert status == 400
        assert "not a Pod" in doc["error"]
        status, doc, _ = await get(h, "api/v1/fit", manifest=manifest("x" * 70_000))
        assert status == 400
        assert "64" in doc["error"] or "65536" in doc["error"]
        status, doc, _ = await get(h, "api/v1/fit", gpus="two")
        assert (status, doc) == (400, {"error": "gpus: not a whole number: 'two'"})
        status, doc, _ = await get(h, "api/v1/map", perPage="100000")
        assert status == 400
        status, page, response = await get(h, "fit", gpus="-1")
        assert status == 400
        assert response.headers["Content-Type"].startswith("text/html")
        assert "gpus" in page


async def test_read_only_with_security_headers() -> None:
    async with mapped(gpumap_frame_ancestors="'self' https://portal.example.com") as h:
        url = served(h).url()
        for path in ("api/v1/map", "api/v1/fit", "", "nowhere"):
            async with h.http.post(f"{url}/{path}", data=b"{}") as response:
                assert response.status == 405
                assert response.headers["Allow"] == "GET, HEAD"
        status, page, response = await get(h, "")
        assert status == 200
        assert response.headers["Content-Type"].startswith("text/html")
        policy = response.headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy
        assert policy.endswith("frame-ancestors 'self' https://portal.example.com")
        assert "X-Frame-Options" not in response.headers
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Cache-Control"] == "no-store"
        assert "GPU-n-0" in page
        status, form, _ = await get(h, "fit")
        assert status == 200
        assert 'action="./fit"' in form
        assert "Fill in a request or paste a manifest" in form
        async with h.http.head(f"{url}/api/v1/map") as response:
            assert response.status == 200
        long_query = "x" * (97 * 1024)
        async with h.http.get(f"{url}/api/v1/map?q={long_query}") as response:
            assert response.status == 414
        assert (
            metric(
                h,
                "hami_scheduler_gpumap_request_duration_seconds_count",
                view="map",
                format="json",
                code="200",
            )
            >= 1
        )


async def test_a_follower_answers_and_says_it_keeps_no_verdicts() -> None:
    async with running_apiserver() as sim:
        await sim.server.create(
            "leases",
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"namespace": "kube-system", "name": "hami-scheduler"},
                "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600},
            },
        )
        election = LeaderElectSettings(enabled=True, mode="follow", identity="me")
        async with (
            scheduler_on(sim, leader=election, gpumap_bind_address="127.0.0.1:0") as running,
            aiohttp.ClientSession() as http,
        ):
            h = Harness(sim, running, http)
            await h.add_node("n", gpus("n", 1))
            await h.synced_node("n")
            await h.add_pod(pod_object("p", container(limits=gpu_limits(1))))
            await eventually(lambda: len(served(h).pending.pods) == 1, what="pending seen")
            _, doc, _ = await get(h, "api/v1/pending")
            assert doc["answeredBy"] == "me"
            assert doc["answeredByLeader"] is False
            assert doc["verdicts"]["recordedHere"] is False
            assert "someone-else" in doc["verdicts"]["note"]
            assert [item["name"] for item in doc["items"]] == ["p"]
            _, fit, _ = await get(h, "api/v1/fit", gpus="1")
            assert fit["fits"] is True
