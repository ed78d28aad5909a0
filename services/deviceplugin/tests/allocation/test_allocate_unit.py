"""Pure Allocate decisions: decision → ContainerAllocateResponse fields, annotation rewrites."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_deviceplugin.allocation.entries import AllocatingContainer, AllocatingPod, allocating_pod
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_deviceplugin.gpu.plan import (
    AllocateOptions,
    HookLayout,
    MountSpec,
    container_grant,
    kubelet_mismatch,
    plan_allocation,
    preferred_replicas,
)
from hami_deviceplugin.gpu.servicer import grant_response
from hami_protocol.keys import BIND_PHASE, NVIDIA_DEVICES_TO_ALLOCATE, VGPU_NODE
from hami_protocol.pod.devices import (
    ContainerDevice,
    decode_pod_devices_canonical,
    encode_pod_devices,
)

from ..helpers import devices_value

NODE = "n1"
A, B = "GPU-a", "GPU-b"
OWNERS = {f"{uuid}-{i}": uuid for uuid in (A, B) for i in range(4)}
GPUS = frozenset({A, B})


def view(
    value: str | None, containers: int = 3, extra: dict[str, str] | None = None
) -> AllocatingPod:
    merged = dict(extra or {})
    if value is not None:
        merged[NVIDIA_DEVICES_TO_ALLOCATE] = value
    return AllocatingPod(
        namespace="ns",
        name="p",
        uid="uid-1",
        containers=tuple(AllocatingContainer(f"c{i}") for i in range(containers)),
        annotations=merged,
    )


def plan(pod: AllocatingPod, *requests: list[str], options: AllocateOptions | None = None) -> Any:
    return plan_allocation(
        pod,
        list(requests),
        gpus=GPUS,
        options=options or AllocateOptions(node_name=NODE),
        layout=HookLayout(),
        cache_names=[f"cache{i}" for i in range(len(requests))],
    )


def test_single_device_env_and_mounts() -> None:
    result = plan(view(devices_value([(A, 3000, 30)]), containers=1), ["GPU-x-0"])
    assert result.done
    assert result.remaining == ";"
    (grant,) = result.grants
    assert grant.container_index == 0
    assert dict(grant.envs) == {
        "NVIDIA_VISIBLE_DEVICES": A,
        "CUDA_DEVICE_MEMORY_LIMIT_0": "3000m",
        "CUDA_DEVICE_SM_LIMIT": "30",
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": "/usr/local/vgpu/cache0.cache",
    }
    assert grant.mounts == (
        MountSpec("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", True),
        MountSpec("/usr/local/vgpu", "/usr/local/vgpu/containers/uid-1_c0", False),
        MountSpec("/tmp/vgpulock", "/tmp/vgpulock", False),
        MountSpec("/etc/ld.so.preload", "/usr/local/vgpu/ld.so.preload", True),
    )
    assert grant.fresh_dirs == ("/usr/local/vgpu/containers/uid-1_c0",)
    assert grant.shared_dirs == ("/tmp/vgpulock",)


def test_grpc_response_carries_envs_and_mounts() -> None:
    result = plan(view(devices_value([(A, 10, 1)]), containers=1), ["x"])
    response = grant_response(result.grants[0])
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == A
    assert [(m.container_path, m.read_only) for m in response.mounts][-1] == (
        "/etc/ld.so.preload",
        True,
    )


@pytest.mark.parametrize(
    ("options", "present", "absent"),
    [
        (AllocateOptions(node_name=NODE, memory_scaling=1.5), {"CUDA_OVERSUBSCRIBE": "true"}, ()),
        (AllocateOptions(node_name=NODE, memory_scaling=1.0), {}, ("CUDA_OVERSUBSCRIBE",)),
        (
            AllocateOptions(node_name=NODE, disable_core_limit=True),
            {"GPU_CORE_UTILIZATION_POLICY": "disable"},
            (),
        ),
        (AllocateOptions(node_name=NODE, lib_cuda_log_level="4"), {"LIBCUDA_LOG_LEVEL": "4"}, ()),
        (
            AllocateOptions(node_name=NODE, lib_cuda_log_level=None),
            {},
            ("LIBCUDA_LOG_LEVEL", "GPU_CORE_UTILIZATION_POLICY"),
        ),
    ],
)
def test_optional_env(
    options: AllocateOptions, present: dict[str, str], absent: tuple[str, ...]
) -> None:
    grant = container_grant(
        index=0,
        container=AllocatingContainer("c"),
        devices=(ContainerDevice(A, "NVIDIA", 100, 0),),
        pod_uid="u",
        options=options,
        layout=HookLayout(),
        cache_name="x",
    )
    for key, value in present.items():
        assert grant.envs[key] == value
    for key in absent:
        assert key not in grant.envs


def test_disable_control_drops_ld_preload_and_license_adds_files() -> None:
    grant = container_grant(
        index=2,
        container=AllocatingContainer("c", disable_control=True),
        devices=(ContainerDevice(A, "NVIDIA", 100, 0), ContainerDevice(B, "NVIDIA", 200, 0)),
        pod_uid="u",
        options=AllocateOptions(node_name=NODE),
        layout=HookLayout(
            hook_path="/opt/hami/", libvgpu_host_path="/opt/hami/vgpu/libvgpu.so.1", license=True
        ),
        cache_name="x",
    )
    paths = {m.container_path: m.host_path for m in grant.mounts}
    assert "/etc/ld.so.preload" not in paths
    assert paths["/opt/hami/vgpu/libvgpu.so"] == "/opt/hami/vgpu/libvgpu.so.1"
    assert paths["/tmp/license"] == "/opt/hami/vgpu/license"
    assert paths["/usr/bin/vgpuvalidator"] == "/opt/hami/vgpu/vgpuvalidator"
    assert grant.envs["NVIDIA_VISIBLE_DEVICES"] == f"{A},{B}"
    assert grant.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "200m"


def test_same_gpu_twice_is_listed_once() -> None:
    grant = container_grant(
        index=0,
        container=AllocatingContainer("c"),
        devices=(ContainerDevice(A, "NVIDIA", 100, 0), ContainerDevice(A, "NVIDIA", 50, 0)),
        pod_uid="u",
        options=AllocateOptions(node_name=NODE),
        layout=HookLayout(),
        cache_name="x",
    )
    assert grant.envs["NVIDIA_VISIBLE_DEVICES"] == A
    assert grant.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "50m"


def test_entries_are_consumed_in_order_and_skip_empty_segments() -> None:
    value = devices_value([(A, 1, 0)], [], [(A, 2, 0), (B, 3, 0)])
    first = plan(view(value), ["x"])
    assert first.grants[0].container_name == "c0"
    assert not first.done
    assert first.remaining == ";;" + "GPU-a,NVIDIA,2,0:GPU-b,NVIDIA,3,0:;"
    second = plan(view(first.remaining), ["x", "y"])
    assert second.grants[0].container_name == "c2"
    assert second.done
    assert second.remaining == ";;;"
    # The list never grows: one segment per container, however often it is rewritten.
    assert len(decode_pod_devices_canonical(second.remaining)) == 3


def test_two_requests_in_one_call() -> None:
    value = devices_value([(A, 1, 0)], [(B, 2, 0)])
    result = plan(view(value, containers=2), ["x"], ["y"])
    assert [g.container_name for g in result.grants] == ["c0", "c1"]
    assert result.done


def test_other_vendor_pending_keeps_the_pod_allocating() -> None:
    value = devices_value([(A, 1, 0)])
    pod = view(value, 1, {"hami.io/cambricon-mlu-devices-to-allocate": "MLU-1,MLU,1,0:;"})
    assert not plan(pod, ["x"]).done


def gpu_entry(*uuids: str) -> tuple[ContainerDevice, ...]:
    return tuple(ContainerDevice(uuid, "NVIDIA", 100, 10) for uuid in uuids)


@pytest.mark.parametrize(
    ("uuids", "replicas", "reused", "mismatch"),
    [
        ((A,), [f"{A}-2"], (), None),
        ((A, B), [f"{B}-0", f"{A}-3"], (), None),  # any order
        ((A, A), [f"{A}-0", f"{A}-1"], (), None),  # the same GPU twice
        ((A,), [f"{B}-2"], (), ((B,), (A,))),
        ((A, A), [f"{A}-0", f"{B}-1"], (), ((A, B), (A, A))),  # a multiset, not a set
        ((A,), ["GPU-zzz-0"], (), (("GPU-zzz-0",), (A,))),  # not our replica
        ((B,), [f"{A}-1"], (f"{A}-1",), None),  # an init container's replica, handed on
        ((B, B), [f"{A}-1", f"{A}-2"], (f"{A}-1",), ((A, A), (B, B))),
        ((A, B), [f"{A}-1"], (), None),  # another count: the plan's to report
        (("GPU-c",), [f"{A}-1"], (), None),  # not a GPU of this node: the plan's to report
    ],
)
def test_kubelet_mismatch(
    uuids: tuple[str, ...],
    replicas: list[str],
    reused: tuple[str, ...],
    mismatch: tuple[tuple[str, ...], tuple[str, ...]] | None,
) -> None:
    found = kubelet_mismatch(gpu_entry(*uuids), replicas, frozenset(reused), owners=OWNERS)
    assert (None if found is None else (found.chosen, found.given)) == mismatch


def test_the_answer_names_the_entrys_gpus_whatever_replicas_the_kubelet_sent() -> None:
    # Identity has checked the replicas against the entry; the plan answers with the entry.
    result = plan(view(devices_value([(A, 100, 10)]), containers=1), [f"{A}-3"])
    assert result.grants[0].envs["NVIDIA_VISIBLE_DEVICES"] == A
    assert result.grants[0].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "100m"


@pytest.mark.parametrize(
    ("pod", "requests", "message"),
    [
        (view(None), [["x"]], "has no hami.io/vgpu-devices-to-allocate"),
        (view("GPU-a,NVIDIA,1:;"), [["x"]], "missing fields"),
        (view("GPU-a,NVIDIA,x,0:;"), [["x"]], "must be integers"),
        (view(devices_value([(A, 1, 0)])), [["x", "y"]], "device number not matched"),
        (view(devices_value([("GPU-c", 1, 0)])), [["x"]], "is not a GPU of node n1"),
        (view(devices_value([], [])), [["x"]], "is waiting for devices"),
        (view(devices_value([(A, 1, 0)])), [["x"], ["y"]], "is waiting for devices"),
        (view(devices_value([], [(A, 1, 0)]), containers=1), [["x"]], "entry 1 has no container"),
        (view(devices_value([(A, 1, 0)]), 3, {VGPU_NODE: "n2"}), [["x"]], "scheduled to node 'n2'"),
        (view(devices_value([(A, 1, 0)]), 3, {BIND_PHASE: "failed"}), [["x"]], "already failed"),
    ],
)
def test_invalid_inputs(pod: AllocatingPod, requests: list[list[str]], message: str) -> None:
    with pytest.raises(AllocateError, match=message) as caught:
        plan(pod, *requests)
    assert caught.value.kind is FailureKind.INVALID


def test_placeholder_devices_are_dropped() -> None:
    # Some HAMi versions wrote ",,0,0:" for containers without devices.
    result = plan(view(",,0,0:;GPU-a,NVIDIA,5,0:;", containers=2), ["x"])
    assert result.grants[0].container_name == "c1"
    assert result.remaining == ";;"


uuids = st.sampled_from([A, B])
entry = st.lists(
    st.tuples(uuids, st.integers(0, 10**6), st.integers(0, 100)), min_size=0, max_size=3
)


@given(st.lists(entry, min_size=1, max_size=6))
def test_consuming_everything_ends_done_with_empty_segments(
    entries: list[list[tuple[str, int, int]]],
) -> None:
    value = devices_value(*entries)
    pending = [e for e in entries if e]
    pod = view(value, containers=len(entries))
    for number, item in enumerate(pending):
        result = plan(pod, ["x"] * len(item))
        assert [d.usedmem for d in result.grants[0].devices] == [m for _, m, _ in item]
        assert result.done == (number == len(pending) - 1)
        pod = view(result.remaining, containers=len(entries))
    assert pod.annotations[NVIDIA_DEVICES_TO_ALLOCATE] == ";" * len(entries)


@given(st.text(max_size=60))
def test_garbage_annotations_only_raise_allocate_error(value: str) -> None:
    try:
        plan(view(value), ["x"])
    except AllocateError as exc:
        kind = exc.kind
    else:
        kind = FailureKind.INVALID
    assert kind is FailureKind.INVALID


def test_pod_view_reads_containers_in_admission_order() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "annotations": {"a": "b"}},
        "spec": {
            "initContainers": [{"name": "i", "env": [{"name": "CUDA_DISABLE_CONTROL"}]}],
            "containers": [
                {"name": "m", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "True"}]},
                {"name": "n", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "yes"}]},
            ],
        },
    }
    parsed = allocating_pod(pod)
    assert parsed.containers == (
        AllocatingContainer("i", False, kind="init"),
        AllocatingContainer("m", True),
        AllocatingContainer("n", False),  # Go's ParseBool does not know "yes"
    )
    assert parsed.annotations == {"a": "b"}
    assert allocating_pod({}).containers == ()


def test_preferred_replicas() -> None:
    available = [f"{A}-0", f"{A}-1", f"{B}-0", f"{B}-1"]
    assert preferred_replicas([B], available=available, must_include=[], size=1, owners=OWNERS) == (
        f"{B}-0",
    )
    assert preferred_replicas(
        [B, A], available=available, must_include=[], size=2, owners=OWNERS
    ) == (f"{B}-0", f"{A}-0")
    # must_include first; its GPU is not picked twice; the rest in the kubelet's order.
    assert preferred_replicas(
        [A, B], available=available, must_include=[f"{A}-1"], size=3, owners=OWNERS
    ) == (f"{A}-1", f"{B}-0", f"{A}-0")
    assert preferred_replicas([], available=available, must_include=[], size=2, owners=OWNERS) == (
        f"{A}-0",
        f"{A}-1",
    )
    # A GPU named twice gets two of its replicas; a must-include replica counts toward its GPU.
    assert preferred_replicas(
        [B, B], available=available, must_include=[], size=2, owners=OWNERS
    ) == (f"{B}-0", f"{B}-1")
    assert preferred_replicas(
        [B, B], available=available, must_include=[f"{B}-1"], size=2, owners=OWNERS
    ) == (f"{B}-1", f"{B}-0")


def test_encoding_round_trip_used_by_the_tests() -> None:
    value = devices_value([(A, 1, 2)], [])
    assert value == "GPU-a,NVIDIA,1,2:;;"
    assert encode_pod_devices(decode_pod_devices_canonical(value)) == value
