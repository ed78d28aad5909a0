"""Vendor device-plugin stand-ins: registration as each vendor's plugin does it, and admission
of pods from the annotations a scheduler wrote (hand-written here)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hami_kube.objects import NodeView, PodView
from hami_kubesim.cluster.config import ClusterConfigError, parse_cluster_config
from hami_kubesim.cluster.simulated import Cluster, running_cluster
from hami_kubesim.stack.checks.invariants import check_vendors
from hami_kubesim.stack.state import ClusterState, allocation_record, record_containers
from hami_kubesim.testing import eventually
from hami_kubesim.vendors.allocation import GIVEN_ANNOTATION, parse_given
from hami_kubesim.vendors.inventory import (
    AWS_INSTANCE_TYPE_LABEL,
    VendorDevices,
    device_ids,
    kubelet_devices,
    node_inventory,
)
from hami_kubesim.vendors.profiles import profile_for
from hami_protocol import keys
from hami_protocol.node.handshake import parse_handshake
from hami_protocol.node.lock import NodeLock, encode_node_lock

NODES: list[dict[str, Any]] = [
    {"name": "dcu-node", "vendors": [{"vendor": "DCU", "devices": 2, "split": 4}]},
    {
        "name": "npu-node",
        "vendors": [{"vendor": "Ascend910B3", "devices": 8, "memoryMiB": 65536}],
    },
    {"name": "mlu-node", "vendors": [{"vendor": "MLU", "devices": 2, "memoryMiB": 24576}]},
    {"name": "mt-node", "vendors": [{"vendor": "Mthreads", "devices": 2}]},
    {"name": "drs-node", "vendors": [{"vendor": "Enflame", "devices": 2, "split": 6}]},
    {"name": "sgpu-node", "vendors": [{"vendor": "Metax-SGPU", "devices": 2}]},
    {"name": "aws-node", "vendors": [{"vendor": "AWSNeuron", "devices": 4, "cores": 2}]},
    {
        "name": "mixed-node",
        "vendors": [
            {"vendor": "Biren", "devices": 1},
            {"vendor": "AMD", "devices": 1, "annotations": {"hami.io/node-amd-register": "{bad"}},
        ],
    },
]


def _config(tmp_path: Path, nodes: list[dict[str, Any]] = NODES) -> Any:
    return parse_cluster_config(
        {
            "nodes": nodes,
            "admission": {"enabled": False},
            "scheduling": {"enabled": False},
        },
        base_dir=tmp_path,
    )


def _snapshot(cluster: Cluster) -> ClusterState:
    server = cluster.apiserver.server
    pods, nodes = tuple(server.list("pods")), tuple(server.list("nodes"))
    return ClusterState(pods=pods, nodes=nodes, events=(), taken_at=datetime.now(UTC))


def _node(cluster: Cluster, name: str) -> NodeView:
    return NodeView(cluster.apiserver.server.get("nodes", name))


def test_a_vendor_entry_names_its_bad_key(tmp_path: Path) -> None:
    with pytest.raises(ClusterConfigError, match=r"nodes\[0\]\.vendors\[0\]\.vendor"):
        _config(tmp_path, [{"name": "n", "vendors": [{"vendor": "Voodoo"}]}])
    with pytest.raises(ClusterConfigError, match=r"nodes\[0\]\.vendors\[0\]\.devices"):
        _config(tmp_path, [{"name": "n", "vendors": [{"vendor": "DCU", "devices": 0}]}])
    with pytest.raises(ClusterConfigError, match=r"vendors\[0\]\.colour: unknown key"):
        _config(tmp_path, [{"name": "n", "vendors": [{"vendor": "DCU", "colour": "red"}]}])


async def test_each_vendor_registers_as_its_plugin_does(tmp_path: Path) -> None:
    async with running_cluster(_config(tmp_path)) as cluster:
        dcu = _node(cluster, "dcu-node")
        raw = dcu.annotations[keys.node_register_key("dcu")]
        assert ":" in raw
        assert not raw.startswith("[")
        devices = node_inventory(profile_for("DCU"), dcu.raw)
        assert devices is not None
        assert [d.count for d in devices] == [4, 4]
        assert parse_handshake(dcu.annotations[keys.node_handshake_key("dcu")]).state == "reported"

        npu = _node(cluster, "npu-node")
        register = json.loads(npu.annotations["hami.io/node-register-Ascend910B3"])
        assert [d["custominfo"]["NetworkID"] for d in register] == [0, 0, 0, 0, 1, 1, 1, 1]
        handshake = npu.annotations["hami.io/node-handshake-Ascend910B3"]
        assert handshake.startswith("Reported_")
        datetime.strptime(handshake.removeprefix("Reported_"), "%Y.%m.%d %H:%M:%S")

        async def capacity_reported() -> bool:
            mlu = _node(cluster, "mlu-node").capacity
            return mlu.get("cambricon.com/mlu.smlu.vcore") == "200"

        await eventually(capacity_reported, within=10, what="MLU capacity from the kubelet")
        mlu = node_inventory(profile_for("MLU"), _node(cluster, "mlu-node").raw)
        assert mlu is not None
        assert [(d.id, d.devmem) for d in mlu] == [
            ("mlu-node-cambricon-mlu-0", 24576),
            ("mlu-node-cambricon-mlu-1", 24576),
        ]
        assert keys.node_register_key("cambricon") not in _node(cluster, "mlu-node").annotations

        drs = node_inventory(profile_for("Enflame"), _node(cluster, "drs-node").raw)
        assert drs is not None
        assert [(d.id, d.count) for d in drs] == [
            ("drs-node-enflame-drs-0", 6),
            ("drs-node-enflame-drs-1", 6),
        ]
        sgpu = node_inventory(profile_for("Metax-SGPU"), _node(cluster, "sgpu-node").raw)
        assert sgpu is not None
        assert len(sgpu) == 2
        assert all(d.health for d in sgpu)
        assert _node(cluster, "aws-node").labels[AWS_INSTANCE_TYPE_LABEL] == "trn1.32xlarge"

        mixed = _node(cluster, "mixed-node")
        assert node_inventory(profile_for("AMD"), mixed.raw) is None  # garbage, as configured
        biren = node_inventory(profile_for("Biren"), mixed.raw)
        assert biren is not None
        assert len(biren) == 1


async def test_the_plugin_answers_the_schedulers_handshake(tmp_path: Path) -> None:
    nodes = [{"name": "dcu-node", "vendors": [{"vendor": "DCU", "reportIntervalSeconds": 0.05}]}]
    async with running_cluster(_config(tmp_path, nodes)) as cluster:
        key = keys.node_handshake_key("dcu")
        await cluster.apiserver.server.patch(
            "nodes",
            "dcu-node",
            {"metadata": {"annotations": {key: "Requesting_2026-01-02 03:04:05"}}},
            patch_type="merge",
        )

        def answered() -> bool:
            return parse_handshake(_node(cluster, "dcu-node").annotations[key]).state == "reported"

        await eventually(answered, within=10, what="the handshake answered")


def _vendor_pod(
    name: str,
    node: str,
    resource: str,
    annotations: Mapping[str, str],
    *,
    containers: int = 2,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations)},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": f"c{i}", "image": "x", "resources": {"limits": {resource: "1"}}}
                for i in range(containers)
            ],
        },
    }


def _given(pod: Mapping[str, Any]) -> dict[str, tuple[str, int, str] | None]:
    found: dict[str, tuple[str, int, str] | None] = {}
    for name, container in record_containers(allocation_record(pod)).items():
        for entry in container.get("resources") or ():
            value = (entry.get("annotations") or {}).get(GIVEN_ANNOTATION)
            if value:
                found[name] = parse_given(value)
    return found


async def _running(cluster: Cluster, name: str) -> dict[str, Any]:
    server = cluster.apiserver.server

    def running() -> bool:
        return PodView(server.get("pods", name, namespace="default")).phase == "Running"

    await eventually(running, within=10, what=f"{name} Running")
    return server.get("pods", name, namespace="default")


async def test_a_locking_vendor_gives_each_container_its_devices_then_unlocks(
    tmp_path: Path,
) -> None:
    async with running_cluster(_config(tmp_path)) as cluster:
        server = cluster.apiserver.server
        uuids = [
            d.id for d in node_inventory(profile_for("DCU"), _node(cluster, "dcu-node").raw) or ()
        ]
        listed = f"{uuids[0]},DCU,1000,20:;{uuids[1]},DCU,2000,30:;"
        lock = encode_node_lock(NodeLock(datetime.now(UTC), "default", "dcu-pod"))
        await server.patch(
            "nodes",
            "dcu-node",
            {"metadata": {"annotations": {keys.NODE_LOCK: lock}}},
            patch_type="merge",
        )
        await server.create(
            "pods",
            _vendor_pod(
                "dcu-pod",
                "dcu-node",
                "hygon.com/dcunum",
                {
                    keys.devices_to_allocate_key("dcu"): listed,
                    keys.devices_allocated_key("dcu"): listed,
                    keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
                    keys.BIND_TIME: "1700000000",
                },
            ),
            namespace="default",
        )
        pod = await _running(cluster, "dcu-pod")
        annotations = PodView(pod).annotations
        assert annotations[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        assert annotations[keys.devices_to_allocate_key("dcu")] == ";;"
        assert _given(pod) == {
            "c0": ("DCU", 0, f"{uuids[0]},DCU,1000,20:"),
            "c1": ("DCU", 1, f"{uuids[1]},DCU,2000,30:"),
        }
        assert keys.NODE_LOCK not in _node(cluster, "dcu-node").annotations
        assert check_vendors(_snapshot(cluster)) == []


async def test_cambricon_marks_the_pod_assigned_and_drops_its_own_lock(tmp_path: Path) -> None:
    async with running_cluster(_config(tmp_path)) as cluster:
        server = cluster.apiserver.server
        listed = "mlu-node-cambricon-mlu-1,MLU,4096,10:;"
        await server.patch(
            "nodes",
            "mlu-node",
            {"metadata": {"annotations": {keys.CAMBRICON_DSMLU_LOCK: "2026-01-01T00:00:00Z"}}},
            patch_type="merge",
        )
        await server.create(
            "pods",
            _vendor_pod(
                "mlu-pod",
                "mlu-node",
                "cambricon.com/vmlu",
                {
                    keys.devices_to_allocate_key("cambricon-mlu"): listed,
                    keys.devices_allocated_key("cambricon-mlu"): listed,
                    "CAMBRICON_DSMLU_ASSIGNED": "false",
                },
                containers=1,
            ),
            namespace="default",
        )
        pod = await _running(cluster, "mlu-pod")
        assert PodView(pod).annotations["CAMBRICON_DSMLU_ASSIGNED"] == "true"
        assert _given(pod) == {"c0": ("MLU", 0, "mlu-node-cambricon-mlu-1,MLU,4096,10:")}
        assert keys.CAMBRICON_DSMLU_LOCK not in _node(cluster, "mlu-node").annotations


async def test_an_allocated_only_vendor_gives_each_container_once(tmp_path: Path) -> None:
    async with running_cluster(_config(tmp_path)) as cluster:
        server = cluster.apiserver.server
        listed = "mt-node-mthreads-0,Mthreads,8192,4:;mt-node-mthreads-1,Mthreads,8192,4:;"
        await server.create(
            "pods",
            _vendor_pod(
                "mt-pod",
                "mt-node",
                "mthreads.com/vgpu",
                {keys.devices_allocated_key("mthreads-vgpu"): listed},
            ),
            namespace="default",
        )
        pod = await _running(cluster, "mt-pod")
        assert _given(pod) == {
            "c0": ("Mthreads", 0, "mt-node-mthreads-0,Mthreads,8192,4:"),
            "c1": ("Mthreads", 1, "mt-node-mthreads-1,Mthreads,8192,4:"),
        }
        assert check_vendors(_snapshot(cluster)) == []
        assert cluster.vendor_agents["mt-node"].grants == [
            ("Mthreads", "default/mt-pod", 0),
            ("Mthreads", "default/mt-pod", 1),
        ]


async def test_a_pod_no_scheduler_placed_is_rejected_by_the_vendor_plugin(tmp_path: Path) -> None:
    async with running_cluster(_config(tmp_path)) as cluster:
        server = cluster.apiserver.server
        await server.create(
            "pods",
            _vendor_pod("stray", "npu-node", "huawei.com/Ascend910B3", {}),
            namespace="default",
        )

        def rejected() -> bool:
            status = server.get("pods", "stray", namespace="default")["status"]
            return bool(status.get("phase") == "Failed")

        await eventually(rejected, within=10, what="the stray pod rejected")
        status = server.get("pods", "stray", namespace="default")["status"]
        assert status["reason"] == "UnexpectedAdmissionError"
        assert "no pod on npu-node waits for Ascend910B3 devices" in status["message"]


async def test_a_device_not_on_the_node_fails_the_allocation_and_frees_the_node(
    tmp_path: Path,
) -> None:
    async with running_cluster(_config(tmp_path)) as cluster:
        server = cluster.apiserver.server
        listed = "DCU-elsewhere,DCU,1000,10:;"
        lock = encode_node_lock(NodeLock(datetime.now(UTC), "default", "foreign"))
        await server.patch(
            "nodes",
            "dcu-node",
            {"metadata": {"annotations": {keys.NODE_LOCK: lock}}},
            patch_type="merge",
        )
        annotations = {
            keys.devices_to_allocate_key("dcu"): listed,
            keys.devices_allocated_key("dcu"): listed,
            keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        }
        await server.create(
            "pods",
            _vendor_pod("foreign", "dcu-node", "hygon.com/dcunum", annotations, containers=1),
            namespace="default",
        )

        def failed() -> bool:
            pod = server.get("pods", "foreign", namespace="default")
            return PodView(pod).phase == "Failed"

        await eventually(failed, within=10, what="the pod rejected")
        pod = PodView(server.get("pods", "foreign", namespace="default"))
        assert "DCU-elsewhere not a DCU device here" in pod.status["message"]
        assert pod.annotations[keys.BIND_PHASE] == keys.BIND_PHASE_FAILED
        assert keys.NODE_LOCK not in _node(cluster, "dcu-node").annotations


async def test_after_a_kubelet_restart_the_plugins_register_again(tmp_path: Path) -> None:
    nodes = [{"name": "dcu-node", "vendors": [{"vendor": "DCU", "devices": 2}]}]
    async with running_cluster(_config(tmp_path, nodes)) as cluster:
        kubelet = cluster.kubelet("dcu-node")
        assert kubelet.registrations["hygon.com/dcunum"] == 1

        def serving() -> int:
            found = kubelet.resources().get("hygon.com/dcunum")
            return 0 if found is None else found.allocatable

        await eventually(lambda: serving() > 0, what="the DCU devices listed")
        served = serving()
        await kubelet.restart()
        agent = cluster.vendor_agents["dcu-node"]

        def served_again() -> bool:
            # Registered again (the agent counts it once the kubelet's answer is back, a moment
            # after the kubelet recorded it), and the new connection's device list is in: a pod
            # admitted before that is refused, as a real kubelet refuses it.
            return (
                kubelet.registrations.get("hygon.com/dcunum") == 2
                and agent.reregistrations == 1
                and serving() == served
            )

        await eventually(served_again, within=10, what="the DCU plugin registered again")
        uuid = device_ids(VendorDevices(vendor="DCU", devices=2), "dcu-node")[1]
        listed = f"{uuid},DCU,1000,10:;"
        annotations = {
            keys.devices_to_allocate_key("dcu"): listed,
            keys.devices_allocated_key("dcu"): listed,
            keys.BIND_PHASE: keys.BIND_PHASE_ALLOCATING,
        }
        await cluster.apiserver.server.create(
            "pods",
            _vendor_pod("after", "dcu-node", "hygon.com/dcunum", annotations, containers=1),
            namespace="default",
        )
        pod = await _running(cluster, "after")
        assert _given(pod) == {"c0": ("DCU", 0, listed.removesuffix(";"))}


def test_an_unserved_resource_is_missing_from_what_the_kubelet_advertises() -> None:
    memory = "cambricon.com/mlu.smlu.vmemory"
    whole = VendorDevices(vendor="MLU", devices=2)
    bare = VendorDevices(vendor="MLU", devices=2, unserved=frozenset({memory}))
    assert memory in kubelet_devices(whole, "n")
    assert set(kubelet_devices(bare, "n")) == set(kubelet_devices(whole, "n")) - {memory}
