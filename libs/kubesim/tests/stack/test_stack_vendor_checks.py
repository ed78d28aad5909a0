"""The vendor invariants over hand-made snapshots: over-commit against each kind of inventory,
and what a Running container got against its allocation."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.stack.checks.invariants import check_all, check_vendors
from hami_kubesim.stack.state import ALLOCATIONS_ANNOTATION, ClusterState
from hami_kubesim.vendors.allocation import GIVEN_ANNOTATION
from hami_kubesim.vendors.inventory import VendorDevices, device_ids, node_annotations
from hami_protocol import keys

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
DCU_ALLOCATED = keys.devices_allocated_key("dcu")
MLU_ALLOCATED = keys.devices_allocated_key("cambricon-mlu")
DCU = VendorDevices(vendor="DCU", devices=2, memory_mib=16000, split=2)


def dcu_node(name: str = "dcu-node") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": node_annotations(DCU, name, NOW)},
        "status": {"capacity": {}},
    }


def mlu_node(name: str = "mlu-node") -> dict[str, Any]:
    capacity = {
        "cambricon.com/vmlu": "20",
        "cambricon.com/mlu.smlu.vmemory": "64",  # 16 GiB per MLU
        "cambricon.com/mlu.smlu.vcore": "200",
    }
    return {"metadata": {"name": name, "annotations": {}}, "status": {"capacity": capacity}}


def pod(
    name: str,
    node: str,
    key: str,
    listed: str,
    *,
    given: dict[str, str] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    annotations = {key: listed}
    if given is not None:
        record = {
            "node": node,
            "containers": [
                {
                    "name": container,
                    "kind": "app",
                    "resources": [{"resource": "r", "annotations": {GIVEN_ANNOTATION: value}}],
                }
                for container, value in given.items()
            ],
        }
        annotations[ALLOCATIONS_ANNOTATION] = json.dumps(record)
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "c0"}, {"name": "c1"}]},
        "status": {"phase": phase},
    }


def state(*objects: dict[str, Any]) -> ClusterState:
    pods = tuple(o for o in objects if "spec" in o)
    nodes = tuple(o for o in objects if "spec" not in o)
    return ClusterState(pods=pods, nodes=nodes, events=(), taken_at=NOW)


def messages(snapshot: ClusterState) -> list[str]:
    return [str(v) for v in check_vendors(snapshot)]


UUID0, UUID1 = device_ids(DCU, "dcu-node")


def test_pods_within_a_registered_dcu_and_given_their_devices_break_nothing() -> None:
    listed = f"{UUID0},DCU,8000,50:;{UUID1},DCU,16000,100:;"
    given = {"c0": f"DCU;0;{UUID0},DCU,8000,50:", "c1": f"DCU;1;{UUID1},DCU,16000,100:"}
    snapshot = state(dcu_node(), pod("p", "dcu-node", DCU_ALLOCATED, listed, given=given))
    assert messages(snapshot) == []
    assert [v for v in check_all(snapshot) if v.check == "vendors"] == []


def test_memory_beyond_the_register_is_over_committed() -> None:
    first = pod("a", "dcu-node", DCU_ALLOCATED, f"{UUID0},DCU,9000,10:;;", phase="Pending")
    second = pod("b", "dcu-node", DCU_ALLOCATED, f"{UUID0},DCU,9000,10:;;", phase="Pending")
    assert messages(state(dcu_node(), first, second)) == [
        f"[vendors] dcu-node/{UUID0}: DCU memory (MiB) over-committed: 18000 > 16000 "
        "(held by default/a, default/b)"
    ]


def test_slots_of_a_capacity_synthesised_mlu_are_counted() -> None:
    holders = [
        pod(
            f"p{i}",
            "mlu-node",
            MLU_ALLOCATED,
            "mlu-node-cambricon-mlu-1,MLU,1024,30:;;",
            phase="Pending",
        )
        for i in range(4)
    ]
    found = messages(state(mlu_node(), *holders))
    assert found == [
        "[vendors] mlu-node/mlu-node-cambricon-mlu-1: MLU cores over-committed: 120 > 100 "
        "(held by default/p0, default/p1, default/p2, default/p3)"
    ]


def test_a_device_the_inventory_does_not_list_is_flagged() -> None:
    stray = pod(
        "s", "mlu-node", MLU_ALLOCATED, "mlu-node-cambricon-mlu-7,MLU,1,1:;;", phase="Pending"
    )
    assert messages(state(mlu_node(), stray)) == [
        "[vendors] mlu-node/mlu-node-cambricon-mlu-7: MLU: held by default/s but not in the "
        "node's inventory"
    ]


def test_a_running_container_must_get_exactly_its_allocation() -> None:
    listed = f"{UUID0},DCU,8000,50:;{UUID1},DCU,8000,50:;"
    given = {"c0": f"DCU;0;{UUID1},DCU,8000,50:"}
    found = messages(state(dcu_node(), pod("p", "dcu-node", DCU_ALLOCATED, listed, given=given)))
    assert found == [
        f"[vendors] default/p/c0: got DCU devices '{UUID1},DCU,8000,50:' (as container 0), "
        f"allocation says '{UUID0},DCU,8000,50:'",
        "[vendors] default/p/c1: Running without the DCU devices it was allocated",
    ]


def test_devices_no_allocation_names_are_flagged() -> None:
    given = {"c1": f"DCU;1;{UUID0},DCU,1,1:"}
    found = messages(state(dcu_node(), pod("p", "dcu-node", MLU_ALLOCATED, ";;", given=given)))
    assert found == [
        f"[vendors] default/p/c1: got DCU devices '{UUID0},DCU,1,1:' (as container 1), "
        "allocation says ''"
    ]


_USES = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 9000), st.integers(0, 60)), max_size=6)


@given(uses=_USES)
def test_the_over_commit_check_flags_exactly_the_devices_used_beyond_the_register(
    uses: list[tuple[int, int, int]],
) -> None:
    uuids = (UUID0, UUID1)
    pods = [
        pod(f"p{i}", "dcu-node", DCU_ALLOCATED, f"{uuids[d]},DCU,{mem},{cores}:;;", phase="Pending")
        for i, (d, mem, cores) in enumerate(uses)
    ]
    over = set()
    for index, uuid in enumerate(uuids):
        mine = [(mem, cores) for d, mem, cores in uses if d == index]
        total_mem, total_cores = sum(m for m, _ in mine), sum(c for _, c in mine)
        if total_mem > DCU.memory_mib or total_cores > 100 or len(mine) > DCU.split:
            over.add(uuid)
    flagged = {v.subject.removeprefix("dcu-node/") for v in check_vendors(state(dcu_node(), *pods))}
    assert flagged == over
