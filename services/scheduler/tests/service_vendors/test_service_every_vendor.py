"""Every vendor through the extender's HTTP interface: a node of that vendor registered as its
device plugin does (register annotation with handshake, node capacity, or the vendor's own node
annotation — written by kubesim's plugin stand-in inventory), one pod asking for its devices
filtered and bound, and the annotations that vendor's plugin reads on the pod."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

from hami_kubesim.vendors.inventory import VendorDevices, device_ids
from hami_protocol import keys
from hami_protocol.pod.devices import decode_pod_devices_canonical
from hami_protocol.vendor.table import vendor_by_word

from ..service_helpers import (
    ALL_VENDORS,
    DEVICE_CONFIG,
    annotations_of,
    container,
    pod_object,
    vendor_harness,
)

Check = Callable[[dict[str, str], list[str]], None]


def _nothing_more(notes: dict[str, str], ids: list[str]) -> None:
    return None


@dataclass(frozen=True)
class Case:
    word: str
    limits: Mapping[str, str]
    devices: VendorDevices
    capacity: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    check: Check = _nothing_more
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.word}-{self.label}" if self.label else self.word


def _cambricon(notes: dict[str, str], ids: list[str]) -> None:
    index = ids[0].rsplit("-", 1)[1]
    assert notes["CAMBRICON_DSMLU_PROFILE"] == f"{index}_100_4"
    assert notes["CAMBRICON_DSMLU_ASSIGNED"] == "false"


def _mthreads(notes: dict[str, str], ids: list[str]) -> None:
    assert notes["mthreads.com/gpu-index"] == ids[0].rsplit("-", 1)[1]
    assert notes["mthreads.com/predicate-node"] == "n"
    assert int(notes["mthreads.com/predicate-time"]) > 10**18


def _kunlun(notes: dict[str, str], ids: list[str]) -> None:
    assert notes[keys.KUNLUN_DEVICE_IDX] == ",".join(i.rsplit("-", 1)[1] for i in ids)


def _aws(notes: dict[str, str], ids: list[str]) -> None:
    # One NeuronCore of a two-core device: the device's first core.
    index = int(ids[0].rsplit("-", 1)[1])
    assert notes[keys.AWS_NEURON_IDS] == str(2 * index)
    assert notes[keys.AWS_NEURON_RESOURCE_TYPE] == "aws.amazon.com/neuroncore"
    assert notes[keys.AWS_NEURON_ALLOCATED] == "false"
    assert notes[keys.AWS_NEURON_PREDICATE_NODE] == "n"
    assert int(notes[keys.AWS_NEURON_ALLOC_TIME]) > 10**18


def _aws_whole(notes: dict[str, str], ids: list[str]) -> None:
    assert notes[keys.AWS_NEURON_IDS] == ids[0].rsplit("-", 1)[1]
    assert keys.AWS_NEURON_RESOURCE_TYPE not in notes
    assert notes[keys.AWS_NEURON_ALLOCATED] == "false"


def _metax_sgpu(notes: dict[str, str], ids: list[str]) -> None:
    (grants,) = json.loads(notes[keys.METAX_GPU_DEVICES_ALLOCATED])
    assert grants == [{"uuid": ids[0], "compute": 20, "vRam": 4096}]
    assert int(notes[keys.METAX_PREDICATE_TIME]) > 10**18


def _enflame(notes: dict[str, str], ids: list[str]) -> None:
    assigned = json.loads(notes[keys.ENFLAME_ASSIGNED_CONTAINERS])
    assert assigned == {
        "main": {"allocated": False, "request": 2, "profileID": "1", "profileName": "2g.16gb"}
    }
    assert notes[keys.ENFLAME_GCU_ASSIGNED] == "false"
    assert notes[keys.ENFLAME_GCU_REQUEST_SIZE] == "2"
    assert notes[keys.ENFLAME_GCU_ASSIGNED_ID] == ids[0]
    assert notes[keys.ENFLAME_GCU_ASSIGNED_INDEX] == ids[0].rsplit("-", 1)[1]


def _ascend(notes: dict[str, str], ids: list[str]) -> None:
    assert json.loads(notes["huawei.com/Ascend910B3"]) == [
        {"UUID": ids[0], "temp": "vir05_1c_16g", "memory": 16384, "core": 0}
    ]
    assert int(notes[keys.ASCEND_PREDICATE_TIME]) > 10**9


def _amd(notes: dict[str, str], ids: list[str]) -> None:
    (container_devices,) = decode_pod_devices_canonical(notes[keys.devices_allocated_key("amd")])
    (granted,) = container_devices
    # The product type and the CUs of 100 percent.
    assert (granted.type, granted.usedmem, granted.usedcores) == (
        "AMD_Instinct_MI300X_VF",
        1000,
        304,
    )


CASES = [
    Case(
        "MLU",
        {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"},
        VendorDevices("MLU", devices=2),
        capacity={
            "cambricon.com/vmlu": "200",
            "cambricon.com/mlu.smlu.vcore": "200",
            "cambricon.com/mlu.smlu.vmemory": "128",
        },
        check=_cambricon,
    ),
    Case("DCU", {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000"}, VendorDevices("DCU", 2)),
    Case(
        "Mthreads",
        {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4", "mthreads.com/sgpu-core": "8"},
        VendorDevices("Mthreads", 2),
        capacity={
            "mthreads.com/vgpu": "4",
            "mthreads.com/sgpu-core": "32",
            "mthreads.com/sgpu-memory": "96",
        },
        check=_mthreads,
    ),
    Case(
        "Metax-GPU",
        {"metax-tech.com/gpu": "1"},
        VendorDevices("Metax-GPU", 2),
        capacity={"metax-tech.com/gpu": "2"},
    ),
    Case(
        "Metax-SGPU",
        {"metax-tech.com/sgpu": "1", "metax-tech.com/vmemory": "4", "metax-tech.com/vcore": "20"},
        VendorDevices("Metax-SGPU", 2),
        pod_annotations={keys.METAX_SGPU_QOS_POLICY: "best-effort"},
        check=_metax_sgpu,
    ),
    Case(
        "AMD",
        {"amd.com/gpu": "1", "amd.com/gpumem": "1000"},
        VendorDevices("AMD", 2),
        capacity={"amd.com/gpu": "2"},
        check=_amd,
    ),
    Case("Biren", {"birentech.com/gpu": "1"}, VendorDevices("Biren", 2)),
    Case("Vastai", {"vastaitech.com/va": "1"}, VendorDevices("Vastai", 2)),
    Case(
        "kunlun",
        {"kunlunxin.com/xpu": "2"},
        VendorDevices("kunlun", 8),
        capacity={"kunlunxin.com/xpu": "8"},
        check=_kunlun,
    ),
    Case(
        "XPU",
        {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"},
        VendorDevices("XPU", 2),
    ),
    Case(
        "AWSNeuron",
        {"aws.amazon.com/neuroncore": "1"},
        VendorDevices("AWSNeuron", 2),
        capacity={"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"},
        labels={keys.AWS_INSTANCE_TYPE_LABEL: "trn1.32xlarge"},
        check=_aws,
    ),
    Case(
        "AWSNeuron",
        {"aws.amazon.com/neuron": "1"},
        VendorDevices("AWSNeuron", 2),
        capacity={"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"},
        labels={keys.AWS_INSTANCE_TYPE_LABEL: "trn1.32xlarge"},
        check=_aws_whole,
        label="whole",
    ),
    Case(
        "GCU",
        {"enflame.com/gcu": "1"},
        VendorDevices("GCU", 2),
        capacity={"enflame.com/gcu": "2"},
    ),
    Case(
        "Enflame",
        {"enflame.com/drs-gcu": "2"},
        VendorDevices("Enflame", 2),
        check=_enflame,
    ),
    Case(
        "Ascend910B3",
        {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "16384"},
        VendorDevices("Ascend910B3", 2),
        check=_ascend,
    ),
    Case(
        "MR-V100",
        {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "4"},
        VendorDevices("MR-V100", 2),
    ),
]


def test_every_vendor_has_a_case() -> None:
    words = {row.common_word for row in ALL_VENDORS} - {"NVIDIA"}
    iluvatar = {chip.common_word for chip in DEVICE_CONFIG.iluvatars} - {"MR-V100"}
    ascend = {chip.common_word for chip in DEVICE_CONFIG.vnpus.configs} - {"Ascend910B3"}
    assert words - iluvatar - ascend == {case.word for case in CASES}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_a_pod_of_each_vendor_is_placed_with_what_its_plugin_reads(case: Case) -> None:
    row = vendor_by_word(ALL_VENDORS, case.word)
    assert row is not None
    async with vendor_harness() as h:
        await h.add_vendor_node("n", case.devices, capacity=case.capacity, labels=case.labels)
        pod = await h.add_pod(
            pod_object(
                "p",
                container(limits=case.limits),
                annotations=case.pod_annotations or None,
            )
        )
        reply = await h.schedule(pod, ["n"])
        assert reply["NodeNames"] == ["n"], reply
        notes = annotations_of(h.pod("p"))
    allocated = notes[row.devices_allocated_key or ""]
    (container_devices,) = decode_pod_devices_canonical(allocated)
    ids = [granted.uuid for granted in container_devices]
    known = set(device_ids(case.devices, "n"))
    assert ids
    assert set(ids) <= known, (ids, known)
    if row.devices_to_allocate_key:
        assert notes[row.devices_to_allocate_key] == allocated
    assert notes[keys.VGPU_NODE] == "n"
    case.check(notes, ids)
