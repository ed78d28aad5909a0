"""Devices synthesised from node capacity, as HAMi derives them (hami-extensions §1.2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hami_protocol.errors import ValidationError
from hami_protocol.node.capacity_devices import (
    cambricon_devices,
    metax_gpu_devices,
    mthreads_devices,
)

MLU = {
    "count_resource": "cambricon.com/vmlu",
    "memory_resource": "cambricon.com/mlu.smlu.vmemory",
    "core_resource": "cambricon.com/mlu.smlu.vcore",
}
MT = {
    "count_resource": "mthreads.com/vgpu",
    "memory_resource": "mthreads.com/sgpu-memory",
    "core_resource": "mthreads.com/sgpu-core",
}


def test_cambricon_splits_memory_by_cores_in_256_mib_units() -> None:
    capacity = {
        "cambricon.com/vmlu": 200,
        "cambricon.com/mlu.smlu.vcore": 200,
        "cambricon.com/mlu.smlu.vmemory": 192,
    }
    devices = cambricon_devices("n1", capacity, **MLU)
    assert [d.id for d in devices] == ["n1-cambricon-mlu-0", "n1-cambricon-mlu-1"]
    assert {(d.count, d.devcore, d.devmem, d.index) for d in devices} == {
        (100, 100, 96 * 256, 0),
        (100, 100, 96 * 256, 1),
    }


def test_cambricon_rounds_the_device_count_up() -> None:
    capacity = {
        "cambricon.com/vmlu": 1,
        "cambricon.com/mlu.smlu.vcore": 150,
        "cambricon.com/mlu.smlu.vmemory": 150,
    }
    assert len(cambricon_devices("n", capacity, **MLU)) == 2


def test_mthreads_has_16_cores_per_gpu_and_512_mib_units() -> None:
    capacity = {
        "mthreads.com/vgpu": 8,
        "mthreads.com/sgpu-core": 32,
        "mthreads.com/sgpu-memory": 96,
    }
    devices = mthreads_devices("m", capacity, **MT)
    assert [(d.id, d.devcore, d.devmem, d.count) for d in devices] == [
        ("m-mthreads-0", 16, 48 * 512, 100),
        ("m-mthreads-1", 16, 48 * 512, 100),
    ]


def test_metax_gpu_is_one_exclusive_64_gib_device_per_unit() -> None:
    devices = metax_gpu_devices("x", {"metax-tech.com/gpu": 3}, count_resource="metax-tech.com/gpu")
    assert [(d.id, d.count, d.devmem, d.devcore) for d in devices] == [
        (f"x-metax-{i}", 1, 65536, 100) for i in range(3)
    ]


@pytest.mark.parametrize(
    ("synth", "names", "capacity", "missing"),
    [
        (
            cambricon_devices,
            MLU,
            {"cambricon.com/vmlu": 2, "cambricon.com/mlu.smlu.vcore": 200},
            "cambricon.com/mlu.smlu.vmemory",
        ),
        (cambricon_devices, MLU, {"cambricon.com/vmlu": 2}, "cambricon.com/mlu.smlu.vcore"),
        (
            mthreads_devices,
            MT,
            {"mthreads.com/vgpu": 2, "mthreads.com/sgpu-core": 16},
            "mthreads.com/sgpu-memory",
        ),
    ],
)
def test_a_count_without_its_sizing_resource_names_the_missing_resource(
    synth: Callable[..., Any], names: dict[str, str], capacity: dict[str, int], missing: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        synth("n", capacity, **names)
    assert caught.value.key == missing
    assert missing in caught.value.reason


@pytest.mark.parametrize("synth", [cambricon_devices, mthreads_devices])
def test_no_count_means_no_devices_and_no_error(synth: Callable[..., Any]) -> None:
    names = MLU if synth is cambricon_devices else MT
    assert synth("n", {names["count_resource"]: 0}, **names) == ()
