"""Example-pod expectations and the demo report, on hand-built snapshots; the example files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hami_kubesim.demo import DEMO_NODES, EXAMPLES_DIR, VENDOR_EXAMPLES, load_examples
from hami_kubesim.stack.checks.expectations import evaluate, expectation_of
from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ClusterState
from hami_protocol import keys
from hami_protocol.node.registry import DeviceInfo, encode_node_devices_json
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices

NOW = datetime(2026, 7, 1, tzinfo=UTC)


def _node(name: str, uuids: list[str], model: str) -> dict[str, Any]:
    devices = [
        DeviceInfo(
            id=u, index=i, count=10, devmem=16000, devcore=100, type=model, numa=i, health=True
        )
        for i, u in enumerate(uuids)
    ]
    return {
        "metadata": {
            "name": name,
            "annotations": {keys.NVIDIA_REGISTER: encode_node_devices_json(devices)},
        }
    }


def _pod(
    name: str, node: str, uuid: str, *, expect: dict[str, str], mem: int = 4000
) -> dict[str, Any]:
    allocated = encode_pod_devices(((ContainerDevice(uuid, "NVIDIA", mem, 25),),))
    record = {
        "node": node,
        "containers": [
            {
                "name": "cuda",
                "resources": [
                    {
                        "resource": "nvidia.com/gpu",
                        "envs": {"NVIDIA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_SM_LIMIT": "25"},
                    }
                ],
            }
        ],
    }
    annotations = {
        keys.VGPU_NODE: node,
        keys.NVIDIA_DEVICES_ALLOCATED: allocated,
        "kubesim.hami.io/container-allocations": json.dumps(record),
        **{f"demo.hami.io/{k}": v for k, v in expect.items()},
    }
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name, "annotations": annotations},
        "spec": {"nodeName": node, "containers": [{"name": "cuda"}]},
        "status": {"phase": "Running"},
    }


def _unschedulable(name: str, expect: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": name,
            "annotations": {f"demo.hami.io/{k}": v for k, v in expect.items()},
        },
        "spec": {"containers": [{"name": "cuda"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    event = {
        "reason": "FailedScheduling",
        "message": "0/2 nodes are available: 2 1/1 CardInsufficientMemory.",
        "involvedObject": {"kind": "Pod", "uid": name},
    }
    return pod, event


def _snapshot() -> ClusterState:
    nodes = [_node("n1", ["GPU-1", "GPU-2"], "NVIDIA-Tesla T4"), _node("n2", ["GPU-3"], "A100")]
    big, event = _unschedulable(
        "big", {"expect": "unschedulable", "expect-reason": "CardInsufficientMemory"}
    )
    pods = [
        _pod("a", "n1", "GPU-1", expect={"expect": "placed", "expect-node": "n1"}),
        _pod(
            "b",
            "n1",
            "GPU-1",
            expect={"expect": "placed", "expect-same-gpu-as": "a", "expect-gpu-model": "t4"},
        ),
        _pod(
            "c",
            "n2",
            "GPU-3",
            expect={
                "expect": "placed",
                "expect-other-gpu-than": "a",
                "expect-gpus-one-of": "GPU-1, GPU-2; GPU-3 ;",
            },
        ),
        big,
    ]
    return ClusterState(tuple(pods), tuple(nodes), (event,), NOW)


def test_expectations_that_hold() -> None:
    state = _snapshot()
    results = [evaluate(state, w) for p in state.pods if (w := expectation_of(p)) is not None]
    assert [r.ok for r in results] == [True, True, True, True], [r.detail for r in results]


@pytest.mark.parametrize(
    ("name", "override", "detail"),
    [
        ("a", {"expect-node": "n2"}, "expected node n2"),
        ("b", {"expect-gpu-model": "A100"}, "expected only A100 GPUs"),
        ("c", {"expect-same-gpu-as": "a"}, "expected to share a GPU with a"),
        ("b", {"expect-other-gpu-than": "a"}, "expected no GPU in common with a"),
        ("a", {"expect-gpu": "GPU-2"}, "expected GPU GPU-2"),
        ("a", {"expect-gpus-one-of": "GPU-1,GPU-2; GPU-2"}, "expected one of the GPU sets"),
        ("big", {"expect": "placed"}, "expected Running, is Unschedulable"),
        ("big", {"expect-reason": "NumaNotFit"}, "not for 'NumaNotFit'"),
        ("a", {"expect": "rejected"}, "expected rejection at admission"),
    ],
)
def test_expectations_that_fail_say_why(name: str, override: dict[str, str], detail: str) -> None:
    state = _snapshot()
    pod = state.pod("default", name)
    assert pod is not None
    annotations = pod["metadata"]["annotations"]
    annotations.update({f"demo.hami.io/{k}": v for k, v in override.items()})
    want = expectation_of(pod)
    assert want is not None
    result = evaluate(state, want)
    assert not result.ok
    assert detail in result.detail


def test_admission_rejections() -> None:
    state = _snapshot()
    want = expectation_of(
        {
            "metadata": {
                "name": "priv",
                "annotations": {
                    "demo.hami.io/expect": "rejected",
                    "demo.hami.io/expect-reason": "privileged",
                },
            }
        }
    )
    assert want is not None
    assert evaluate(state, want, rejection="container cuda is privileged").ok
    assert not evaluate(state, want, rejection="exceeding resource quota").ok
    with pytest.raises(ValueError, match="not one of"):
        expectation_of({"metadata": {"annotations": {"demo.hami.io/expect": "maybe"}}})


def test_report_shows_placement_env_reasons_and_utilisation() -> None:
    state = _snapshot()
    results = [evaluate(state, w) for p in state.pods if (w := expectation_of(p)) is not None]
    text = render_report(state, results=results, rejections={"default/priv": "privileged"})
    assert "✓ default/a" in text
    assert "GPU-1 (NVIDIA-Tesla T4) 4000 MiB 25% cores" in text
    assert "env CUDA_DEVICE_SM_LIMIT=25  NVIDIA_VISIBLE_DEVICES=GPU-1" in text
    assert "default/big [Unschedulable]: 0/2 nodes are available" in text
    assert "default/priv: rejected at admission: privileged" in text
    assert "mem   8000/16000  MiB  50%  cores  50/100  tasks 2/10  a, b" in text
    assert "Expected outcomes: 4/4 met" in text


def test_the_example_pods_all_carry_an_expectation() -> None:
    pods = load_examples(EXAMPLES_DIR)
    assert len(pods) >= 10
    wanted = [expectation_of(p) for p in pods]
    assert all(w is not None for w in wanted)
    outcomes = {w.outcome for w in wanted if w is not None}
    assert outcomes == {"placed", "unschedulable", "rejected"}
    # A pinned UUID must name a GPU of the demo cluster.
    uuids = {g.uuid for n in DEMO_NODES for g in n.gpus}
    pinned = [w.gpu for w in wanted if w is not None and w.gpu]
    assert pinned
    assert set(pinned) <= uuids
    sets = [s for w in wanted if w is not None for s in w.gpus_one_of]
    assert sets
    assert set().union(*sets) <= uuids
    nodes = {n.name for n in DEMO_NODES}
    assert {w.node for w in wanted if w is not None and w.node} <= nodes


def test_the_vendor_examples_expect_placement_on_every_vendor_node_of_the_demo() -> None:
    pods = load_examples(EXAMPLES_DIR / VENDOR_EXAMPLES)
    wanted = [w for w in (expectation_of(p) for p in pods) if w is not None]
    assert len(wanted) == len(pods)
    vendor_nodes = {n.name for n in DEMO_NODES if n.vendors}
    placed_on = {w.node for w in wanted if w.outcome == "placed"}
    assert placed_on == vendor_nodes
    assert all(w.outcome in {"placed", "rejected"} for w in wanted)


def test_load_examples_reads_pods_and_priority_classes_in_file_order(tmp_path: Path) -> None:
    (tmp_path / "b.yaml").write_text(
        "kind: PriorityClass\nmetadata: {name: low}\nvalue: 1\n---\n"
        "kind: Pod\nmetadata: {name: two}\n---\nkind: Service\nmetadata: {name: svc}\n"
    )
    (tmp_path / "a.yaml").write_text("kind: Pod\nmetadata: {name: one}\n")
    loaded = [(d["kind"], d["metadata"]["name"]) for d in load_examples(tmp_path)]
    assert loaded == [("Pod", "one"), ("PriorityClass", "low"), ("Pod", "two")]
