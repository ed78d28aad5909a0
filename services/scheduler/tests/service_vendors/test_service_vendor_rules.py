"""Vendor rules through the extender's HTTP interface against kubesim: AWS Neuron's core masks
and runs, Vastai's die-mode score and AIC exclusivity, Enflame DRS spec requests, and namespace
quotas of vendors other than Hygon.

Nodes are registered as kubesim's plugin stand-ins register them (capacity vendors with the
capacity their plugin advertises).  Each test offers a choice the rule decides: without it the
pod would land elsewhere, take other devices, or be let through."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from hami_kubesim.testing import eventually
from hami_kubesim.vendors.inventory import VendorDevices, device_ids, node_labels
from hami_protocol import keys
from hami_protocol.vendor.table import vendor_by_word

from ..service_helpers import (
    ALL_VENDORS,
    MLU_CAPACITY,
    Harness,
    annotations_of,
    container,
    pinned,
    pod_object,
    vendor_harness,
)

# --- AWS Neuron: NeuronCore masks, whole-device runs, instance types ---------------------------

NEURON = "AWSNeuron"
NEURON_CORES = "aws.amazon.com/neuroncore"
TRN = "trn1.32xlarge"


async def _neuron_node(
    h: Harness, name: str, devices: int, *, cores: int = 2, instance_type: str = TRN
) -> tuple[str, ...]:
    """A Neuron node of ``devices`` devices with ``cores`` NeuronCores each; their IDs."""
    spec = VendorDevices(NEURON, devices, cores=cores, instance_type=instance_type)
    capacity = {NEURON_CORES: str(devices * cores)}
    await h.add_vendor_node(name, spec, capacity=capacity, labels=node_labels(spec))
    return device_ids(spec, name)


def _neuron_cores(n: int) -> dict[str, str]:
    return {NEURON_CORES: str(n)}


def _neuron_devices(n: int) -> dict[str, str]:
    return {"aws.amazon.com/neuron": str(n)}


def _masks(h: Harness, pod: str) -> list[tuple[int, int]]:
    """``(device index, core mask)`` of each Neuron device the pod was granted."""
    return [(int(g.uuid.rsplit("-", 1)[1]), g.usedcores) for g in h.grants(pod, NEURON)]


def _neuron_ids(h: Harness, pod: str) -> str:
    notes = annotations_of(h.pod(pod))
    assert notes[keys.AWS_NEURON_PREDICATE_NODE] == notes[keys.VGPU_NODE]
    return notes[keys.AWS_NEURON_IDS]


BINPACK = {keys.GPU_SCHEDULER_POLICY: "binpack"}


async def test_neuron_cores_of_one_device_are_granted_as_disjoint_masks() -> None:
    async with vendor_harness() as h:
        ids = await _neuron_node(h, "n", 2)
        assert await h.placed("one", _neuron_cores(1), ["n"], pinned(NEURON, ids[1])) == "n"
        assert _masks(h, "one") == [(1, 0b01)]
        # binpack walks device 1 first, but its one free core cannot hold two.
        assert await h.placed("two", _neuron_cores(2), ["n"], BINPACK) == "n"
        assert _masks(h, "two") == [(0, 0b11)]
        assert _neuron_ids(h, "two") == "0,1"
        # The second user of device 1 gets the core the first left: index 2 x 1 + 1.
        assert await h.placed("three", _neuron_cores(1), ["n"], BINPACK) == "n"
        assert _masks(h, "three") == [(1, 0b10)]
        assert _neuron_ids(h, "three") == "3"
        notes = annotations_of(h.pod("three"))
        assert notes[keys.AWS_NEURON_RESOURCE_TYPE] == NEURON_CORES
        # Device 0 has a slot left but no core.
        reason = await h.refusal("four", _neuron_cores(1), "n")
        assert reason == "1/2 CardInsufficientCore, 1/2 CardTimeSlicingExhausted"


async def test_neuron_cores_beyond_one_device_take_an_aligned_run_of_whole_devices() -> None:
    async with vendor_harness() as h:
        ids = await _neuron_node(h, "n", 8)
        assert await h.placed("held", _neuron_cores(1), ["n"], pinned(NEURON, ids[1])) == "n"
        # 8 cores are 4 whole devices: the run at 0 holds a used device, the next aligned one
        # starts at 4; every core of each is named.
        assert await h.placed("eight", _neuron_cores(8), ["n"]) == "n"
        assert _masks(h, "eight") == [(i, 0b11) for i in range(4, 8)]
        assert _neuron_ids(h, "eight") == ",".join(str(core) for core in range(8, 16))
        assert annotations_of(h.pod("eight"))[keys.AWS_NEURON_RESOURCE_TYPE] == NEURON_CORES


async def test_an_inf1_node_names_neuron_cores_by_its_own_cores_per_device() -> None:
    async with vendor_harness() as h:
        # Inferentia (inf1) devices have four NeuronCores, Trainium ones two.
        ids = await _neuron_node(h, "n", 4, cores=4, instance_type="inf1.6xlarge")
        assert await h.placed("a", _neuron_cores(2), ["n"], pinned(NEURON, ids[1])) == "n"
        assert await h.placed("b", _neuron_cores(2), ["n"], pinned(NEURON, ids[1])) == "n"
        assert (_masks(h, "a"), _masks(h, "b")) == ([(1, 0b0011)], [(1, 0b1100)])
        assert (_neuron_ids(h, "a"), _neuron_ids(h, "b")) == ("4,5", "6,7")


@pytest.mark.parametrize(
    ("instance_type", "cores", "run"),
    [
        # Trainium: runs of 1, 4, 8 or 16 devices at a multiple of their length only.
        (TRN, 2, None),
        # Inferentia: any length, at the lowest start whose devices are all idle.
        ("inf2.48xlarge", 2, "1,2,3"),
        ("Inf1.24xlarge", 4, "1,2,3"),
    ],
)
async def test_neuron_device_runs_follow_the_instance_type(
    instance_type: str, cores: int, run: str | None
) -> None:
    async with vendor_harness() as h:
        ids = await _neuron_node(h, "n", 6, cores=cores, instance_type=instance_type)
        assert await h.placed("held", _neuron_devices(1), ["n"], pinned(NEURON, ids[0])) == "n"
        if run is None:
            assert await h.refusal("three", _neuron_devices(3), "n") == "1/6 NumaNotFit"
            return
        assert await h.placed("three", _neuron_devices(3), ["n"]) == "n"
        assert _neuron_ids(h, "three") == run
        assert keys.AWS_NEURON_RESOURCE_TYPE not in annotations_of(h.pod("three"))


# --- Vastai die mode: AIC score and AIC exclusivity under mutex --------------------------------

VASTAI = "Vastai"


def _dies(n: int) -> dict[str, str]:
    return {"vastaitech.com/va": str(n)}


async def _vastai_node(h: Harness, name: str, dies: int, used: range | tuple[int, ...]) -> None:
    """A die-mode node of ``dies`` single-task dies (the stand-in's AICs are dies 2k, 2k+1),
    with one pod holding the dies ``used``."""
    spec = VendorDevices(VASTAI, dies, split=1)
    await h.add_vendor_node(name, spec)
    ids = device_ids(spec, name)
    held = pinned(VASTAI, *(ids[i] for i in used))
    assert await h.placed(f"{name}-held", _dies(len(used)), [name], held) == name


def _aics(h: Harness, pod: str, node: str, dies: int) -> set[int]:
    ids = device_ids(VendorDevices(VASTAI, dies, split=1), node)
    return {ids.index(uuid) // 2 for uuid in h.granted(pod, VASTAI)}


@pytest.mark.parametrize(
    ("policy", "count", "winner"),
    [
        # "split" has one free die on each of two AICs: 10 x 2/4 used + 1/2; "together" has
        # whole free AICs: 10 x 6/13 used + 2/2.  binpack takes the higher.
        ("binpack", 2, "together"),
        # As in HAMi the score is added to usage before spread takes the lowest: under spread
        # a pair's shared AIC counts against the node.
        ("spread", 2, "split"),
        # Control: one die scores 1/1 anywhere, and usage alone decides.
        ("binpack", 1, "split"),
        ("spread", 1, "together"),
    ],
)
async def test_the_vastai_die_score_outweighs_usage(policy: str, count: int, winner: str) -> None:
    async with vendor_harness() as h:
        await _vastai_node(h, "split", 4, (1, 3))
        await _vastai_node(h, "together", 13, range(6))
        notes = {keys.NODE_SCHEDULER_POLICY: policy}
        assert await h.placed("p", _dies(count), ["split", "together"], notes) == winner
        if (winner, count) == ("together", 2):
            assert len(_aics(h, "p", "together", 13)) == 1


async def test_under_mutex_a_vastai_aic_with_a_die_in_use_is_refused_whole() -> None:
    spec = VendorDevices(VASTAI, 4)
    mutex = {keys.GPU_SCHEDULER_POLICY: "mutex"}
    async with vendor_harness() as h:
        await h.add_vendor_node("n", spec)
        ids = device_ids(spec, "n")
        assert await h.placed("held", _dies(1), ["n"], pinned(VASTAI, ids[0])) == "n"
        assert await h.placed("pair", _dies(2), ["n"], mutex) == "n"
        assert sorted(h.granted("pair", VASTAI)) == sorted(ids[2:])
        # Die 1 is idle, but its AIC's other die is in use.
        assert await h.refusal("one", _dies(1), "n", mutex) == "4/4 ExclusiveDeviceAllocateConflict"
        assert await h.placed("shared", _dies(1), ["n"]) == "n"


# --- Enflame DRS: memory and core (spec) requests mapped to the node's profiles ----------------

ENFLAME = "Enflame"
GCU_MEMORY = "enflame.com/gcu-memory"
GCU_CORE = "enflame.com/gcu-core"


@pytest.mark.parametrize(
    ("limits", "profile"),
    [
        # The stand-in's GCU: 6 slices of 8 GB, profiles 1g.8gb, 2g.16gb, 3g.24gb, 6g.48gb
        # (IDs 0-3; cores ceil(slices x 100 / 6) percent).  The first covering the request:
        ({GCU_MEMORY: "8"}, ("1g.8gb", "0", 1, 17)),
        ({GCU_MEMORY: "10"}, ("2g.16gb", "1", 2, 34)),
        ({GCU_MEMORY: "8", GCU_CORE: "40"}, ("3g.24gb", "2", 3, 50)),
        ({GCU_MEMORY: "1", GCU_CORE: "100"}, ("6g.48gb", "3", 6, 100)),
        # Above twice the largest profile's GB the memory reads as MiB: 20000 MiB -> 20 GB.
        ({GCU_MEMORY: "20000"}, ("3g.24gb", "2", 3, 50)),
        ({GCU_MEMORY: "100"}, ("1g.8gb", "0", 1, 17)),
        # No profile holds 60 GB.
        ({GCU_MEMORY: "60"}, None),
    ],
    ids=["8gb", "10gb", "8gb-40pct", "1gb-100pct", "20000mib", "100mib", "60gb"],
)
async def test_an_enflame_spec_request_takes_the_first_profile_covering_it(
    limits: Mapping[str, str], profile: tuple[str, str, int, int] | None
) -> None:
    async with vendor_harness() as h:
        await h.add_vendor_node("n", VendorDevices(ENFLAME, 1))
        if profile is None:
            assert await h.refusal("p", limits, "n") == "1/1 ModeNotFit"
            return
        name, profile_id, slices, percent = profile
        assert await h.placed("p", limits, ["n"]) == "n"
        (grant,) = h.grants("p", ENFLAME)
        assert (grant.usedmem, grant.usedcores) == (slices * 8 * 1024, percent)
        notes = annotations_of(h.pod("p"))
        assert json.loads(notes[keys.ENFLAME_ASSIGNED_CONTAINERS]) == {
            "main": {
                "allocated": False,
                "request": slices,
                "profileID": profile_id,
                "profileName": name,
            }
        }
        assert notes[keys.ENFLAME_GCU_REQUEST_SIZE] == str(slices)


# --- Namespace quotas of capacity and register vendors ----------------------------------------


@pytest.mark.parametrize(
    ("word", "limits", "hard", "reason"),
    [
        # Capacity inventory, standard loop: 16 x 256 MiB hold one 10 x 256 MiB pod, not two;
        # each device is refused.
        (
            "MLU",
            {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "10"},
            "16",
            "2/2 ResourceQuotaNotFit",
        ),
        # Colon register, standard loop: 40 x 256 MiB hold one 24 x 256 MiB pod.
        (
            "MR-V100",
            {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vMem": "24"},
            "40",
            "2/2 ResourceQuotaNotFit",
        ),
        # JSON register, a fit of its own (the whole choice is checked): 40000 MiB hold one
        # 24576 MiB slice.
        (
            "XPU",
            {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": "24576"},
            "40000",
            "1/2 ResourceQuotaNotFit",
        ),
    ],
    ids=["MLU", "MR-V100", "XPU"],
)
async def test_a_vendor_quota_holds_back_the_second_of_two_pods_that_each_fit(
    word: str, limits: Mapping[str, str], hard: str, reason: str
) -> None:
    row = vendor_by_word(ALL_VENDORS, word)
    assert row is not None
    async with vendor_harness() as h:
        capacity = MLU_CAPACITY if word == "MLU" else None
        await h.add_vendor_node("n", VendorDevices(word, 2), capacity=capacity)
        quota = {
            "metadata": {"name": "devices", "namespace": "default"},
            "spec": {"hard": {f"limits.{row.memory_resource}": hard}},
        }
        await h.api.create("resourcequotas", quota)
        await eventually(lambda: len(h.scheduler.cache.quotas) == 1, what="quota seen")
        assert await h.placed("first", limits, ["n"]) == "n"
        assert await h.refusal("second", limits, "n") == reason
        # The same pod where no quota applies fits.
        elsewhere = pod_object("second", container(limits=limits), namespace="kube-public")
        assert (await h.filter(await h.add_pod(elsewhere), ["n"]))["NodeNames"] == ["n"]
