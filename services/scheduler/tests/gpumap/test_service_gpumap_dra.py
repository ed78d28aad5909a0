"""DRA-managed GPUs on the served map, through real sockets against the emulated API server: two
claims sharing one GPU are two holders with their pods on that card (JSON and HTML), and a
resource API that is absent (404) or forbidden (403) leaves the map serving without DRA cards,
saying why, with the scheduler ready."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from hami_kubesim import dra_objects as dra
from hami_kubesim.testing import eventually, running_apiserver

from ..service_helpers import Harness, gpus, node_object, scheduler_on
from .test_service_gpumap import get, served

pytestmark = pytest.mark.timeout(60)

NODE = "d"
NS = "default"


@contextlib.asynccontextmanager
async def mapped(*, refuse: int | None = None) -> AsyncIterator[Harness]:
    """A served map; ``refuse``: the API server answers every ResourceSlice list with it."""
    async with running_apiserver() as sim:
        if refuse is not None:
            sim.server.inject_error("list", "resourceslices", code=refuse)
        async with (
            scheduler_on(sim, gpumap_bind_address="127.0.0.1:0") as running,
            aiohttp.ClientSession() as http,
        ):
            yield Harness(sim, running, http)


async def _claim(h: Harness, name: str, pod: str, memory: str, cores: int) -> None:
    obj = dra.resource_claim(name, dra.exact_request("gpu", capacity={"memory": memory}))
    created = await h.api.create("resourceclaims", obj)
    result = dra.allocation_result(
        "gpu", "gpu-0", pool=NODE, share_id=str(uuid.uuid4()),
        consumed={"memory": memory, "cores": cores},
    )  # fmt: skip
    created["status"] = {
        "allocation": dra.allocation([result], node=NODE),
        "reservedFor": [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}],
    }
    await h.api.update("resourceclaims", created, subresource="status")


async def _dra_doc(h: Harness, want: int) -> dict[str, Any]:
    """The map once it shows ``want`` holders on ``NODE``, every card published by the slice:
    the slices and the claims come through two watches, and a claim seen before its slice is
    shown, truthfully, on an unpublished card named by pool and device."""
    found: dict[str, Any] = {}

    async def shown() -> bool:
        _, doc, _ = await get(h, "api/v1/map")
        found.update(doc)
        nodes = [node for node in doc["nodes"] if node["name"] == NODE]
        if not nodes or not all(d["dra"]["published"] for d in nodes[0]["devices"]):
            return False
        return sum(len(d["holders"]) for d in nodes[0]["devices"]) == want

    await eventually(shown, what=f"{want} DRA holders on the map")
    return found


async def test_two_claims_sharing_a_gpu_are_two_holders_on_the_map() -> None:
    async with mapped() as h:
        await h.api.create("nodes", node_object(NODE))
        await h.add_node("n", gpus("n", 1))
        slice_ = dra.resource_slice(NODE, [dra.gpu_device(0, memory="16Gi", uuid="GPU-dra-0")])
        await h.api.create("resourceslices", slice_)
        await _claim(h, "first", "pod-a", "4Gi", 20)
        await _claim(h, "second", "pod-b", "6Gi", 0)
        doc = await _dra_doc(h, 2)
        assert doc["dra"] == {"driver": "gpu.hami.io", "watched": True, "reason": None}
        (node,) = [node for node in doc["nodes"] if node["name"] == NODE]
        (card,) = node["devices"]
        assert (card["id"], card["mode"], card["schedulable"]) == ("GPU-dra-0", "dra", False)
        assert card["memory"] == {"total": 16384, "allocated": 10240, "free": 6144}
        assert card["cores"] == {"total": 100, "allocated": 20, "free": 80}
        assert [(x["claim"], x["pods"][0]["name"], x["memory"]) for x in card["holders"]] == [
            ("first", "pod-a", 4096),
            ("second", "pod-b", 6144),
        ]
        # The extender's own figures leave the DRA card out; it has its own.
        assert doc["cluster"]["devices"] == 1
        assert doc["cluster"]["dra"]["memory"]["free"] == 6144
        _, page, _ = await get(h, "", node=NODE)
        assert "GPU-dra-0" in page
        assert "DRA (kube-scheduler)" in page
        assert "default/first → pod-a" in page
        # A claim released (its pod gone, deallocated) leaves the card.
        await h.api.delete("resourceclaims", "first", namespace=NS)
        doc = await _dra_doc(h, 1)


@pytest.mark.parametrize(("code", "words"), [(404, "does not serve"), (403, "forbidden")])
async def test_a_resource_api_absent_or_forbidden_leaves_the_map_without_dra(
    code: int, words: str
) -> None:
    async with mapped(refuse=code) as h:
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        assert h.scheduler.watcher.ready()
        dra_watch = served(h).dra
        assert dra_watch is not None
        await eventually(lambda: dra_watch.refused is not None, what="the refusal seen")
        status, doc, _ = await get(h, "api/v1/map")
        assert status == 200
        assert doc["dra"]["watched"] is False
        assert words in doc["dra"]["reason"]
        assert str(code) in doc["dra"]["reason"]
        assert [node["name"] for node in doc["nodes"]] == ["n"]
        _, page, _ = await get(h, "")
        assert "DRA GPUs not shown" in page
