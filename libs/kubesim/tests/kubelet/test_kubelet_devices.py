"""Pure device-manager decisions of the kubelet stand-in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube.objects import PodView
from hami_kubesim.kubelet.deviceplugins.devices import (
    ContainerDemand,
    DeviceAllocationError,
    DeviceLedger,
    ResourceDevices,
    container_demands,
    finish_selection,
    is_extended_resource_name,
    register_error,
    start_selection,
)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("nvidia.com/gpu", True),
        ("hami.io/vgpu-mem_1", True),
        ("example.com/x.y", True),
        ("cpu", False),
        ("memory", False),
        ("kubernetes.io/gpu", False),
        ("foo.kubernetes.io/gpu", False),
        ("requests.example.com/gpu", False),
        ("Example.com/gpu", False),
        ("example.com/", False),
        ("example.com/a/b", False),
        ("example.com/-gpu", False),
        ("example.com/" + "g" * 64, False),
        ("example.com/" + "g" * 63, True),
    ],
)
def test_extended_resource_names(name: str, ok: bool) -> None:
    assert is_extended_resource_name(name) is ok


def test_register_error_texts() -> None:
    assert register_error(version="v1beta1", resource_name="nvidia.com/gpu") is None
    assert register_error(version="v1alpha", resource_name="nvidia.com/gpu") == (
        'requested API version "v1alpha" is not supported by kubelet. '
        'Supported version is ["v1beta1"]'
    )
    assert register_error(version="v1beta1", resource_name="gpu") == (
        'the ResourceName "gpu" is invalid'
    )


def test_resource_devices_counts() -> None:
    devices = ResourceDevices.from_list(
        [("a", "Healthy"), ("b", "Unhealthy"), ("c", "healthy"), ("d", "Healthy")]
    )
    assert (devices.capacity, devices.allocatable) == (4, 2)
    assert devices.healthy == {"a", "d"}
    gone = devices.all_unhealthy()
    assert (gone.capacity, gone.allocatable) == (4, 0)


def _container(name: str, **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": resources}


def test_container_demands_order_kinds_and_filtering() -> None:
    pod = {
        "spec": {
            "initContainers": [
                _container("init", limits={"nvidia.com/gpu": "1", "cpu": "1"}),
                {**_container("side", limits={"nvidia.com/gpu": 2}), "restartPolicy": "Always"},
            ],
            "containers": [
                _container("main", requests={"nvidia.com/gpu": "3"}),
                _container("plain", limits={"cpu": "2", "other.io/x": "1"}),
                _container(
                    "both", limits={"nvidia.com/gpu": "1"}, requests={"nvidia.com/gpu": "1"}
                ),
            ],
        }
    }
    demands = container_demands(PodView(pod), lambda name: name == "nvidia.com/gpu")
    assert demands == (
        ContainerDemand("init", "init", (("nvidia.com/gpu", 1),)),
        ContainerDemand("side", "sidecar", (("nvidia.com/gpu", 2),)),
        ContainerDemand("main", "app", (("nvidia.com/gpu", 3),)),
        ContainerDemand("plain", "app", ()),
        ContainerDemand("both", "app", (("nvidia.com/gpu", 1),)),
    )


@pytest.mark.parametrize("value", ["1.5", "500m", "1e-3", "-1", True, "abc", None])
def test_container_demands_rejects_bad_counts(value: object) -> None:
    pod = {"spec": {"containers": [_container("c", limits={"nvidia.com/gpu": value})]}}
    with pytest.raises(DeviceAllocationError, match=r"invalid quantity"):
        container_demands(PodView(pod), lambda _: True)


@pytest.mark.parametrize(
    ("value", "count"), [("2", 2), (2, 2), ("2k", 2000), ("1e1", 10), ("3000m", 3)]
)
def test_container_demands_read_counts_as_quantities(value: object, count: int) -> None:
    pod = {"spec": {"containers": [_container("c", limits={"nvidia.com/gpu": value})]}}
    assert container_demands(PodView(pod), lambda _: True) == (
        ContainerDemand("c", "app", (("nvidia.com/gpu", count),)),
    )


def test_selection_uses_reusable_devices_first_without_asking() -> None:
    start = start_selection(
        resource="r",
        required=2,
        healthy=frozenset({"a", "b", "c"}),
        in_use=frozenset({"x", "y"}),
        reusable=["y", "x"],
    )
    assert start.done
    assert start.chosen == ("x", "y")


def test_selection_prefers_plugin_choice_then_fills() -> None:
    start = start_selection(
        resource="r",
        required=3,
        healthy=frozenset({"a", "b", "c", "d", "e"}),
        in_use=frozenset({"a", "z"}),
        reusable=["z"],
    )
    assert not start.done
    assert start.chosen == ("z",)
    assert start.available == ("b", "c", "d", "e")
    # "a" is in use and "q" unknown: both ignored; only one preferred usable -> filled from rest.
    assert finish_selection(start, ["a", "q", "e"]) == ("z", "e", "b")


def test_selection_error_texts() -> None:
    with pytest.raises(DeviceAllocationError) as caught:
        start_selection(
            resource="nvidia.com/gpu",
            required=3,
            healthy=frozenset({"a", "b"}),
            in_use=frozenset({"b"}),
            reusable=[],
        )
    assert str(caught.value) == (
        "requested number of devices unavailable for nvidia.com/gpu. Requested: 3, Available: 1"
    )


device_ids = st.sets(st.sampled_from([f"d{i}" for i in range(12)]))


@given(
    healthy=device_ids,
    in_use=device_ids,
    reusable=device_ids,
    required=st.integers(min_value=1, max_value=8),
    preferred=st.lists(st.sampled_from([f"d{i}" for i in range(14)])),
)
def test_selection_invariants(
    healthy: set[str], in_use: set[str], reusable: set[str], required: int, preferred: list[str]
) -> None:
    in_use = in_use | reusable  # reusable devices belong to the pod's own init containers
    try:
        start = start_selection(
            resource="r",
            required=required,
            healthy=frozenset(healthy),
            in_use=frozenset(in_use),
            reusable=sorted(reusable),
        )
        chosen = start.chosen if start.done else finish_selection(start, preferred)
    except DeviceAllocationError:
        assert len(reusable) + len(healthy - in_use) < required
        return
    assert len(chosen) == required
    assert len(set(chosen)) == required
    for device in chosen:
        assert device in reusable or (device in healthy and device not in in_use)


def test_ledger_tracks_and_releases() -> None:
    ledger = DeviceLedger()
    ledger.record("p1", "init", "r", ["a"])
    ledger.record("p1", "main", "r", ["a", "b"])
    ledger.record("p2", "main", "r", ["c"])
    ledger.record("p2", "main", "s", ["x"])
    assert ledger.in_use("r") == {"a", "b", "c"}
    assert ledger.container_devices("p1", "main", "r") == ("a", "b")
    assert ledger.release("p1") is True
    assert ledger.release("p1") is False
    assert ledger.in_use("r") == {"c"}
    assert ledger.pod_uids() == {"p2"}
