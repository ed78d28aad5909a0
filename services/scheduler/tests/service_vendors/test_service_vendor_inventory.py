"""Each vendor's devices as the cache reads them: register annotations, or node capacity for the
vendors whose plugin registers none; bad input confined to that vendor of that node."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from hami_protocol import keys
from hami_protocol.vendor.table import DEFAULT_VENDORS, METAX_GPU, MLU, MTHREADS, NVIDIA
from hami_scheduler.cache.nodes import slim_node
from hami_scheduler.cache.view import SchedulerCache

from ..service_helpers import (
    MLU_CAPACITY,
    MTHREADS_CAPACITY,
    gpus,
    node_object,
    register_annotations,
)

NOW = datetime(2026, 1, 1, tzinfo=UTC)

METAX_CAPACITY = {"metax-tech.com/gpu": "2"}


def cache(**kwargs: Any) -> SchedulerCache:
    return SchedulerCache(DEFAULT_VENDORS, now=lambda: NOW, **kwargs)


@pytest.mark.parametrize(
    ("word", "capacity", "ids", "sizes"),
    [
        (MLU, MLU_CAPACITY, ["n-cambricon-mlu-0", "n-cambricon-mlu-1"], (100, 64 * 256, 100)),
        (MTHREADS, MTHREADS_CAPACITY, ["n-mthreads-0", "n-mthreads-1"], (100, 48 * 512, 16)),
        (METAX_GPU, METAX_CAPACITY, ["n-metax-0", "n-metax-1"], (1, 65536, 100)),
    ],
)
def test_capacity_vendors_have_devices_synthesised_from_node_capacity(
    word: str, capacity: dict[str, str], ids: list[str], sizes: tuple[int, int, int]
) -> None:
    c = cache()
    c.upsert_node(node_object("n", allocatable=capacity))
    devices = c.nodes["n"].vendor_devices(word)
    assert [d.uuid for d in devices] == ids
    assert {(d.count, d.totalmem, d.totalcore) for d in devices} == {sizes}
    assert all(d.health and d.vendor == word for d in devices)


def test_capacity_devices_survive_slimming_and_unchanged_capacity_rebuilds_nothing() -> None:
    c = cache()
    obj = node_object("n", allocatable=MLU_CAPACITY)
    slim_node(obj, DEFAULT_VENDORS)
    assert obj["status"]["capacity"] == {
        k: v for k, v in MLU_CAPACITY.items() if k != "cambricon.com/vmlu"
    }
    c.upsert_node(obj)
    first = c.nodes["n"]
    c.upsert_node(node_object("n", allocatable=MLU_CAPACITY))
    assert c.nodes["n"] is first


def test_capacity_dropping_to_zero_withdraws_the_vendor() -> None:
    c = cache()
    c.upsert_node(node_object("n", allocatable=METAX_CAPACITY))
    assert "n" in c.nodes
    c.upsert_node(node_object("n", allocatable={"metax-tech.com/gpu": "0"}))
    assert "n" not in c.nodes


def test_mixed_node_keeps_both_vendors() -> None:
    c = cache()
    annotations = register_annotations(gpus("n", 2))
    c.upsert_node(
        node_object("n", annotations, allocatable={"nvidia.com/gpu": "20", **MLU_CAPACITY})
    )
    usage = c.nodes["n"]
    assert len(usage.vendor_devices(NVIDIA)) == 2
    assert len(usage.vendor_devices(MLU)) == 2


def test_capacity_without_its_memory_resource_fails_that_vendor_only_and_is_reported_once() -> None:
    reported: list[tuple[str, str, str]] = []
    c = cache(on_bad_annotation=lambda n, k, problem, raw: reported.append((n, k, problem)))
    capacity = {
        "nvidia.com/gpu": "20",
        "cambricon.com/vmlu": "2",
        "cambricon.com/mlu.smlu.vcore": "200",
    }
    obj = node_object("n", register_annotations(gpus("n", 2)), allocatable=capacity)
    for _ in range(2):
        c.upsert_node(obj)
    assert reported == [
        (
            "n",
            "cambricon.com/mlu.smlu.vmemory",
            "node capacity cambricon.com/mlu.smlu.vmemory is invalid: node has "
            "cambricon.com/mlu.smlu.vcore capacity 200 but no memory capacity",
        )
    ]
    problem = c.node_problem("n", [MLU])
    assert problem is not None
    assert "cambricon.com/mlu.smlu.vmemory" in problem
    assert c.node_problem("n", [NVIDIA]) is None
    assert len(c.nodes["n"].vendor_devices(NVIDIA)) == 2
    assert c.nodes["n"].vendor_devices(MLU) == ()


def test_a_bad_register_annotation_of_one_vendor_leaves_the_other_usable() -> None:
    annotations = {**register_annotations(gpus("n", 1)), keys.node_register_key("dcu"): "junk"}
    c = cache()
    c.upsert_node(node_object("n", annotations, allocatable={"nvidia.com/gpu": "10"}))
    problem = c.node_problem("n", ["DCU"])
    assert problem is not None
    assert keys.node_register_key("dcu") in problem
    assert c.node_problem("n", [NVIDIA]) is None
    assert len(c.nodes["n"].vendor_devices(NVIDIA)) == 1


# --- the vendors' own node annotations, health per row -----------------------------------------

DRS = (
    '{"devices":[{"index":"0","minor":"0","capacity":4},{"index":"1","minor":"1","capacity":4}],'
    '"profiles":{"1g.8gb":"0","2g.16gb":"1","4g.32gb":"2"}}'
)
SGPU = (
    '[{"uuid":"GPU-a","model":"MXC500","totalDevCount":8,"totalCompute":100,"totalVRam":65536,'
    '"healthy":true,"qosPolicy":"fixed-share","linkZone":1},'
    '{"uuid":"GPU-b","model":"MXC500","totalDevCount":8,"totalCompute":100,"totalVRam":65536,'
    '"healthy":false}]'
)


def test_vendor_annotation_inventories_are_decoded_with_their_custom_info() -> None:
    c = cache()
    annotations = {keys.ENFLAME_DRS_CAPACITY: DRS, keys.METAX_SGPU_DEVICES: SGPU}
    c.upsert_node(node_object("n", annotations))
    usage = c.nodes["n"]
    drs = usage.vendor_devices("Enflame")
    assert [(d.uuid, d.count, d.totalmem) for d in drs] == [
        ("n-enflame-drs-0", 4, 32768),
        ("n-enflame-drs-1", 4, 32768),
    ]
    assert drs[0].custom["maxSlice"] == "4"
    assert [p.name for p in usage.layout.vendor.drs_profiles] == ["1g.8gb", "2g.16gb", "4g.32gb"]
    sgpu = usage.vendor_devices("Metax-SGPU")
    assert [(d.uuid, d.health) for d in sgpu] == [("GPU-a", True), ("GPU-b", False)]
    assert sgpu[0].custom["QosPolicy"] == "fixed-share"
    assert sgpu[0].custom["LinkZone"] == "1"


def test_a_metax_annotation_missing_fields_fails_that_vendor_only_naming_the_key() -> None:
    reported: list[tuple[str, str]] = []
    c = cache(on_bad_annotation=lambda n, k, problem, raw: reported.append((k, problem)))
    annotations = {
        **register_annotations(gpus("n", 1)),
        keys.METAX_SGPU_DEVICES: '[{"uuid":"GPU-a","totalDevCount":8}]',
        keys.ENFLAME_DRS_CAPACITY: DRS,
    }
    for _ in range(2):
        c.upsert_node(node_object("n", annotations, allocatable={"nvidia.com/gpu": "10"}))
    ((key, problem),) = reported
    assert key == keys.METAX_SGPU_DEVICES
    assert "totalCompute" in problem
    assert keys.METAX_SGPU_DEVICES in (c.node_problem("n", ["Metax-SGPU"]) or "")
    assert c.node_problem("n", [NVIDIA, "Enflame"]) is None
    assert len(c.nodes["n"].vendor_devices("Enflame")) == 2


def test_amd_is_healthy_only_while_its_capacity_count_is_positive() -> None:
    from hami_kubesim.vendors.inventory import VendorDevices, node_annotations

    annotations = node_annotations(VendorDevices("AMD", 2), "n", NOW)
    c = cache()
    c.upsert_node(node_object("n", annotations, allocatable={"amd.com/gpu": "2"}))
    assert len(c.nodes["n"].vendor_devices("AMD")) == 2
    assert c.node_problem("n", ["AMD"]) is None
    c.upsert_node(node_object("n", annotations, allocatable={"amd.com/gpu": "0"}))
    assert "n" not in c.nodes
    assert c.node_problem("n", ["AMD"]) == (
        "AMD devices unavailable: the node's capacity of amd.com/gpu is 0"
    )
    c.upsert_node(node_object("n", annotations, allocatable={"amd.com/gpu": "2"}))
    assert len(c.nodes["n"].vendor_devices("AMD")) == 2


def test_aws_neuron_devices_are_always_healthy_without_a_handshake() -> None:
    c = cache()
    capacity = {"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"}
    labels = {keys.AWS_INSTANCE_TYPE_LABEL: "inf2.48xlarge"}
    c.upsert_node(node_object("n", allocatable=capacity, labels=labels))
    devices = c.nodes["n"].vendor_devices("AWSNeuron")
    assert [(d.uuid, d.count, d.totalcore) for d in devices] == [
        ("n-AWSNeuron-0", 2, 3),
        ("n-AWSNeuron-1", 2, 3),
    ]
    assert devices[0].custom["AWSNodeType"] == "inf2.48xlarge"
    assert c.node_problem("n", ["AWSNeuron"]) is None


def test_vendor_node_annotations_rebuild_the_layout_and_a_bad_topology_map_is_reported() -> None:
    reported: list[str] = []
    c = cache(on_bad_annotation=lambda n, k, problem, raw: reported.append(k))
    c.upsert_node(node_object("n", allocatable=METAX_CAPACITY))
    first = c.nodes["n"]
    notes = {
        keys.METAX_GPU_TOPOLOGY_LOSSES: '{"1": 10, "2": 30}',
        keys.ASCEND_NODE_VNPU_CORE: "true",
    }
    c.upsert_node(node_object("n", notes, allocatable=METAX_CAPACITY))
    second = c.nodes["n"]
    assert second is not first
    assert dict(second.layout.vendor.metax_losses) == {1: 10.0, 2: 30.0}
    assert second.layout.vendor.ascend_hami_core is True
    assert reported == []
    bad = {keys.METAX_GPU_TOPOLOGY_SCORES: '{"two": 1}'}
    c.upsert_node(node_object("n", bad, allocatable=METAX_CAPACITY))
    assert reported == [keys.METAX_GPU_TOPOLOGY_SCORES]
    assert dict(c.nodes["n"].layout.vendor.metax_scores) == {}


def test_slimming_keeps_what_the_vendor_inventories_read() -> None:
    annotations = {
        keys.ENFLAME_DRS_CAPACITY: DRS,
        keys.METAX_SGPU_DEVICES: SGPU,
        keys.ASCEND_NODE_VNPU_CORE: "true",
        "unrelated": "x",
    }
    capacity = {"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4", "amd.com/gpu": "1"}
    obj = node_object("n", annotations, allocatable=capacity)
    slim_node(obj, DEFAULT_VENDORS)
    kept = obj["metadata"]["annotations"]
    assert set(kept) == {
        keys.ENFLAME_DRS_CAPACITY,
        keys.METAX_SGPU_DEVICES,
        keys.ASCEND_NODE_VNPU_CORE,
    }
    assert obj["status"]["capacity"] == capacity


def _sgpu_pod(name: str, uuid: str, app_class: str, qos: str = "best-effort") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": {
                keys.VGPU_NODE: "n",
                keys.devices_allocated_key("metax-sgpu"): f"{uuid},Metax-SGPU,1024,10:;",
                keys.METAX_SGPU_APP_CLASS: app_class,
                keys.METAX_SGPU_QOS_POLICY: qos,
            },
        },
        "spec": {"containers": [{"name": "c"}]},
    }


def test_sgpu_state_counts_app_classes_and_the_qos_the_report_does_not_show_yet() -> None:
    c = cache()
    c.upsert_node(node_object("n", {keys.METAX_SGPU_DEVICES: SGPU}))
    c.upsert_pod(_sgpu_pod("a", "GPU-a", "online"))
    c.upsert_pod(_sgpu_pod("b", "GPU-a", "offline"))
    c.upsert_pod(_sgpu_pod("c", "GPU-b", ""))
    state = c.sgpu_state("n")
    assert {uuid: (t.online, t.offline) for uuid, t in state.tasks.items()} == {"GPU-a": (1, 1)}
    # The pods run best-effort where the node reports fixed-share (GPU-a) or no policy (GPU-b):
    # their policy stands until the report shows it.
    assert dict(state.qos_pending) == {"GPU-a": "best-effort", "GPU-b": "best-effort"}
    reported = SGPU.replace('"qosPolicy":"fixed-share"', '"qosPolicy":"best-effort"')
    c.upsert_node(node_object("n", {keys.METAX_SGPU_DEVICES: reported}))
    assert dict(c.sgpu_state("n").qos_pending) == {"GPU-b": "best-effort"}
    assert c.sgpu_state("elsewhere").tasks == {}


def test_a_shared_sgpu_pod_naming_no_qos_leaves_the_reported_policy_in_force() -> None:
    # Placed before a webhook set a policy: its "" must not read as "any policy may join" on a
    # device the plugin reports fixed-share; a whole-device pod does clear the policy.
    c = cache()
    c.upsert_node(node_object("n", {keys.METAX_SGPU_DEVICES: SGPU}))
    c.upsert_pod(_sgpu_pod("old", "GPU-a", "", qos=""))
    assert dict(c.sgpu_state("n").qos_pending) == {}
    whole = _sgpu_pod("whole", "GPU-a", "", qos="")
    whole["metadata"]["annotations"][keys.devices_allocated_key("metax-sgpu")] = (
        "GPU-a,Metax-SGPU,1024,100:;"
    )
    c.upsert_pod(whole)
    assert dict(c.sgpu_state("n").qos_pending) == {"GPU-a": ""}
