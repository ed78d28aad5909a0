"""DRA-managed GPUs on the map (pure): slices and allocated claims read and joined into cards
with one holder per claim, and the map document showing them apart from the extender's own."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_kubesim import dra_objects as dra
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.gpumap.dra.join import DraView, join
from hami_scheduler.gpumap.dra.read import read_claim, read_slice
from hami_scheduler.gpumap.model import MapQuery, map_document
from hami_scheduler.gpumap.page import render_page
from hami_scheduler.settings import parse_settings

from ..service_helpers import gpus, node_object, register_annotations

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REPLICA = {"leader": "me", "answeredBy": "me", "answeredByLeader": True}
GIB = 1024


def claim(
    name: str,
    node: str,
    *results: dict[str, Any],
    pods: tuple[str, ...] = (),
    namespace: str = "ns",
) -> dict[str, Any]:
    obj = dra.resource_claim(name, namespace=namespace)
    obj["metadata"]["uid"] = f"uid-{name}"
    reserved = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"} for pod in pods]
    obj["status"] = {"allocation": dra.allocation(results, node=node), "reservedFor": reserved}
    return obj


def share(device: str, memory: str, cores: int = 0, *, pool: str = "d", req: str = "gpu") -> Any:
    return dra.allocation_result(
        req, device, pool=pool, share_id=f"share-{device}-{memory}-{cores}-{req}",
        consumed={"memory": memory, "cores": cores},
    )  # fmt: skip


def joined(slices: list[dict[str, Any]], claims: list[dict[str, Any]]) -> DraView:
    read = [facts for facts in map(read_slice, slices) if facts is not None]
    held = [facts for facts in map(read_claim, claims) if facts is not None]
    return DraView(True, None, join(read, held))


def test_two_claims_sharing_a_gpu_are_two_holders_with_their_pods() -> None:
    slices = [dra.resource_slice("d", [dra.gpu_device(0, memory="16Gi", uuid="GPU-d-0")])]
    claims = [
        claim("a", "d", share("gpu-0", "4Gi", 30), pods=("pa",)),
        claim("b", "d", share("gpu-0", "6Gi"), pods=("pb", "pb2")),
    ]
    (card,) = joined(slices, claims).by_node["d"].cards
    assert (card.device.uuid, card.device.model, card.device.index) == ("GPU-d-0", "NVIDIA-A100", 0)
    assert (card.device.memory, card.device.cores, card.device.shared) == (16 * GIB, 100, True)
    assert [(h.claim, [p.name for p in h.pods], h.memory, h.cores) for h in card.holders] == [
        ("a", ["pa"], 4 * GIB, 30),
        ("b", ["pb", "pb2"], 6 * GIB, 0),
    ]
    assert (card.allocated_memory, card.free_memory) == (10 * GIB, 6 * GIB)
    assert (card.allocated_cores, card.free_cores) == (30, 70)


def test_a_result_without_a_share_holds_the_whole_device() -> None:
    slices = [dra.resource_slice("d", [dra.gpu_device(0, shared=False), dra.gpu_device(1)])]
    whole = dra.allocation_result("gpu", "gpu-0", pool="d")
    admin = {**share("gpu-1", "2Gi"), "adminAccess": True}
    claims = [claim("x", "d", whole, pods=("p",)), claim("watcher", "d", admin)]
    exclusive, watched = joined(slices, claims).by_node["d"].cards
    (holder,) = exclusive.holders
    assert (holder.memory, holder.cores, holder.whole) == (16 * GIB, 100, True)
    assert (exclusive.free_memory, exclusive.free_cores) == (0, 0)
    (admin_holder,) = watched.holders
    assert admin_holder.admin
    assert (admin_holder.memory, admin_holder.cores) == (0, 0)
    assert watched.free_memory == 16 * GIB


def test_a_device_no_slice_publishes_keeps_its_holders() -> None:
    # The GPU left the slice (unhealthy) while a claim still holds it: shown, not hidden.
    slices = [dra.resource_slice("d", [dra.gpu_device(0)])]
    claims = [claim("gone", "d", share("gpu-3", "1Gi"), pods=("p",))]
    cards = joined(slices, claims).by_node["d"].cards
    assert [(c.device.name, c.published, c.generation) for c in cards] == [
        ("gpu-0", True, 1), ("gpu-3", False, None),
    ]  # fmt: skip
    assert cards[1].holders[0].claim == "gone"


def test_only_the_newest_pool_generation_and_this_driver_count() -> None:
    old = dra.resource_slice("d", [dra.gpu_device(0, memory="8Gi")], name="old", generation=1)
    new = dra.resource_slice("d", [dra.gpu_device(0, memory="16Gi")], name="new", generation=2)
    other = dra.resource_slice("d", [dra.gpu_device(5)], driver="gpu.example.com", name="x")
    assert read_slice(other) is None
    foreign = claim("f", "d", {**share("gpu-0", "1Gi"), "driver": "gpu.example.com"})
    assert read_claim(foreign) is None
    (card,) = joined([old, new, other], [foreign]).by_node["d"].cards
    assert (card.device.memory, card.generation) == (16 * GIB, 2)


def test_two_requests_of_one_claim_on_one_card_are_one_holder() -> None:
    slices = [dra.resource_slice("d", [dra.gpu_device(0)])]
    both = claim("two", "d", share("gpu-0", "1Gi", req="a"), share("gpu-0", "2Gi", req="b"))
    (card,) = joined(slices, [both]).by_node["d"].cards
    (holder,) = card.holders
    assert (holder.requests, holder.memory) == (("a", "b"), 3 * GIB)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Slices and claims an allocator could have produced: shares within each capacity, a
    device held whole by one claim at most and then by nothing else."""
    nodes = draw(st.integers(1, 3))
    slices, claims = [], []
    for n in range(nodes):
        node = f"n{n}"
        devices = []
        for index in range(draw(st.integers(1, 3))):
            memory_gib, shared = draw(st.integers(1, 80)), draw(st.booleans())
            devices.append(dra.gpu_device(index, memory=f"{memory_gib}Gi", shared=shared))
            if not shared:
                if draw(st.booleans()):
                    whole = dra.allocation_result("gpu", f"gpu-{index}", pool=node)
                    claims.append(claim(f"{node}-{index}-whole", node, whole))
                continue
            left_mem, left_cores = memory_gib * GIB, 100
            for k in range(draw(st.integers(0, 4))):
                mem, cores = (
                    draw(st.integers(1, max(left_mem, 1))),
                    draw(st.integers(0, left_cores)),
                )
                if mem > left_mem:
                    break
                left_mem, left_cores = left_mem - mem, left_cores - cores
                result = share(f"gpu-{index}", f"{mem}Mi", cores, pool=node, req=f"r{k}")
                claims.append(claim(f"{node}-{index}-{k}", node, result, pods=(f"p{k}",)))
        slices.append(dra.resource_slice(node, devices))
    return slices, claims


