"""Pure RDMA Allocate decisions and the cross-vendor completion rule."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_deviceplugin.allocation.entries import AllocatingContainer, AllocatingPod, allocating_pod
from hami_deviceplugin.allocation.pending import others_pending
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_deviceplugin.gpu.plan import AllocateOptions, HookLayout, plan_allocation
from hami_deviceplugin.rdma.nics import Nic, function_index
from hami_deviceplugin.rdma.plan import (
    DeviceSpec,
    plan_rdma_allocation,
    preferred_units,
    rdma_mismatch,
)
from hami_deviceplugin.rdma.servicer import rdma_grant_response
from hami_protocol.keys import (
    BIND_PHASE,
    NVIDIA_DEVICES_TO_ALLOCATE,
    RDMA_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    devices_to_allocate_key,
)
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices
from hami_protocol.topology.layout import (
    RdmaNic,
    VirtualFunction,
    VirtualFunctionGroup,
    list_device_id,
)

from ..helpers import devices_value

NODE = "n1"
RESOURCE = "koordinator.sh/rdma"
NICS = (
    Nic(
        RdmaNic(
            id="0000:1f:00.0",
            name="mlx5_0",
            healthy=True,
            vf_groups=(
                VirtualFunctionGroup(
                    vfs=(VirtualFunction("0000:1f:00.2", 0), VirtualFunction("0000:1f:00.3", 1))
                ),
            ),
        ),
        uverbs="uverbs0",
        vf_uverbs={"0000:1f:00.2": "uverbs4", "0000:1f:00.3": "uverbs5"},
    ),
    Nic(RdmaNic(id="0000:90:00.0", name="mlx5_1", minor=1, healthy=True), uverbs="uverbs1"),
    Nic(RdmaNic(id="0000:a0:00.0", name="irdma0", minor=2, healthy=True)),  # no uverbs
)
FUNCTIONS = function_index(NICS)


def rdma_value(*containers: Sequence[str]) -> str:
    return encode_pod_devices(
        tuple(
            tuple(ContainerDevice(list_device_id(bus), "RDMA", 0, 0) for bus in container)
            for container in containers
        )
    )


def view(
    value: str | None,
    limits: Sequence[dict[str, str]] = ({RESOURCE: "1"},),
    extra: dict[str, str] | None = None,
) -> AllocatingPod:
    annotations = dict(extra or {})
    if value is not None:
        annotations[RDMA_DEVICES_TO_ALLOCATE] = value
    return AllocatingPod(
        namespace="ns",
        name="p",
        uid="uid-1",
        containers=tuple(
            AllocatingContainer(f"c{i}", limits=tuple(sorted(lim.items())))
            for i, lim in enumerate(limits)
        ),
        annotations=annotations,
    )


def plan(pod: AllocatingPod, *requests: int) -> object:
    return plan_rdma_allocation(
        pod,
        [[f"x-{i}" for i in range(units)] for units in requests],
        functions=FUNCTIONS,
        resource_name=RESOURCE,
        node_name=NODE,
    )


def rejected(pod: AllocatingPod, *requests: int) -> AllocateError:
    with pytest.raises(AllocateError) as caught:
        plan(pod, *requests)
    return caught.value


def test_vf_and_whole_nic() -> None:
    value = rdma_value(["0000:1f:00.3", "0000:90:00.0"])
    result = plan_rdma_allocation(
        view(value, [{RESOURCE: "200"}]),
        [[f"u-{i}" for i in range(200)]],
        functions=FUNCTIONS,
        resource_name=RESOURCE,
        node_name=NODE,
    )
    assert result.done
    assert result.remaining == ";"
    (grant,) = result.grants
    assert (grant.container_index, grant.container_name) == (0, "c0")
    assert [f.bus_id for f in grant.functions] == ["0000:1f:00.3", "0000:90:00.0"]
    assert grant.devices == (
        DeviceSpec("/dev/infiniband/uverbs5", "/dev/infiniband/uverbs5", "rw"),
        DeviceSpec("/dev/infiniband/uverbs1", "/dev/infiniband/uverbs1", "rw"),
        DeviceSpec("/dev/infiniband/rdma_cm", "/dev/infiniband/rdma_cm", "rw"),
    )
    response = rdma_grant_response(grant)
    assert [(d.container_path, d.host_path, d.permissions) for d in response.devices] == [
        (d.container_path, d.host_path, d.permissions) for d in grant.devices
    ]
    assert not response.envs
    assert not response.mounts


def test_containers_in_order_skip_empty_segments() -> None:
    value = rdma_value([], ["0000:1f:00.2"], [], ["0000:1f:00.0"])
    limits = [{}, {RESOURCE: "1"}, {"nvidia.com/gpu": "1"}, {RESOURCE: "100"}]
    first = plan_rdma_allocation(
        view(value, limits),
        [["a"]],
        functions=FUNCTIONS,
        resource_name=RESOURCE,
        node_name=NODE,
    )
    assert not first.done
    assert [g.container_name for g in first.grants] == ["c1"]
    assert first.remaining == rdma_value([], [], [], ["0000:1f:00.0"])
    second = plan(view(first.remaining, limits), 100)
    assert second.done  # type: ignore[attr-defined]
    assert second.grants[0].devices[0].host_path == "/dev/infiniband/uverbs0"  # type: ignore[attr-defined]


def test_done_waits_for_the_gpu_list_and_the_gpu_plan_waits_for_rdma() -> None:
    gpu_pending = {NVIDIA_DEVICES_TO_ALLOCATE: devices_value([("GPU-a", 1000, 0)])}
    result = plan(view(rdma_value(["0000:1f:00.2"]), extra=gpu_pending), 1)
    assert not result.done  # type: ignore[attr-defined]
    consumed = {NVIDIA_DEVICES_TO_ALLOCATE: ";"}
    assert plan(view(rdma_value(["0000:1f:00.2"]), extra=consumed), 1).done  # type: ignore[attr-defined]

    gpu_pod = AllocatingPod(
        namespace="ns",
        name="p",
        uid="u",
        containers=(AllocatingContainer("c0"),),
        annotations={**gpu_pending, RDMA_DEVICES_TO_ALLOCATE: rdma_value(["0000:1f:00.2"])},
    )
    gpu_plan = plan_allocation(
        gpu_pod,
        [["GPU-a-0"]],
        gpus=frozenset({"GPU-a"}),
        options=AllocateOptions(node_name=NODE),
        layout=HookLayout(),
        cache_names=["c"],
    )
    assert not gpu_plan.done
    gpu_pod_rdma_done = AllocatingPod(
        namespace="ns",
        name="p",
        uid="u",
        containers=(AllocatingContainer("c0"),),
        annotations={**gpu_pending, RDMA_DEVICES_TO_ALLOCATE: ";"},
    )
    assert plan_allocation(
        gpu_pod_rdma_done,
        [["GPU-a-0"]],
        gpus=frozenset({"GPU-a"}),
        options=AllocateOptions(node_name=NODE),
        layout=HookLayout(),
        cache_names=["c"],
    ).done


@pytest.mark.parametrize(
    ("annotations", "own", "pending"),
    [
        ({RDMA_DEVICES_TO_ALLOCATE: "0000_1f_00.2,RDMA,0,0:;"}, NVIDIA_DEVICES_TO_ALLOCATE, True),
        ({RDMA_DEVICES_TO_ALLOCATE: ";;"}, NVIDIA_DEVICES_TO_ALLOCATE, False),
        ({NVIDIA_DEVICES_TO_ALLOCATE: "GPU-a,NVIDIA,1,0:;"}, RDMA_DEVICES_TO_ALLOCATE, True),
        ({NVIDIA_DEVICES_TO_ALLOCATE: "GPU-a,NVIDIA,1,0:;"}, NVIDIA_DEVICES_TO_ALLOCATE, False),
        ({devices_to_allocate_key("amd"): "x,AMDGPU,1,0:;"}, RDMA_DEVICES_TO_ALLOCATE, True),
        ({}, RDMA_DEVICES_TO_ALLOCATE, False),
    ],
)
def test_others_pending(annotations: dict[str, str], own: str, pending: bool) -> None:
    assert others_pending(annotations, own_key=own) is pending


@pytest.mark.parametrize(
    ("pod", "requests", "text"),
    [
        (view(None), (1,), "has no hami.io/rdma-devices-to-allocate"),
        (view(";"), (1,), "nothing left"),
        (view(rdma_value(["0000:1f:00.2"]), [{RESOURCE: "2"}]), (1,), "device number not matched"),
        (view(rdma_value(["0000:1f:00.2"]), [{}]), (1,), "asks for no koordinator.sh/rdma"),
        (view(rdma_value(["0000:55:00.0"])), (1,), "0000:55:00.0 is not an RDMA NIC or VF"),
        (view(rdma_value(["0000:1f:00.2", "0000:1f:00.2"])), (1,), "listed twice"),
        (view("0000_1f_00.2,NVIDIA,0,0:;"), (1,), "expected 'RDMA'"),
        (view("nonsense,RDMA,0,0:;"), (1,), "not a PCI bus id"),
        (view("0000_1f_00.2,RDMA:;"), (1,), "missing fields"),
        (view(rdma_value([], ["0000:1f:00.2"])), (1,), "entry 1 has no container"),
        (view(rdma_value(["0000:1f:00.2"])), (1, 1), "nothing left"),
        (view(rdma_value(["0000:1f:00.2"]), extra={VGPU_NODE: "other"}), (1,), "node 'other'"),
        (view(rdma_value(["0000:1f:00.2"]), extra={BIND_PHASE: "failed"}), (1,), "failed"),
    ],
)
def test_bad_input(pod: AllocatingPod, requests: tuple[int, ...], text: str) -> None:
    error = rejected(pod, *requests)
    assert error.kind is FailureKind.INVALID
    assert text in error.message


def test_function_without_uverbs_is_a_host_failure() -> None:
    error = rejected(view(rdma_value(["0000:a0:00.0"])), 1)
    assert error.kind is FailureKind.HOST
    assert "irdma0" in error.message
    assert "no uverbs device" in error.message


def test_unreadable_limit_skips_the_count_check() -> None:
    result = plan(view(rdma_value(["0000:1f:00.2"]), [{RESOURCE: "lots"}]), 3)
    assert result.done  # type: ignore[attr-defined]


def test_pod_view_reads_limits_over_requests() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {
                    "name": "m",
                    "resources": {
                        "requests": {RESOURCE: "1", "cpu": "1"},
                        "limits": {RESOURCE: "2"},
                    },
                }
            ]
        },
    }
    (container,) = allocating_pod(pod).containers
    assert container.limit(RESOURCE) == "2"
    assert container.limit("cpu") == "1"
    assert container.limit("memory") is None


@given(st.text(max_size=60))
def test_garbage_lists_only_raise_allocate_errors(value: str) -> None:
    kind: FailureKind | None = None
    try:
        plan(view(value), 1)
    except AllocateError as exc:
        kind = exc.kind
    assert kind in {None, FailureKind.INVALID, FailureKind.HOST}


# --- the kubelet's units and the entry's NICs ---------------------------------------------------

PF0, PF1, PF2 = (nic.id for nic in NICS)
VF0 = "0000:1f:00.2"


def units(nic: str, *numbers: int) -> list[str]:
    return [f"{nic}-{n}" for n in numbers]


def rdma_entry(*devices: tuple[str, int]) -> tuple[ContainerDevice, ...]:
    return tuple(ContainerDevice(list_device_id(bus), "RDMA", n, 0) for bus, n in devices)


@pytest.mark.parametrize(
    ("entry", "chosen", "reused", "mismatch"),
    [
        (rdma_entry((VF0, 1)), units(PF0, 7), (), None),  # a VF's units are its PF's
        (rdma_entry((PF0, 100), (PF1, 100)), units(PF0, 0) + units(PF1, 3), (), None),
        (rdma_entry((PF0, 100), (PF1, 100)), units(PF1, 0, 1), (), None),  # fewer NICs is fine
        (rdma_entry((VF0, 1)), units(PF1, 0), (), ((PF1,), (PF0,))),
        (rdma_entry((PF0, 2)), units(PF0, 0) + units(PF2, 1), (), ((PF0, PF2), (PF0,))),
        (rdma_entry((VF0, 1)), units(PF1, 4), (f"{PF1}-4",), None),  # handed on by init
        (rdma_entry(("0000:5e:00.0", 1)), units(PF1, 0), (), None),  # the plan says why
    ],
)
def test_rdma_mismatch(
    entry: tuple[ContainerDevice, ...],
    chosen: list[str],
    reused: tuple[str, ...],
    mismatch: tuple[tuple[str, ...], tuple[str, ...]] | None,
) -> None:
    found = rdma_mismatch(entry, chosen, frozenset(reused), functions=FUNCTIONS)
    assert (None if found is None else (found.chosen, found.given)) == mismatch


AVAILABLE = [*units(PF0, 0, 1, 2), *units(PF1, 0, 1, 2), *units(PF2, 0, 1)]


@pytest.mark.parametrize(
    ("entry", "must", "size", "expected"),
    [
        (rdma_entry((VF0, 1)), (), 1, units(PF0, 0)),
        # the units each NIC is charged, then the entry's NICs in turn
        (rdma_entry((PF1, 2), (PF0, 1)), (), 3, [*units(PF1, 0, 1), *units(PF0, 0)]),
        (
            rdma_entry((PF1, 0), (PF2, 0)),
            (),
            4,
            [*units(PF1, 0), *units(PF2, 0), *units(PF1, 1), *units(PF2, 1)],
        ),
        # must-include counts toward its NIC; when the entry's NICs run out, the kubelet's order
        (rdma_entry((PF2, 2)), units(PF2, 1), 4, [*units(PF2, 1, 0), *units(PF0, 0, 1)]),
        ((), (), 2, units(PF0, 0, 1)),
    ],
)
def test_preferred_units(
    entry: tuple[ContainerDevice, ...], must: list[str], size: int, expected: list[str]
) -> None:
    chosen = preferred_units(
        entry, available=AVAILABLE, must_include=must, size=size, functions=FUNCTIONS
    )
    assert list(chosen) == expected
