"""Pure parts of the DRA mode: the ResourceSlice, reading claims, CDI specs, the claim plan and
the checkpoint codec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hami_deviceplugin.allocation.entries import AllocatingContainer
from hami_deviceplugin.dra.cdi import device_id, minimum_version, spec_file_name
from hami_deviceplugin.dra.checkpoint import (
    CheckpointError,
    PreparedClaim,
    PreparedDevice,
    load_checkpoint,
    save_checkpoint,
)
from hami_deviceplugin.dra.claims import (
    ClaimError,
    ClaimRef,
    allocated_devices,
    claim_user,
    reserved_pods,
)
from hami_deviceplugin.dra.plan import PlanInputs, plan_claim
from hami_deviceplugin.dra.slices import (
    SliceOptions,
    desired_slice,
    memory_quantity,
    slice_devices,
)
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.plan import AllocateOptions, HookLayout, container_grant
from hami_deviceplugin.node.register import annotations_to_withdraw
from hami_kubesim import dra_objects as dra
from hami_protocol.dra_driver import device_index, device_name
from hami_protocol.keys import NVIDIA_HANDSHAKE, NVIDIA_REGISTER
from hami_protocol.pod.devices import ContainerDevice

NODE = "node-a"
GPUS = (
    Gpu(uuid="GPU-a", index=0, model="Tesla T4", memory_mib=16384, numa=1, pcie_root="pci0000:00"),
    Gpu(uuid="GPU-b", index=1, model="NVIDIA A30", memory_mib=24576),
)
REF = ClaimRef(namespace="ns", uid="0f1e-uid", name="train")


# --- slices -------------------------------------------------------------------------------------
def test_memory_quantity_is_canonical() -> None:
    assert memory_quantity(16384) == "16Gi"
    assert memory_quantity(15000) == "15000Mi"
    assert memory_quantity(1024 * 1024) == "1Ti"


def test_shared_devices_match_the_emulators_builder_and_decisions() -> None:
    devices = slice_devices(GPUS, SliceOptions(node_name=NODE))
    wanted = dra.gpu_device(0, memory="16Gi", uuid="GPU-a", model="NVIDIA-Tesla T4", numa=1)
    assert devices[0]["capacity"] == wanted["capacity"]
    assert devices[0]["allowMultipleAllocations"] is True
    assert devices[0]["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:00"}
    assert devices[0]["attributes"]["index"] == {"int": 0}
    assert devices[1]["attributes"]["model"] == {"string": "NVIDIA A30"}
    assert devices[1]["capacity"]["memory"]["requestPolicy"]["default"] == "24Gi"
    assert devices[1]["capacity"]["cores"]["requestPolicy"] == {
        "default": "0",
        "validRange": {"min": "0", "max": "100", "step": "1"},
    }


def test_whole_gpus_have_no_policies_and_unhealthy_gpus_are_left_out() -> None:
    gpus = (GPUS[0], Gpu(uuid="GPU-b", index=1, model="A30", memory_mib=8192, healthy=False))
    devices = slice_devices(gpus, SliceOptions(node_name=NODE, shared=False, memory_scaling=1.5))
    assert [d["name"] for d in devices] == ["gpu-0"]
    assert "allowMultipleAllocations" not in devices[0]
    assert devices[0]["capacity"] == {"memory": {"value": "24Gi"}, "cores": {"value": "100"}}


def test_desired_slice_creates_then_bumps_generation_only_on_change() -> None:
    devices = slice_devices(GPUS, SliceOptions(node_name=NODE))
    created = desired_slice(None, devices, node_name=NODE, node_uid="n-uid")
    assert created is not None
    assert created["metadata"]["name"] == "node-a-gpu-hami-io"
    assert created["metadata"]["ownerReferences"][0]["uid"] == "n-uid"
    assert created["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert created["spec"]["nodeName"] == NODE
    stored = {**created, "metadata": {**created["metadata"], "resourceVersion": "7"}}
    assert desired_slice(stored, devices, node_name=NODE, node_uid="n-uid") is None
    changed = desired_slice(stored, devices[:1], node_name=NODE, node_uid="n-uid")
    assert changed is not None
    assert changed["spec"]["pool"]["generation"] == 2
    assert changed["metadata"]["resourceVersion"] == "7"


def test_device_names_round_trip() -> None:
    assert device_name(3) == "gpu-3"
    assert device_index("gpu-3") == 3
    assert device_index("gpu-03") is None
    assert device_index("nic-0") is None


# --- claims -------------------------------------------------------------------------------------
def _claim(results: list[dict[str, Any]], *, uid: str = REF.uid, **status: Any) -> dict[str, Any]:
    claim = dra.resource_claim(REF.name, namespace=REF.namespace)
    claim["metadata"]["uid"] = uid
    claim["status"] = {"allocation": dra.allocation(results, node=NODE), **status}
    return claim


def test_allocated_devices_reads_our_results() -> None:
    claim = _claim(
        [
            dra.allocation_result(
                "gpu/small",
                "gpu-1",
                pool=NODE,
                share_id="s1",
                consumed={"memory": "4Gi", "cores": 30},
            ),
            dra.allocation_result("gpu", "nic-0", pool=NODE, driver="other.example"),
        ]
    )
    (found,) = allocated_devices(claim, REF, pool=NODE)
    assert (found.request, found.device, found.share_id) == ("gpu", "gpu-1", "s1")
    assert (found.memory_bytes, found.cores) == (4 << 30, 30)


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        (_claim([], uid="other"), "got replaced"),
        ({**_claim([]), "status": {}}, "not allocated"),
        (_claim([dra.allocation_result("gpu", "gpu-0", pool="node-b")]), "not from this node"),
        (_claim([{"driver": "gpu.hami.io", "pool": NODE}]), "has no request"),
        ({**_claim([]), "status": {"allocation": {"devices": {"results": {}}}}}, "not a list"),
        (
            _claim([dra.allocation_result("gpu", "gpu-0", pool=NODE, consumed={"memory": "x"})]),
            "consumedCapacity.memory",
        ),
    ],
)
def test_allocated_devices_refuses(claim: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimError, match=message):
        allocated_devices(claim, REF, pool=NODE)


def _pod(uid: str = "pod-uid") -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": uid},
        "spec": {
            "resourceClaims": [dra.pod_claim("gpus", claim=REF.name)],
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "gpus"}]}}],
            "containers": [
                {"name": "side", "resources": {"claims": [dra.container_claim("gpus", "other")]}},
                {
                    "name": "main",
                    "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}],
                    "resources": {"claims": [dra.container_claim("gpus", "gpu")]},
                },
            ],
        },
    }


def test_claim_user_prefers_app_containers_and_matches_requests() -> None:
    assert claim_user(_pod(), REF.name, "gpu") == "main"
    assert claim_user(_pod(), REF.name, "other") == "side"
    assert claim_user(_pod(), REF.name, "third") == "init"
    assert claim_user(_pod(), "unrelated", "gpu") == "unrelated"
    templated = {"spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "t"}]}}]}}
    templated["status"] = {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "gen-1"}]}
    assert claim_user(templated, "gen-1", "gpu") == "c"


def test_reserved_pods_keeps_pods_only() -> None:
    claim = _claim([], reservedFor=[{"resource": "pods", "name": "p", "uid": "u"}, {"name": "x"}])
    assert [(p.name, p.uid) for p in reserved_pods(claim)] == [("p", "u")]


# --- CDI and the plan ---------------------------------------------------------------------------
def test_cdi_names() -> None:
    assert spec_file_name("0f1e") == "k8s.gpu.hami.io-claim_0f1e.json"
    assert device_id("0f1e-gpu") == "k8s.gpu.hami.io/claim=0f1e-gpu"
    assert minimum_version(["0f1e-gpu"]) == "0.5.0"
    assert minimum_version(["a0f1e-gpu"]) == "0.3.0"


def _inputs(**options: Any) -> PlanInputs:
    return PlanInputs(
        node_name=NODE,
        gpus=GPUS,
        options=AllocateOptions(node_name=NODE, **options),
        layout=HookLayout(hook_path="/usr/local"),
    )


def _names() -> Any:
    names = iter(["cache-1", "cache-2", "cache-3"])
    return lambda: next(names)


def test_plan_edits_equal_the_allocate_grant_for_the_same_devices() -> None:
    claim = _claim(
        [
            dra.allocation_result(
                "gpu", "gpu-1", pool=NODE, share_id="s1", consumed={"memory": "3000Mi", "cores": 25}
            ),
            dra.allocation_result("gpu", "gpu-0", pool=NODE),
        ]
    )
    plan = plan_claim(
        REF, claim, _pod(), pod_uid="pod-uid", node=_inputs(), prepared={}, cache_name=_names()
    )
    expected = container_grant(
        index=2,
        container=AllocatingContainer("main", disable_control=True),
        devices=(
            ContainerDevice("GPU-b", "NVIDIA", 3000, 25),
            ContainerDevice("GPU-a", "NVIDIA", 16384, 0),
        ),
        pod_uid="pod-uid",
        options=AllocateOptions(node_name=NODE),
        layout=HookLayout(hook_path="/usr/local"),
        cache_name="cache-1",
    )
    assert plan.grants == (expected,)
    (device,) = plan.prepared.spec["devices"]
    assert device["name"] == "0f1e-uid-gpu"
    assert device["containerEdits"]["env"] == [f"{k}={v}" for k, v in expected.envs.items()]
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=3000m" in device["containerEdits"]["env"]
    assert "CUDA_DEVICE_SM_LIMIT=25" in device["containerEdits"]["env"]
    assert plan.prepared.spec["cdiVersion"] == "0.5.0"
    assert plan.prepared.spec["kind"] == "k8s.gpu.hami.io/claim"
    mounts = {m["containerPath"]: m for m in device["containerEdits"]["mounts"]}
    assert mounts["/usr/local/vgpu"]["hostPath"] == "/usr/local/vgpu/containers/pod-uid_main"
    assert mounts["/usr/local/vgpu/libvgpu.so"]["options"] == ["bind", "ro"]
    assert "/etc/ld.so.preload" not in mounts  # the container set CUDA_DISABLE_CONTROL
    assert [(d.device, d.share_id, d.cdi_ids) for d in plan.prepared.devices] == [
        ("gpu-1", "s1", ("k8s.gpu.hami.io/claim=0f1e-uid-gpu",)),
        ("gpu-0", None, ("k8s.gpu.hami.io/claim=0f1e-uid-gpu",)),
    ]


def test_plan_refuses_vanished_devices_and_exclusive_clashes() -> None:
    vanished = _claim([dra.allocation_result("gpu", "gpu-7", pool=NODE)])
    with pytest.raises(ClaimError, match="not a healthy GPU"):
        plan_claim(
            REF, vanished, None, pod_uid="u", node=_inputs(), prepared={}, cache_name=_names()
        )
    held = PreparedClaim(
        "ns", "other", "uid-2", (PreparedDevice(("g",), NODE, "gpu-0", ()),), "", {}
    )
    shared = _claim([dra.allocation_result("gpu", "gpu-0", pool=NODE, share_id="s")])
    with pytest.raises(ClaimError, match="already prepared for claim ns/other"):
        plan_claim(
            REF,
            shared,
            None,
            pod_uid="u",
            node=_inputs(),
            prepared={"uid-2": held},
            cache_name=_names(),
        )


def test_plan_of_a_claim_without_our_devices_has_no_spec() -> None:
    claim = _claim([dra.allocation_result("gpu", "x", pool=NODE, driver="other.example")])
    plan = plan_claim(
        REF, claim, None, pod_uid="u", node=_inputs(), prepared={}, cache_name=_names()
    )
    assert plan.prepared.devices == ()
    assert plan.prepared.spec_file == ""


# --- checkpoint and node annotations ------------------------------------------------------------
def test_checkpoint_round_trips_and_refuses_garbage(tmp_path: Path) -> None:
    path = tmp_path / "state" / "checkpoint.json"
    assert load_checkpoint(path) == {}
    claim = PreparedClaim(
        "ns",
        "c",
        "uid-1",
        (PreparedDevice(("gpu",), NODE, "gpu-0", ("k/c=x",), share_id="s"),),
        "f.json",
        {"cdiVersion": "0.3.0"},
    )
    save_checkpoint(path, {"uid-1": claim})
    assert load_checkpoint(path) == {"uid-1": claim}
    path.write_text("{not json")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_checkpoint(path)
    path.write_text('{"version": 9}')
    with pytest.raises(CheckpointError, match="version 1"):
        load_checkpoint(path)


def test_dra_mode_withdraws_only_present_device_plugin_annotations() -> None:
    current = {NVIDIA_REGISTER: "[]", NVIDIA_HANDSHAKE: "Reported x", "other": "1"}
    assert annotations_to_withdraw(current) == {NVIDIA_REGISTER: None, NVIDIA_HANDSHAKE: None}
    assert annotations_to_withdraw({"other": "1"}) == {}
