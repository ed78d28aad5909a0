"""What each vendor's plugin reads besides HAMi's device lists (hami-extensions §1.2 ``P``)."""

from __future__ import annotations

import json

import pytest

from hami_protocol.pod.devices import ContainerDevice, ContainerDevices
from hami_protocol.pod.vendor_annotations import device_index, vendor_pod_annotations

NOW = 1_700_000_000


def pod(*containers: list[tuple[str, int, int]], word: str) -> tuple[ContainerDevices, ...]:
    return tuple(
        tuple(ContainerDevice(uuid, word, mem, cores) for uuid, mem, cores in c) for c in containers
    )


@pytest.mark.parametrize(
    ("word", "devices", "expected"),
    [
        (
            "MLU",
            pod([], [("n-cambricon-mlu-1", 1024, 50)], word="MLU"),
            {"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "1_50_4"},
        ),
        (
            "Mthreads",
            pod([("n-mthreads-0", 2048, 8), ("n-mthreads-3", 2048, 8)], word="Mthreads"),
            {
                "mthreads.com/gpu-index": "0,3",
                "mthreads.com/predicate-time": str(NOW * 1_000_000_000),
                "mthreads.com/predicate-node": "node-a",
            },
        ),
        (
            "kunlun",
            pod([("n-kunlun-4", 98304, 100)], [("n-kunlun-5", 98304, 100)], word="kunlun"),
            {"BAIDU_COM_DEVICE_IDX": "4,5"},
        ),
        (
            "Ascend910B3",
            pod([("npu-7", 16384, 5)], word="Ascend910B3"),
            {
                "huawei.com/Ascend910B3": json.dumps(
                    [{"UUID": "npu-7", "temp": "", "memory": 16384, "core": 5}],
                    separators=(",", ":"),
                ),
                "predicate-time": str(NOW),
            },
        ),
        ("NVIDIA", pod([("GPU-0", 1000, 10)], word="NVIDIA"), {}),
        ("DCU", pod([("DCU-0", 1000, 10)], word="DCU"), {}),
    ],
)
def test_vendor_pod_annotations_per_vendor(
    word: str, devices: tuple[ContainerDevices, ...], expected: dict[str, str]
) -> None:
    assert vendor_pod_annotations(word, devices, node="node-a", now_unix=NOW) == expected


@pytest.mark.parametrize("word", ["MLU", "Mthreads", "kunlun", "Ascend910A"])
def test_a_pod_without_devices_of_the_vendor_writes_nothing(word: str) -> None:
    assert vendor_pod_annotations(word, ((), ()), node="n", now_unix=NOW) == {}


@pytest.mark.parametrize(
    ("uuid", "index"), [("n-cambricon-mlu-12", 12), ("GPU-abc", 0), ("plain", 0), ("a-7", 7)]
)
def test_device_index_is_the_number_after_the_last_dash(uuid: str, index: int) -> None:
    assert device_index(uuid) == index