@settings(max_examples=60, deadline=None)
@given(clusters())
def test_every_result_is_one_holder_and_shares_stay_within_capacity(
    drawn: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    slices, claims = drawn
    view = joined(slices, claims)
    seen: Counter[tuple[str, str, str]] = Counter()
    for node in view.by_node.values():
        for card in node.cards:
            assert card.allocated_memory == sum(h.memory for h in card.holders)
            assert card.allocated_memory <= card.device.memory
            assert card.allocated_cores <= card.device.cores
            assert card.free_memory + card.allocated_memory == card.device.memory
            for holder in card.holders:
                for request in holder.requests:
                    seen[(holder.uid, card.device.name, request)] += 1
    expected = Counter(
        (claim["metadata"]["uid"], result["device"], result["request"])
        for claim in claims
        for result in claim["status"]["allocation"]["devices"]["results"]
    )
    assert seen == expected


def _cache_with_a_hami_node() -> SchedulerCache:
    cache = SchedulerCache(DEFAULT_VENDORS, now=lambda: NOW)
    cache.upsert_node(node_object("n", register_annotations(gpus("n", 1, mem=8000))))
    cache.upsert_node(node_object("d"))  # the DRA node: no register annotation
    return cache


def test_the_map_shows_dra_cards_apart_from_the_extenders_figures() -> None:
    slices = [
        dra.resource_slice("d", [dra.gpu_device(0, memory="16Gi", uuid="GPU-d-0")]),
        dra.resource_slice("e", [dra.gpu_device(0, memory="8Gi", uuid="GPU-e-0")]),
    ]
    claims = [claim("a", "d", share("gpu-0", "4Gi", 25), pods=("pa",))]
    view = joined(slices, claims)
    cache = _cache_with_a_hami_node()
    doc = map_document(cache, MapQuery(), now=NOW, replica=REPLICA, dra=view)
    assert doc["dra"] == {"driver": "gpu.hami.io", "watched": True, "reason": None}
    nodes = {node["name"]: node for node in doc["nodes"]}
    # "e" is not in the cache at all (not seen, or outside the label selector): still shown.
    assert list(nodes) == ["d", "e", "n"]
    (card,) = nodes["d"]["devices"]
    assert (card["id"], card["mode"], card["schedulable"], card["type"]) == (
        "GPU-d-0", "dra", False, "NVIDIA-A100",
    )  # fmt: skip
    assert card["memory"] == {"total": 16384, "allocated": 4096, "free": 12288}
    assert card["cores"] == {"total": 100, "allocated": 25, "free": 75}
    (holder,) = card["holders"]
    assert (holder["namespace"], holder["claim"], holder["pod"]) == ("ns", "a", "pa")
    assert holder["pods"] == [{"name": "pa", "uid": "uid-pa"}]
    assert card["dra"]["pool"] == "d"
    assert nodes["d"]["health"] == "Healthy"
    assert nodes["d"]["dra"]["memory"]["free"] == 12288
    assert nodes["d"]["free"]["memory"] == 0  # the extender cannot place on it
    cluster = doc["cluster"]
    assert (cluster["nodes"], cluster["devices"], cluster["memory"]["total"]) == (3, 1, 8000)
    assert cluster["dra"]["devices"] == 2
    assert cluster["dra"]["memory"] == {
        "total": 24576, "allocated": 4096, "free": 20480, "largestFree": 12288,
    }  # fmt: skip


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _node_texts(doc: dict[str, Any]) -> dict[str, str]:
    """Each node section's text as a reader sees it (tags dropped, blanks collapsed)."""
    parser = _Text()
    parser.feed(render_page("map", doc, {}))
    text = " ".join("".join(parser.parts).split())
    sections = text.split("Node ")[1:]
    return {section.split(" ", 1)[0]: section for section in sections}


def test_a_dra_only_node_says_its_gpus_come_from_a_resource_slice() -> None:
    slices = [dra.resource_slice("d", [dra.gpu_device(0, uuid="GPU-d-0")], generation=3)]
    doc = map_document(
        _cache_with_a_hami_node(), MapQuery(), now=NOW, replica=REPLICA, dra=joined(slices, [])
    )
    nodes = {node["name"]: node for node in doc["nodes"]}
    assert nodes["d"]["dra"]["pools"] == [{"pool": "d", "generation": 3}]
    assert nodes["d"]["devices"][0]["dra"]["generation"] == 3
    texts = _node_texts(doc)
    assert "GPUs published by ResourceSlice (DRA), pool d generation 3." in texts["d"]
    assert "registration" not in texts["d"]
    # The extender's free figures would read "0 MiB free" on a node it places nothing on.
    assert "Free memory" not in texts["d"]
    assert "DRA cards (placed by kube-scheduler): free 16,384 MiB of 16,384 MiB" in texts["d"]
    assert "Last registration" in texts["n"]  # a HAMi node keeps its registration time
    assert "Free memory" in texts["n"]
    assert "ResourceSlice" not in texts["n"]


def test_filters_apply_to_dra_cards() -> None:
    slices = [dra.resource_slice("d", [dra.gpu_device(0, model="NVIDIA-H100")])]
    view = joined(slices, [])
    cache = _cache_with_a_hami_node()

    def names(query: MapQuery) -> list[str]:
        doc = map_document(cache, query, now=NOW, replica=REPLICA, dra=view)
        return [node["name"] for node in doc["nodes"]]

    assert names(MapQuery(vendor="h100")) == ["d"]
    assert names(MapQuery(vendor="dra")) == ["d"]
    assert names(MapQuery(vendor="t4")) == ["n"]
    assert names(MapQuery(node="n")) == ["n"]
    assert names(MapQuery(node="d", vendor="h100")) == ["d"]


def test_an_unwatched_view_says_why_and_shows_no_dra_card() -> None:
    view = DraView(False, "forbidden to list resourceslices.resource.k8s.io (403)")
    doc = map_document(_cache_with_a_hami_node(), MapQuery(), now=NOW, replica=REPLICA, dra=view)
    assert doc["dra"]["watched"] is False
    assert "403" in doc["dra"]["reason"]
    assert [node["name"] for node in doc["nodes"]] == ["n"]
    assert doc["cluster"]["dra"]["devices"] == 0


def test_the_flag_defaults_on_and_turns_off() -> None:
    assert parse_settings([]).gpumap_dra is True
    assert parse_settings(["--gpumap-dra=false"]).gpumap_dra is False
    assert parse_settings([], {"HAMI_GPUMAP_DRA": "false"}).gpumap_dra is False
