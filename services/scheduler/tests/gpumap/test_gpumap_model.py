"""The GPU map's pure builders: free-capacity summaries, the map document over a cache fed by
hand, reason grouping, paging, the verdict store's bound and the fit probe's request parsing."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.node.registry import encode_node_devices_json
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import DeviceUsage
from hami_scheduler.gpumap.fit import binding_dimension, pod_from_manifest, pod_from_parameters
from hami_scheduler.gpumap.model import MapQuery, map_document
from hami_scheduler.gpumap.query import Page, QueryError, page_of
from hami_scheduler.gpumap.summary import add, card_free, summarise
from hami_scheduler.gpumap.verdicts import Verdict, Verdicts, group_reasons, kubernetes_causes

from ..service_helpers import gpus, node_object, pod_object, register_annotations

NOW = datetime(2026, 1, 1, tzinfo=UTC)
REPLICA = {"leader": "me", "answeredBy": "me", "answeredByLeader": True}


def card(
    total: int = 8000, used_mem: int = 0, *, used: int = 0, count: int = 10, health: bool = True
) -> DeviceUsage:
    return DeviceUsage(
        uuid=f"GPU-{total}-{used_mem}-{used}",
        vendor="NVIDIA",
        type="T4",
        index=0,
        numa=0,
        mode="hami-core",
        health=health,
        count=count,
        totalmem=total,
        totalcore=100,
        used=used,
        usedmem=used_mem,
        usedcores=0,
    )


cards = st.builds(
    lambda total, share, used, count, health: card(
        total, total * share // 100, used=min(used, count), count=count, health=health
    ),
    st.integers(1, 80_000),
    st.integers(0, 100),
    st.integers(0, 10),
    st.integers(1, 10),
    st.booleans(),
)


@given(st.lists(cards, max_size=16))
def test_largest_piece_never_exceeds_the_total(devices: list[DeviceUsage]) -> None:
    summary = summarise(devices, frozenset())
    assert summary.largest_memory <= summary.free_memory
    assert summary.free_memory <= summary.total_memory - summary.allocated_memory
    assert summary.largest_cores <= summary.free_cores <= summary.total_cores
    frees = [card_free(device, False)[0] for device in devices]
    assert summary.largest_memory == max(frees, default=0)
    assert summary.fragmented == (
        summary.reference > 0 and summary.free_memory >= summary.reference > max(frees, default=0)
    )


@given(st.lists(st.lists(cards, max_size=4), max_size=6))
def test_cluster_is_the_sum_of_its_nodes(nodes: list[list[DeviceUsage]]) -> None:
    parts = [summarise(devices, frozenset()) for devices in nodes]
    whole = add(parts)
    assert whole == summarise([d for devices in nodes for d in devices], frozenset())


def test_full_unhealthy_or_cordoned_cards_have_nothing_free() -> None:
    assert card_free(card(8000, 1000, used=10, count=10), False) == (0, 0)
    assert card_free(card(8000, 1000, health=False), False) == (0, 0)
    assert card_free(card(8000, 1000), True) == (0, 0)
    assert card_free(card(8000, 1000, used=1), False) == (7000, 100)
    # 3 × 3000 free on 12000 cards: 9000 in total would hold 3000, and so does one card.
    assert not summarise([card(12000, 9000), card(12000, 9001)], frozenset()).fragmented
    # 2 × 2000 free on 12000 cards: 4000 in total, no card holds the 3000 reference.
    split = summarise([card(12000, 10000), card(12000, 10000, used=1)], frozenset())
    assert (split.free_memory, split.largest_memory, split.reference) == (4000, 2000, 3000)
    assert split.fragmented


def allocation(*grants: tuple[str, int, int]) -> str:
    return encode_pod_devices(
        ((tuple(ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid, mem, cores in grants)),)
    )


def placed(name: str, node: str, allocated: str) -> dict[str, Any]:
    pod = pod_object(
        name, annotations={keys.VGPU_NODE: node, keys.NVIDIA_DEVICES_ALLOCATED: allocated}
    )
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["spec"]["nodeName"] = node
    return pod


def fed(*pods: dict[str, Any], extra: dict[str, str] | None = None) -> SchedulerCache:
    cache = SchedulerCache(DEFAULT_VENDORS, now=lambda: NOW)
    cache.upsert_node(node_object("n", {**register_annotations(gpus("n", 2)), **(extra or {})}))
    for pod in pods:
        cache.upsert_pod(pod)
    return cache


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {device["id"]: device for node in doc["nodes"] for device in node["devices"]}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(1, 1300), st.integers(0, 16)), max_size=6))
def test_holders_add_up_to_what_each_card_has_allocated(grants: list[tuple[int, int, int]]) -> None:
    # At most 6 grants of ≤ 1300 MiB and ≤ 16 cores: what a scheduler could have placed.
    pods = [
        placed(f"p{i}", "n", allocation((f"GPU-n-{index}", mem, cores)))
        for i, (index, mem, cores) in enumerate(grants)
    ]
    doc = map_document(fed(*pods), MapQuery(), now=NOW, replica=REPLICA)
    for device in by_id(doc).values():
        holders = device["holders"]
        assert sum(h["memory"] for h in holders) == device["memory"]["allocated"]
        assert sum(h["cores"] for h in holders) == device["cores"]["allocated"]
        assert device["memory"]["allocated"] <= device["memory"]["total"]
        assert all(h["container"] == "0" for h in holders)
    assert doc["cluster"]["memory"]["allocated"] == sum(mem for _, mem, _ in grants)


def test_every_vendor_is_shown_unknown_ones_raw() -> None:
    foreign = encode_node_devices_json(gpus("x", 1, model="Foo-9"))
    cache = fed(
        extra={
            "hami.io/node-foo-register": foreign.replace("GPU-x-0", "FOO-0"),
            "hami.io/node-bar-register": "not a registration",
            "hami.io/node-dcu-register": "[broken",
        }
    )
    doc = map_document(cache, MapQuery(), now=NOW, replica=REPLICA)
    (node,) = doc["nodes"]
    devices = by_id(doc)
    assert devices["FOO-0"]["vendor"] == "foo"
    assert devices["FOO-0"]["raw"]["key"] == "hami.io/node-foo-register"
    assert devices["FOO-0"]["schedulable"] is False
    assert devices["GPU-n-0"]["schedulable"] is True
    unreadable = {entry["key"]: entry for entry in node["unreadable"]}
    assert unreadable["hami.io/node-bar-register"]["value"] == "not a registration"
    assert unreadable["hami.io/node-dcu-register"]["vendor"] == "DCU"
    assert node["health"] == "Unhealthy"
    assert node["problems"]
    # Filtered to the unknown vendor, the node still shows it.
    doc = map_document(cache, MapQuery(vendor="foo"), now=NOW, replica=REPLICA)
    assert [d["id"] for d in doc["nodes"][0]["devices"]] == ["FOO-0"]


def test_nodes_without_devices_are_left_out_and_paging_is_stable() -> None:
    cache = fed()
    cache.upsert_node(node_object("cpu-only"))
    for name in ("b", "a", "c"):
        cache.upsert_node(node_object(name, register_annotations(gpus(name, 1))))
    doc = map_document(cache, MapQuery(page=Page(2, 2)), now=NOW, replica=REPLICA)
    assert [node["name"] for node in doc["nodes"]] == ["c", "n"]
    assert doc["page"] == {"page": 2, "perPage": 2, "total": 4, "pages": 2}
    assert doc["cluster"]["nodes"] == 4


@given(st.integers(0, 60), st.integers(1, 9), st.integers(1, 12))
def test_pages_cover_every_item_once(total: int, per_page: int, page: int) -> None:
    items = list(range(total))
    shown, info = page_of(items, Page(page, per_page))
    assert info["pages"] == max(-(-total // per_page), 1)
    assert list(shown) == items[(page - 1) * per_page : page * per_page]


def test_reasons_grouped_by_word_with_examples() -> None:
    failed = {f"n{i}": "1/2 CardInsufficientMemory, 1/2 CardTypeMismatch" for i in range(7)}
    failed |= {"m0": "2/2 CardInsufficientMemory", "x": "node unregistered"}
    groups = group_reasons(failed)
    assert [(g.reason, g.nodes) for g in groups] == [
        ("CardInsufficientMemory", 8),
        ("CardTypeMismatch", 7),
        ("node unregistered", 1),
    ]
    assert groups[0].examples == ("n0", "n1", "n2", "n3", "n4")
    assert groups[2].examples == ("x",)


words = st.sampled_from(["CardInsufficientMemory", "CardInsufficientCore", "CardTypeMismatch"])


@given(st.dictionaries(st.text("abc", min_size=1, max_size=4), st.lists(words, min_size=1)))
def test_each_word_counts_the_nodes_naming_it(raw: dict[str, list[str]]) -> None:
    failed = {node: ", ".join(f"1/3 {w}" for w in sorted(set(ws))) for node, ws in raw.items()}
    for group in group_reasons(failed):
        naming = {node for node, ws in raw.items() if group.reason in ws}
        assert group.nodes == len(naming)
        assert set(group.examples) <= naming
        assert len(group.examples) == min(5, len(naming))


def test_verdicts_are_bounded_and_dropped() -> None:
    store = Verdicts(capacity=2)
    verdict = Verdict("ns", "p", 0.0, 1, 0, None, ())
    for uid in ("a", "b", "c"):
        store.record(uid, verdict)
    assert (store.get("a"), len(store)) == (None, 2)
    store.pod_event({"metadata": {"uid": "b"}}, deleted=False)
    assert store.get("b") is None
    assert store.get("c") is verdict


def test_fit_parameters_become_the_vendors_own_resources() -> None:
    pod = pod_from_parameters(
        {"gpus": "2", "memory": "4000", "cores": "30", "type": "A100,H100"}, DEFAULT_VENDORS
    )
    (ctr,) = pod["spec"]["containers"]
    assert ctr["resources"]["limits"] == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem": "4000",
        "nvidia.com/gpucores": "30",
    }
    assert pod["metadata"]["annotations"] == {"nvidia.com/use-gputype": "A100,H100"}
    with pytest.raises(QueryError, match="vendor: 'Nope'"):
        pod_from_parameters({"vendor": "Nope"}, DEFAULT_VENDORS)
    with pytest.raises(QueryError, match="memoryPercentage: must be between 1 and 100"):
        pod_from_parameters({"memoryPercentage": "101"}, DEFAULT_VENDORS)


def encoded(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode()


def test_manifests_of_workloads_give_their_pod_template() -> None:
    template = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c"}]}}
    deployment = {
        "kind": "Deployment",
        "metadata": {"namespace": "t"},
        "spec": {"template": template},
    }
    pod = pod_from_manifest(encoded(deployment))
    assert (pod["kind"], pod["metadata"]["namespace"]) == ("Pod", "t")
    cron = {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": template}}}}
    assert pod_from_manifest(encoded(cron))["spec"]["containers"] == [{"name": "c"}]
    with pytest.raises(QueryError, match=r"spec\.containers is missing"):
        pod_from_manifest(encoded({"kind": "Pod", "spec": {}}))
    with pytest.raises(QueryError, match="not an object"):
        pod_from_manifest(encoded([1, 2]))


def test_kubernetes_causes_leave_out_what_the_gpu_scheduler_said() -> None:
    message = (
        "0/5 nodes are available: 1 Insufficient cpu, 2 1/2 CardInsufficientMemory, "
        "1/2 NumaNotFit, 1 node(s) had untolerated taint {gpu: bad}. preemption: 0/5 nodes are "
        "available: 5 Preemption is not helpful for scheduling."
    )
    causes, preemption = kubernetes_causes(
        message, ["1/2 CardInsufficientMemory, 1/2 NumaNotFit", "unused text"]
    )
    assert causes == ["1 Insufficient cpu", "1 node(s) had untolerated taint {gpu: bad}"]
    assert preemption == "0/5 nodes are available: 5 Preemption is not helpful for scheduling"


def test_kubernetes_causes_are_empty_when_every_node_failed_in_the_gpu_scheduler() -> None:
    message = "0/2 nodes are available: 2 2/2 CardInsufficientMemory."
    assert kubernetes_causes(message, ["2/2 CardInsufficientMemory"]) == ([], "")
    assert kubernetes_causes("binding rejected: boom", []) == (["binding rejected: boom"], "")


def test_the_binding_dimension_is_told_by_nodes_that_have_the_devices() -> None:
    reasons = group_reasons(
        {"npu-1": "NodeInsufficientDevice", "npu-2": "NodeInsufficientDevice",
         "gpu-1": "1/2 CardInsufficientMemory"}
    )  # fmt: skip
    assert binding_dimension(reasons) == {"reason": "CardInsufficientMemory", "nodes": 1}
    alone = group_reasons({"npu-1": "NodeInsufficientDevice"})
    assert binding_dimension(alone) == {"reason": "NodeInsufficientDevice", "nodes": 1}
    assert binding_dimension(()) is None
