"""What each vendor's plugin reads besides HAMi's device lists (hami-extensions §1.2 ``P``)."""

from __future__ import annotations

import json

import pytest

from hami_protocol.pod.devices import ContainerDevice, ContainerDevices
from hami_protocol.pod.vendor_annotations import (
    BindFacts,
    DrsGrantProfile,
    device_index,
    vendor_pod_annotations,
    writes_annotations,
)

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


# --- builders that read more than the devices (BindFacts) -----------------------------------

NS = NOW * 1_000_000_000
TEMPLATES = (("vir05_1c_16g", 16384), ("vir10_3c_32g", 32768))


@pytest.mark.parametrize(
    ("memory", "hami_core", "temp"),
    [
        (16384, False, "vir05_1c_16g"),
        (8192, False, "vir05_1c_16g"),
        (20000, False, "vir10_3c_32g"),
        (32768, False, "vir10_3c_32g"),
        (65536, False, ""),
        (16384, True, ""),
    ],
)
def test_ascend_temp_is_the_smallest_template_covering_the_grant(
    memory: int, hami_core: bool, temp: str
) -> None:
    facts = BindFacts(ascend_templates=TEMPLATES, ascend_hami_core=hami_core)
    written = vendor_pod_annotations(
        "Ascend910B3",
        pod([("npu-1", memory, 0)], word="Ascend910B3"),
        node="n",
        now_unix=NOW,
        facts=facts,
    )
    (entry,) = json.loads(written["huawei.com/Ascend910B3"])
    assert entry == {"UUID": "npu-1", "temp": temp, "memory": memory, "core": 0}
    assert written["predicate-time"] == str(NOW)


def test_aws_whole_devices_name_their_indices() -> None:
    devices = pod([("n-AWSNeuron-2", 0, 3), ("n-AWSNeuron-3", 0, 3)], word="AWSNeuron")
    assert vendor_pod_annotations("AWSNeuron", devices, node="node-a", now_unix=NOW) == {
        "AWS_NEURON_IDS": "2,3",
        "NEURON_ALLOC_TIME": str(NS),
        "NEURON_ALLOCATED": "false",
        "aws.amazon.com/predicate-node": "node-a",
    }


def test_aws_core_requests_name_core_indices_and_the_core_resource() -> None:
    # Device 1 of two cores each, the second core (mask 0b10) → core index 2 × 1 + 1 = 3.
    devices = pod([("n-AWSNeuron-1", 0, 0b10)], word="AWSNeuron")
    facts = BindFacts(
        aws_core_resource="aws.amazon.com/neuroncore",
        aws_cores_per_device={"n-AWSNeuron-1": 2},
        now_ns=NS + 5,
    )
    written = vendor_pod_annotations("AWSNeuron", devices, node="node-a", now_unix=NOW, facts=facts)
    assert written == {
        "AWS_NEURON_IDS": "3",
        "NEURON_RESOURCE_TYPE": "aws.amazon.com/neuroncore",
        "NEURON_ALLOC_TIME": str(NS + 5),
        "NEURON_ALLOCATED": "false",
        "aws.amazon.com/predicate-node": "node-a",
    }


def test_metax_sgpu_lists_each_containers_grants() -> None:
    devices = pod([], [("GPU-a", 8192, 30), ("GPU-b", 4096, 0)], word="Metax-SGPU")
    written = vendor_pod_annotations("Metax-SGPU", devices, node="n", now_unix=NOW)
    assert json.loads(written["metax-tech.com/gpu-devices-allocated"]) == [
        [],
        [
            {"uuid": "GPU-a", "compute": 30, "vRam": 8192},
            {"uuid": "GPU-b", "compute": 0, "vRam": 4096},
        ],
    ]
    assert written["metax-tech.com/predicate-time"] == str(NS)


def test_enflame_drs_names_profile_device_and_slices_per_container() -> None:
    profiles = (
        DrsGrantProfile("1g.8gb", "0", 1, 8, 17),
        DrsGrantProfile("3g.24gb", "1", 3, 24, 50),
        DrsGrantProfile("6g.48gb", "2", 6, 48, 100),
    )
    facts = BindFacts(
        containers=("init", "a", "b"),
        drs_profiles=profiles,
        drs_minors={"n-enflame-drs-1": "9"},
    )
    devices = pod(
        [],
        [("n-enflame-drs-1", 24 * 1024, 50)],
        [("n-enflame-drs-0", 8 * 1024, 17)],
        word="Enflame",
    )
    written = vendor_pod_annotations("Enflame", devices, node="n", now_unix=NOW, facts=facts)
    assert json.loads(written["assigned-containers"]) == {
        "a": {"allocated": False, "request": 3, "profileID": "1", "profileName": "3g.24gb"},
        "b": {"allocated": False, "request": 1, "profileID": "0", "profileName": "1g.8gb"},
    }
    assert {k: v for k, v in written.items() if k != "assigned-containers"} == {
        "enflame.com/gcu-assigned": "false",
        "enflame.com/gcu-assigned-time": str(NS),
        "enflame.com/gcu-assigned-index": "1,0",
        "enflame.com/gcu-assigned-id": "n-enflame-drs-1,n-enflame-drs-0",
        "enflame.com/gcu-assigned-minor": "9,0",
        "enflame.com/gcu-request-size": "3,1",
    }


@pytest.mark.parametrize(
    ("word", "writes"),
    [
        ("MLU", True),
        ("Mthreads", True),
        ("kunlun", True),
        ("AWSNeuron", True),
        ("Metax-SGPU", True),
        ("Enflame", True),
        ("Ascend910C", True),
        ("NVIDIA", False),
        ("DCU", False),
        ("XPU", False),
        ("Metax-GPU", False),
    ],
)
def test_which_vendors_write_annotations_of_their_own(word: str, writes: bool) -> None:
    assert writes_annotations(word) is writes
    if not writes:
        assert (
            vendor_pod_annotations(word, pod([("d-0", 1, 1)], word=word), node="n", now_unix=NOW)
            == {}
        )
