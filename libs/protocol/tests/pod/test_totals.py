"""Capacity totals: what a container, a pod and a node count under the two totals names."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.config.device import NvidiaConfig
from hami_protocol.errors import DecodeError
from hami_protocol.node.registry import DeviceInfo, encode_node_devices_json
from hami_protocol.totals import (
    NVIDIA_CORES,
    NVIDIA_MEMORY,
    ZERO,
    Totals,
    container_totals,
    node_totals,
    node_totals_from_register,
    pod_totals,
)
from hami_protocol.vendor.table import nvidia_vendor

NVIDIA = nvidia_vendor(NvidiaConfig())


def _gpu(
    nums: int, mem: int | str | None = None, pct: int | None = None, cores: int | None = None
) -> dict[str, Any]:
    limits: dict[str, Any] = {"nvidia.com/gpu": nums}
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if pct is not None:
        limits["nvidia.com/gpumem-percentage"] = pct
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    return limits


def ctr(limits: dict[str, Any], name: str = "c", **extra: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": limits}, **extra}


def test_names_and_units() -> None:
    assert (NVIDIA_MEMORY, NVIDIA_CORES) == ("hami.io/nvidia-memory", "hami.io/nvidia-cores")
    assert Totals(8000, 60).resources() == {NVIDIA_MEMORY: "8000", NVIDIA_CORES: "60"}


def test_memory_is_per_card_times_count() -> None:
    assert container_totals(ctr(_gpu(2, mem=3000, cores=30)), NVIDIA) == Totals(6000, 60)


def test_memory_factor_and_default_memory_apply() -> None:
    factor = nvidia_vendor(NvidiaConfig(memory_factor=1024))
    assert container_totals(ctr(_gpu(1, mem=3)), factor) == Totals(3072, 0)
    default = nvidia_vendor(NvidiaConfig(default_memory=5000, default_cores=20))
    assert container_totals(ctr(_gpu(2)), default) == Totals(10000, 40)


def test_percentage_and_whole_card_requests_count_no_memory() -> None:
    assert container_totals(ctr(_gpu(2, pct=50, cores=25)), NVIDIA) == Totals(0, 50)
    # Neither memory nor percentage and no defaultMemory: the whole card (100 %).
    assert container_totals(ctr(_gpu(1, cores=100)), NVIDIA) == Totals(0, 100)


def test_cores_are_clamped_to_a_card() -> None:
    assert container_totals(ctr(_gpu(3, mem=100, cores=250)), NVIDIA) == Totals(300, 300)


def test_no_nvidia_request_counts_nothing() -> None:
    assert container_totals(ctr({"cpu": "1"}), NVIDIA) == ZERO
    assert container_totals(ctr(_gpu(0, mem=100)), NVIDIA) == ZERO
    # A request HAMi drops (16Gi "MiB" overflows) counts nothing either.
    assert container_totals(ctr(_gpu(1, mem="16Gi")), NVIDIA) == ZERO


def _pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    return {"spec": {"containers": list(containers), "initContainers": list(init)}}


def test_pod_totals_add_apps_and_take_the_init_peak() -> None:
    apps = (ctr(_gpu(1, mem=1000, cores=10), "a"), ctr(_gpu(1, mem=2000, cores=10), "b"))
    assert pod_totals(_pod(*apps), NVIDIA) == Totals(3000, 20)
    big_init = ctr(_gpu(2, mem=4000, cores=5), "i")
    assert pod_totals(_pod(*apps, init=(big_init,)), NVIDIA) == Totals(8000, 20)


def test_sidecars_add_to_the_apps_and_to_later_init_containers() -> None:
    sidecar = ctr(_gpu(1, mem=500, cores=5), "s", restartPolicy="Always")
    init = ctr(_gpu(1, mem=3000, cores=50), "i")
    app = ctr(_gpu(1, mem=1000, cores=10), "a")
    assert pod_totals(_pod(app, init=(sidecar, init)), NVIDIA) == Totals(3500, 55)
    assert pod_totals(_pod(app, init=(init, sidecar)), NVIDIA) == Totals(3000, 50)


def _dev(
    i: int, mem: int, core: int = 100, health: bool = True, mode: str = "hami-core"
) -> DeviceInfo:
    return DeviceInfo(
        id=f"GPU-{i}",
        index=i,
        count=10,
        devmem=mem,
        devcore=core,
        type="NVIDIA-A100",
        numa=0,
        health=health,
        mode=mode,
    )


def test_node_totals_count_healthy_devices_mig_included() -> None:
    devices = (
        _dev(0, 81920),
        _dev(1, 81920, health=False),
        _dev(2, 40960, mode="mig"),
        _dev(3, 16384, core=200),
    )
    assert node_totals(devices) == Totals(81920 + 40960 + 16384, 400)


def test_node_totals_from_the_register_annotation() -> None:
    value = encode_node_devices_json([_dev(i, 81920) for i in range(8)])
    assert node_totals_from_register(value) == Totals(8 * 81920, 800)
    assert node_totals_from_register(None) == ZERO
    assert node_totals_from_register("") == ZERO
    with pytest.raises(DecodeError):
        node_totals_from_register("[{")


@given(
    nums=st.integers(0, 16),
    mem=st.none() | st.integers(0, 200_000),
    pct=st.none() | st.integers(-5, 150),
    cores=st.none() | st.integers(0, 400),
)
def test_a_container_never_counts_more_than_its_cards_can_hold(
    nums: int, mem: int | None, pct: int | None, cores: int | None
) -> None:
    totals = container_totals(ctr(_gpu(nums, mem=mem, pct=pct, cores=cores)), NVIDIA)
    assert 0 <= totals.cores <= 100 * nums
    assert totals.memory == (nums * mem if mem else 0)
