"""The DRA invariants over hand-made snapshots: consumed capacity within each device's, a
container's record matching its claim's allocation, no CDI spec outliving its claim; the vGPU
monitor check for DRA containers; and the stack's DRA wiring (plugin flags, directories)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hami_kubesim import dra_objects as dra
from hami_kubesim.demo import DEMO_NODES, DRA_EXAMPLES, DRA_NODE, EXAMPLES_DIR, load_examples
from hami_kubesim.stack.checks.dra import (
    capacity_problems,
    cdi_problems,
    dra_container_devices,
    env_problems,
)
from hami_kubesim.stack.checks.expectations import expectation_of
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.checks.usage import DeviceReading, MonitorUsage, monitor_problems
from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ALLOCATIONS_ANNOTATION, CdiFile, ClusterState
from hami_kubesim.stack.system.handle import claim_uid_of_spec
from hami_kubesim.stack.system.services import deviceplugin_args, dra_dirs
from hami_kubesim.stack.system.spec import SystemSpec, dra_node

NOW = datetime(2026, 7, 1, tzinfo=UTC)
NODE = "dra-1"
UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
MIB = 1 << 20


def _slice(*, shared: bool = True, generation: int = 1) -> dict[str, Any]:
    item = dra.resource_slice(NODE, [dra.gpu_device(0, uuid=UUID, shared=shared)])
    item["spec"]["pool"]["generation"] = generation
    return item


def _claim(
    name: str, memory: str, *, pod: str = "", cores: str = "0", allocated: bool = True
) -> dict[str, Any]:
    claim = dra.resource_claim(name, dra.exact_request("gpu", capacity={"memory": memory}))
    claim["metadata"]["uid"] = f"uid-{name}"
    if allocated:
        result = dra.allocation_result(
            "gpu", "gpu-0", pool=NODE, share_id="s", consumed={"memory": memory, "cores": cores}
        )
        claim["status"] = {"allocation": dra.allocation([result], node=NODE)}
        if pod:
            claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": pod}]
    return claim


def _pod(name: str, claim: str, env: dict[str, str], *, device: str = "gpu-0") -> dict[str, Any]:
    record = {
        "node": NODE,
        "containers": [
            {
                "name": "cuda",
                "kind": "app",
                "resources": [
                    {
                        "resource": "claim:gpu",
                        "deviceIDs": [f"gpu.hami.io/{NODE}/{device}"],
                        "envs": env,
                    }
                ],
            }
        ],
    }
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": name,
            "annotations": {ALLOCATIONS_ANNOTATION: json.dumps(record)},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [dra.pod_claim("gpu", claim=claim)],
        },
        "status": {"phase": "Running"},
    }


def _env(mib: int, sm: str = "0", uuid: str = UUID) -> dict[str, str]:
    return {
        "NVIDIA_VISIBLE_DEVICES": uuid,
        "CUDA_DEVICE_MEMORY_LIMIT_0": f"{mib}m",
        "CUDA_DEVICE_SM_LIMIT": sm,
    }


def _state(
    pods: tuple[dict[str, Any], ...] = (),
    claims: tuple[dict[str, Any], ...] = (),
    slices: tuple[dict[str, Any], ...] = (),
    **extra: Any,
) -> ClusterState:
    return ClusterState(pods, (), (), NOW, claims=claims, slices=slices, **extra)


def test_claims_within_the_device_pass_and_over_commitment_is_found() -> None:
    fits = (_claim("a", "4Gi"), _claim("b", "12Gi"))
    assert capacity_problems(_state(claims=fits, slices=(_slice(),))) == []
    over = (_claim("a", "8Gi"), _claim("b", "12Gi"))
    ((subject, message),) = capacity_problems(_state(claims=over, slices=(_slice(),)))
    assert subject == f"gpu.hami.io/{NODE}/gpu-0"
    assert "memory over-committed" in message


def test_a_whole_device_in_two_claims_and_only_the_newest_generation_counts() -> None:
    claims = (_claim("a", "4Gi"), _claim("b", "4Gi"))
    stale = _slice(shared=True, generation=1)
    newest = _slice(shared=False, generation=2)
    newest["metadata"]["name"] = "other"
    ((_, message),) = capacity_problems(_state(claims=claims, slices=(stale, newest)))
    assert "not shareable" in message


def test_a_device_no_slice_publishes_any_more_is_not_judged() -> None:
    assert capacity_problems(_state(claims=(_claim("a", "20Gi"),))) == []


def test_the_env_must_be_the_claims_allocation() -> None:
    claim = _claim("a", "4Gi", pod="p", cores="30")
    good = _pod("p", "a", _env(4096, "30"))
    assert env_problems(_state((good,), (claim,), (_slice(),))) == []
    wrong = _pod("p", "a", {**_env(16384, "0"), "NVIDIA_VISIBLE_DEVICES": "GPU-other"})
    problems = [m for _, m in env_problems(_state((wrong,), (claim,), (_slice(),)))]
    assert any("memory limits ['16384m']" in m for m in problems)
    assert any("NVIDIA_VISIBLE_DEVICES" in m for m in problems)
    assert any("CUDA_DEVICE_SM_LIMIT" in m for m in problems)


def test_a_running_container_needs_its_claim_allocated_and_reserved() -> None:
    pod = _pod("p", "a", _env(4096))
    gone = env_problems(_state((pod,), (), (_slice(),)))
    assert [m for _, m in gone] == ["runs with claim 'gpu' that does not exist"]
    unreserved = env_problems(_state((pod,), (_claim("a", "4Gi"),), (_slice(),)))
    assert [m for _, m in unreserved] == ["claim default/a is not reserved for it"]
    other = _pod("p", "a", _env(4096), device="gpu-1")
    claim = _claim("a", "4Gi", pod="p")
    (message,) = [m for _, m in env_problems(_state((other,), (claim,), (_slice(),)))]
    assert message.startswith("got devices")


def test_a_cdi_spec_outliving_its_claim_is_found_unless_being_unprepared() -> None:
    spec = CdiFile(NODE, "uid-a", "k8s.gpu.hami.io-claim_uid-a.json")
    assert cdi_problems(_state(claims=(_claim("a", "4Gi"),), cdi_files=(spec,))) == []
    (problem,) = cdi_problems(_state(cdi_files=(spec,)))
    assert "uid-a" in problem[1]
    deallocated = _claim("a", "4Gi", allocated=False)
    assert cdi_problems(_state(claims=(deallocated,), cdi_files=(spec,))) != []
    pending = _state(cdi_files=(spec,), unpreparing=frozenset({"uid-a"}))
    assert cdi_problems(pending) == []


def test_check_all_runs_the_dra_checks_and_passes_without_dra() -> None:
    assert check_all(_state()) == ()
    over = (_claim("a", "8Gi"), _claim("b", "12Gi"))
    assert [v.check for v in check_all(_state(claims=over, slices=(_slice(),)))] == ["dra-capacity"]


def test_the_monitor_must_report_a_dra_container_with_its_cdi_limit() -> None:
    pod = _pod("p", "a", _env(4096))
    assert dra_container_devices(pod) == [("cuda", [(UUID, 4096)])]
    state = _state((pod,))
    assert monitor_problems(state, MonitorUsage()) == [
        "default/p cuda: no series from the vGPU monitor"
    ]
    reading = DeviceReading(0, UUID, limit_bytes=4096 * MIB)
    assert monitor_problems(state, MonitorUsage({("default", "p", "cuda"): (reading,)})) == []


def test_a_dra_nodes_plugin_runs_in_the_dirs_its_kubelet_reads(tmp_path: Path) -> None:
    node = dra_node(NODE)
    spec = SystemSpec(nodes=(node,))
    assert spec.dra
    assert not node.extender_gpus
    plugin_dir = tmp_path / NODE
    args = deviceplugin_args(
        spec, node, api_url="http://x", kubelet_socket=plugin_dir / "kubelet.sock", devices=tmp_path
    )
    dirs = dra_dirs(plugin_dir)
    assert "--mode=dra" in args
    assert f"--kubelet-dir={dirs.kubelet_dir}" in args
    assert f"--cdi-dir={dirs.cdi_dir}" in args
    assert dirs.registry_dir == dirs.kubelet_dir / "plugins_registry"
    assert claim_uid_of_spec("k8s.gpu.hami.io-claim_0abc.json") == "0abc"
    assert claim_uid_of_spec("other.json") == ""


def test_the_demos_dra_examples_fit_two_claims_and_refuse_the_third() -> None:
    documents = load_examples(EXAMPLES_DIR / DRA_EXAMPLES)
    pods = [d for d in documents if d["kind"] == "Pod"]
    wanted = {p["metadata"]["name"]: expectation_of(p) for p in pods}
    outcomes = {name: w.outcome for name, w in wanted.items() if w is not None}
    assert outcomes == {
        "dra-train": "placed",
        "dra-infer": "placed",
        "dra-too-big": "unschedulable",
    }
    node = next(n for n in DEMO_NODES if n.name == DRA_NODE)
    assert node.dra
    (taint,) = node.taints
    (gpu,) = node.gpus
    for pod in pods:
        assert pod["spec"]["nodeSelector"].items() <= node.labels.items()
        assert [t["key"] for t in pod["spec"]["tolerations"]] == [taint["key"]]
    memory = [
        int(str(r["exactly"]["capacity"]["requests"]["memory"]).removesuffix("Gi")) * 1024
        for d in documents
        if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
        for r in (d["spec"].get("spec") or d["spec"])["devices"]["requests"]
    ]
    assert sorted(memory) == [4096, 4096, 10240]
    assert 4096 * 2 <= gpu.memory_mib < sum(memory)


def test_the_report_lists_claims_and_what_a_dra_container_got() -> None:
    claim = _claim("a", "4Gi", pod="p")
    pending = _claim("big", "10Gi", allocated=False)
    pod = _pod("p", "a", _env(4096))
    text = render_report(_state((pod,), (claim, pending), (_slice(),)))
    assert "DRA claims (2)" in text
    assert f"default/a: {NODE}/gpu-0 cores 0 memory 4Gi; reserved for p" in text
    assert "default/big: not allocated; reserved for -" in text
    assert f"cuda: claim:gpu: gpu.hami.io/{NODE}/gpu-0 memory 4096m SM limit 0" in text


def test_the_utilisation_table_lists_dra_gpus_with_the_claims_holding_them() -> None:
    shares = (_claim("a", "4Gi", pod="p", cores="30"), _claim("b", "2Gi", pod="q"))
    text = render_report(_state(claims=shares, slices=(_slice(),)))
    table = text.split("GPU utilisation")[1]
    assert f"  {NODE}  (1 DRA GPUs: NVIDIA-A100)" in table
    assert "#0 GPU-aaaaaaaa…  DRA gpu-0  mem   6144/16384  MiB  37%  cores  30/100" in table
    assert table.rstrip().endswith("a → p, b → q")

    whole = dra.allocation_result("gpu", "gpu-0", pool=NODE)
    exclusive = _claim("w", "16Gi", allocated=False)
    exclusive["status"] = {"allocation": dra.allocation([whole], node=NODE)}
    text = render_report(_state(claims=(exclusive,), slices=(_slice(shared=False),)))
    assert "mem  16384/16384  MiB 100%  cores 100/100  w → -" in text.split("GPU utilisation")[1]


def test_a_dra_gpu_nobody_claims_is_listed_free() -> None:
    table = render_report(_state(slices=(_slice(),))).split("GPU utilisation")[1]
    assert "DRA gpu-0  mem      0/16384  MiB   0%  cores   0/100  -" in table
