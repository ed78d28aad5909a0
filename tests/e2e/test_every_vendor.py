"""Every vendor of HAMi end to end, one test each: a node registered the way that vendor's device
plugin registers it (played by kubesim's stand-in), a pod admitted by the real webhook (its
vendor rule applied), placed by the real extender over HTTP, bound, and Running once the
stand-in has read what the scheduler wrote; the annotations the vendor's plugin reads are
checked value by value, and the invariants hold (``check_all``).

One system for the whole module (one node per vendor; Iluvatar enabled as the chart's
``global.devices.iluvatar.enabled`` does, Ascend always is in the test bed); each test clears its
pods so the next starts from idle.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from hami_kube.objects import PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import Outcome, failed_scheduling, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import device_pod, gpu_quota
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, vendor_node
from hami_kubesim.vendors.inventory import VendorDevices, device_ids
from hami_protocol import keys
from hami_protocol.pod.devices import ContainerDevice, decode_pod_devices_canonical

pytestmark = pytest.mark.asyncio(loop_scope="module")

NS = "every-vendor"
QUOTA_NS = "dcu-quota"
DCU_QUOTA_MIB = 10000
DCU_MEMORY = "hygon.com/dcumem"
ENABLE = ("--enable-iluvatar=true",)

ASCEND = VendorDevices(vendor="Ascend910B3", devices=8)
ASCEND_CORE = VendorDevices(
    vendor="Ascend910B4", devices=4, annotations={keys.ASCEND_NODE_VNPU_CORE: "true"}
)
DCU = VendorDevices(vendor="DCU", devices=2, memory_mib=16000, split=4)
MLU = VendorDevices(vendor="MLU", devices=2, memory_mib=24576)
ILUVATAR = VendorDevices(vendor="MR-V100", devices=2)
MTHREADS = VendorDevices(vendor="Mthreads", devices=2)
METAX = VendorDevices(vendor="Metax-GPU", devices=2)
METAX_S = VendorDevices(vendor="Metax-SGPU", devices=2)
KUNLUN = VendorDevices(vendor="kunlun", devices=8)
XPU = VendorDevices(vendor="XPU", devices=2)
GCU = VendorDevices(vendor="GCU", devices=2)
DRS = VendorDevices(vendor="Enflame", devices=2)
NEURON = VendorDevices(vendor="AWSNeuron", devices=8)
AMD = VendorDevices(vendor="AMD", devices=2)
BIREN = VendorDevices(vendor="Biren", devices=2)
VASTAI = VendorDevices(vendor="Vastai", devices=4, split=1)

NODES: Mapping[str, VendorDevices] = {
    "ascend-node": ASCEND,
    "ascend-core-node": ASCEND_CORE,
    "dcu-node": DCU,
    "mlu-node": MLU,
    "iluvatar-node": ILUVATAR,
    "mt-node": MTHREADS,
    "metax-node": METAX,
    "metax-s-node": METAX_S,
    "kunlun-node": KUNLUN,
    "xpu-node": XPU,
    "gcu-node": GCU,
    "drs-node": DRS,
    "neuron-node": NEURON,
    "amd-node": AMD,
    "biren-node": BIREN,
    "vastai-node": VASTAI,
}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=tuple(vendor_node(name, devices) for name, devices in NODES.items()),
        namespaces=("default", "kube-system", "hami-system", NS, QUOTA_NS),
        objects=(
            gpu_quota(QUOTA_NS, memory_mib=DCU_QUOTA_MIB, memory_resource="hygon.com/dcumem"),
        ),
        scheduler=SchedulerOptions(extra_args=ENABLE),
        webhook_args=ENABLE,
    )
    async with running_system(spec) as running:
        yield running


async def _runs(
    cluster: System,
    node: str,
    limits: Mapping[str, str | int],
    *,
    annotations: Mapping[str, str] | None = None,
    containers: int = 1,
    name: str = "",
) -> dict[str, Any]:
    """Create a pod pinned to nothing, wait until it settles, and return it once it is Running on
    ``node`` with the invariants clean (its pods are cleared by the caller's ``finally``)."""
    name = name or node.removesuffix("-node") + "-pod"
    pod = device_pod(name, limits, namespace=NS, annotations=annotations, containers=containers)
    await cluster.create(pod)
    state = await cluster.wait_for(settled([f"{NS}/{name}"]), within=30, what=f"{name} settles")
    found = state.pod(NS, name)
    assert found is not None
    view = PodView(found)
    assert view.phase == "Running", failed_scheduling(state, found)
    assert view.node_name == node
    assert check_all(state) == ()
    return dict(found)


def _uuids(pod: Mapping[str, Any], key: str) -> list[str]:
    listed = decode_pod_devices_canonical(PodView(pod).annotations[key])
    return [device.uuid for container in listed for device in container]


def _granted(pod: Mapping[str, Any], key: str) -> ContainerDevice:
    """The one device of the pod's one container in the list under ``key``."""
    ((device,),) = decode_pod_devices_canonical(PodView(pod).annotations[key])
    return device


def _limits(pod: Mapping[str, Any], container: int = 0) -> dict[str, str]:
    return dict(pod["spec"]["containers"][container]["resources"]["limits"])


def _env(pod: Mapping[str, Any], container: int = 0) -> dict[str, str]:
    env = pod["spec"]["containers"][container].get("env") or []
    return {item["name"]: item.get("value", "") for item in env}


def _hami_bound(pod: Mapping[str, Any], word: str, spec: VendorDevices, node: str) -> list[str]:
    """HAMi's own handshake with the plugin: the to-allocate list consumed, the allocated list
    naming only this node's devices, ``bind-phase`` success."""
    annotations = PodView(pod).annotations
    assert annotations[keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
    assert annotations[keys.devices_to_allocate_key(word)].strip(";") == ""
    uuids = _uuids(pod, keys.devices_allocated_key(word))
    assert uuids
    assert set(uuids) <= set(device_ids(spec, node))
    return uuids


@pytest_asyncio.fixture(autouse=True, loop_scope="module")
async def _clear(cluster: System) -> AsyncIterator[None]:
    # On the system's own loop: a fixture on a loop of its own (the function-scoped default)
    # runs while the system's loop stands still, so no kubelet stand-in could finish a
    # graceful deletion and the pods would never go.
    yield
    await cluster.clear_pods(NS)


async def test_ascend_template_mode_rounds_memory_to_a_template_and_names_it(
    cluster: System,
) -> None:
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 10000}
    pod = await _runs(cluster, "ascend-node", limits)
    assert _limits(pod)["huawei.com/Ascend910B3-memory"] == "16384"
    (uuid,) = _hami_bound(pod, "Ascend910B3", ASCEND, "ascend-node")
    annotations = PodView(pod).annotations
    assert annotations[keys.ASCEND_PREDICATE_TIME].isdigit()
    (record,) = json.loads(annotations["huawei.com/Ascend910B3"])
    assert (record["UUID"], record["memory"]) == (uuid, 16384)


async def test_ascend_template_mode_names_the_template_for_the_plugin(cluster: System) -> None:
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 10000}
    pod = await _runs(cluster, "ascend-node", limits)
    (record,) = json.loads(PodView(pod).annotations["huawei.com/Ascend910B3"])
    assert record["temp"] == "vir05_1c_16g"


async def test_ascend_hami_core_mode_soft_splits_on_a_node_that_allows_it(
    cluster: System,
) -> None:
    limits = {
        "huawei.com/Ascend910B4": 1,
        "huawei.com/Ascend910B4-memory": 8000,
        "huawei.com/Ascend910B4-core": 25,
    }
    annotations = {keys.ASCEND_VNPU_MODE: "hami-core"}
    pod = await _runs(cluster, "ascend-core-node", limits, annotations=annotations)
    assert _limits(pod)["huawei.com/Ascend910B4-memory"] == "8000"
    (uuid,) = _hami_bound(pod, "Ascend910B4", ASCEND_CORE, "ascend-core-node")
    (record,) = json.loads(PodView(pod).annotations["huawei.com/Ascend910B4"])
    assert (record["UUID"], record["temp"], record["memory"], record["core"]) == (
        uuid,
        "",
        8000,
        25,
    )


@pytest.mark.parametrize(
    ("mode", "node", "chip"),
    [("hami-core", "ascend-node", "Ascend910B3"), ("template", "ascend-core-node", "Ascend910B4")],
)
async def test_an_ascend_pod_is_refused_by_a_node_of_the_other_mode(
    cluster: System, mode: str, node: str, chip: str
) -> None:
    pod = device_pod(
        "wrong-mode",
        {f"huawei.com/{chip}": 1},
        namespace=NS,
        annotations={keys.ASCEND_VNPU_MODE: mode},
    )
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    await cluster.create(pod)
    state = await cluster.wait_for(
        settled([f"{NS}/wrong-mode"]), within=30, what="wrong-mode settles"
    )
    found = state.pod(NS, "wrong-mode")
    assert found is not None
    assert outcome(state, found) is Outcome.UNSCHEDULABLE
    assert "ModeNotFit" in failed_scheduling(state, found)[-1]


async def test_hygon_dcu_slices_through_the_colon_register(cluster: System) -> None:
    limits = {"hygon.com/dcunum": 1, "hygon.com/dcumem": 6000, "hygon.com/dcucores": 30}
    pod = await _runs(cluster, "dcu-node", limits)
    _hami_bound(pod, "dcu", DCU, "dcu-node")
    device = _granted(pod, keys.devices_allocated_key("dcu"))
    assert (device.usedmem, device.usedcores) == (6000, 30)


async def test_hygon_dcu_memory_quota_holds_at_admission_and_at_filter(cluster: System) -> None:
    """A ResourceQuota on ``limits.hygon.com/dcumem``: a pod over it alone is refused by the
    webhook; two that each fit are admitted and the scheduler holds the second back."""
    with pytest.raises(StatusError) as refused:
        await cluster.create(
            device_pod(
                "greedy", {"hygon.com/dcunum": 1, "hygon.com/dcumem": 12000}, namespace=QUOTA_NS
            )
        )
    assert "exceeding resource quota" in refused.value.message
    limits = {"hygon.com/dcunum": 1, "hygon.com/dcumem": 6000}
    for name in ("first", "second"):
        await cluster.create(device_pod(name, limits, namespace=QUOTA_NS))
    names = [f"{QUOTA_NS}/first", f"{QUOTA_NS}/second"]
    try:
        state = await cluster.wait_for(settled(names), within=30, what="both settle")
        outcomes = {}
        for name in ("first", "second"):
            found = state.pod(QUOTA_NS, name)
            assert found is not None
            outcomes[name] = (outcome(state, found), failed_scheduling(state, found)[-1:])
        ran = [o for o, _ in outcomes.values()]
        assert sorted(ran) == sorted([Outcome.RUNNING, Outcome.UNSCHEDULABLE])
        (message,) = next(m for o, m in outcomes.values() if o is Outcome.UNSCHEDULABLE)
        assert "ResourceQuotaNotFit" in message
        assert check_all(state) == ()
    finally:
        await cluster.clear_pods(QUOTA_NS)


async def test_cambricon_mlu_from_capacity_with_its_own_lock_and_profile(
    cluster: System,
) -> None:
    limits = {
        "cambricon.com/vmlu": 1,
        "cambricon.com/mlu.smlu.vmemory": 20,
        "cambricon.com/mlu.smlu.vcore": 25,
    }
    pod = await _runs(cluster, "mlu-node", limits)
    annotations = PodView(pod).annotations
    assert annotations[keys.CAMBRICON_DSMLU_ASSIGNED] == "true"
    (uuid,) = _uuids(pod, keys.devices_allocated_key("cambricon-mlu"))
    assert uuid in device_ids(MLU, "mlu-node")
    index = uuid.rsplit("-", 1)[1]
    assert annotations[keys.CAMBRICON_DSMLU_PROFILE] == f"{index}_25_20"
    node = cluster.state().node("mlu-node")
    assert node is not None
    assert keys.CAMBRICON_DSMLU_LOCK not in PodView(node).annotations


async def test_iluvatar_two_cards_get_whole_cores_and_the_container_name_env(
    cluster: System,
) -> None:
    limits = {"iluvatar.ai/MR-V100-vgpu": 2, "iluvatar.ai/MR-V100.vMem": 16}
    pod = await _runs(cluster, "iluvatar-node", limits)
    assert _limits(pod)["iluvatar.ai/MR-V100.vCore"] == "200"
    assert _env(pod)[keys.ILUVATAR_CONTAINER_NAME_ENV] == "app"
    uuids = _hami_bound(pod, "MR-V100", ILUVATAR, "iluvatar-node")
    assert sorted(uuids) == sorted(device_ids(ILUVATAR, "iluvatar-node"))


async def test_moore_threads_one_card_gets_a_card_of_cores_and_memory(cluster: System) -> None:
    pod = await _runs(cluster, "mt-node", {"mthreads.com/vgpu": 1})
    limits = _limits(pod)
    assert (limits["mthreads.com/sgpu-core"], limits["mthreads.com/sgpu-memory"]) == ("16", "96")
    annotations = PodView(pod).annotations
    assert annotations[keys.MTHREADS_PREDICATE_NODE] == "mt-node"
    assert annotations[keys.MTHREADS_PREDICATE_TIME].isdigit()
    (uuid,) = _uuids(pod, keys.devices_allocated_key("mthreads-vgpu"))
    assert uuid in device_ids(MTHREADS, "mt-node")
    assert annotations[keys.MTHREADS_GPU_INDEX] == uuid.rsplit("-", 1)[1]


async def test_moore_threads_two_cards_get_card_sizes_and_the_request_count(
    cluster: System,
) -> None:
    pod = await _runs(cluster, "mt-node", {"mthreads.com/vgpu": 2})
    limits = _limits(pod)
    assert (limits["mthreads.com/sgpu-core"], limits["mthreads.com/sgpu-memory"]) == ("32", "192")
    assert PodView(pod).annotations[keys.MTHREADS_REQUEST_GPU_NUM] == "2"
    uuids = _uuids(pod, keys.devices_allocated_key("mthreads-vgpu"))
    assert sorted(uuids) == sorted(device_ids(MTHREADS, "mt-node"))


async def test_metax_whole_gpu_from_capacity(cluster: System) -> None:
    pod = await _runs(cluster, "metax-node", {"metax-tech.com/gpu": 1})
    (uuid,) = _uuids(pod, keys.devices_allocated_key("metax-gpu"))
    assert uuid in device_ids(METAX, "metax-node")


async def test_metax_sgpu_gets_the_default_qos_and_its_vendor_list(cluster: System) -> None:
    limits = {"metax-tech.com/sgpu": 1, "metax-tech.com/vcore": 30, "metax-tech.com/vmemory": 8}
    pod = await _runs(cluster, "metax-s-node", limits)
    annotations = PodView(pod).annotations
    assert annotations[keys.METAX_SGPU_QOS_POLICY] == keys.METAX_QOS_BEST_EFFORT
    (uuid,) = _hami_bound(pod, "metax-sgpu", METAX_S, "metax-s-node")
    (container,) = json.loads(annotations[keys.METAX_GPU_DEVICES_ALLOCATED])
    assert container == [{"uuid": uuid, "compute": 30, "vRam": 8192}]
    assert annotations[keys.METAX_PREDICATE_TIME].isdigit()


async def test_kunlun_whole_xpus_take_one_wing(cluster: System) -> None:
    pod = await _runs(cluster, "kunlun-node", {"kunlunxin.com/xpu": 2})
    uuids = _uuids(pod, keys.KUNLUN_ALLOCATED)
    indices = sorted(int(uuid.rsplit("-", 1)[1]) for uuid in uuids)
    assert len(indices) == 2
    assert {index // 4 for index in indices} in ({0}, {1})
    shown = PodView(pod).annotations[keys.KUNLUN_DEVICE_IDX]
    assert sorted(int(i) for i in shown.split(",")) == indices


async def test_kunlun_vxpu_memory_rounds_to_a_slice(cluster: System) -> None:
    limits = {"kunlunxin.com/vxpu": 1, "kunlunxin.com/vxpu-memory": 20000}
    pod = await _runs(cluster, "xpu-node", limits)
    assert _limits(pod)["kunlunxin.com/vxpu-memory"] == "24576"
    _hami_bound(pod, "xpu", XPU, "xpu-node")
    device = _granted(pod, keys.XPU_DEVICES_ALLOCATED)
    # HAMi asks a vXPU for memory × 100 / 98304 cores.
    assert (device.usedmem, device.usedcores) == (24576, 25)


async def test_enflame_whole_gcu_from_capacity(cluster: System) -> None:
    pod = await _runs(cluster, "gcu-node", {"enflame.com/gcu": 1})
    (uuid,) = _uuids(pod, keys.ENFLAME_GCU_DEVICES_ALLOCATED)
    assert uuid in device_ids(GCU, "gcu-node")


async def test_enflame_drs_slices_from_the_capacity_annotation(cluster: System) -> None:
    pod = await _runs(cluster, "drs-node", {"enflame.com/drs-gcu": 1})
    annotations = PodView(pod).annotations
    assert annotations[keys.ENFLAME_GCU_ASSIGNED] == "true"
    (uuid,) = _uuids(pod, keys.ENFLAME_VGPU_DEVICES_ALLOCATED)
    assert uuid in device_ids(DRS, "drs-node")
    index = uuid.rsplit("-", 1)[1]
    assert annotations[keys.ENFLAME_GCU_ASSIGNED_INDEX] == index
    assert annotations[keys.ENFLAME_GCU_ASSIGNED_ID] == uuid
    assert annotations[keys.ENFLAME_GCU_REQUEST_SIZE] == "1"
    containers = json.loads(annotations[keys.ENFLAME_ASSIGNED_CONTAINERS])
    assert containers["app"] == {
        "allocated": False,
        "request": 1,
        "profileID": "0",
        "profileName": "1g.8gb",
    }


async def test_enflame_drs_two_slices_get_the_two_slice_profile(cluster: System) -> None:
    pod = await _runs(cluster, "drs-node", {"enflame.com/drs-gcu": 2})
    annotations = PodView(pod).annotations
    assert annotations[keys.ENFLAME_GCU_REQUEST_SIZE] == "2"
    containers = json.loads(annotations[keys.ENFLAME_ASSIGNED_CONTAINERS])
    assert containers["app"]["profileName"] == "2g.16gb"


async def test_aws_neuron_devices_from_capacity_with_their_ids(cluster: System) -> None:
    # A trn1 instance takes 1, 4, 8 or 16 devices at aligned starts.
    pod = await _runs(cluster, "neuron-node", {"aws.amazon.com/neuron": 4})
    annotations = PodView(pod).annotations
    assert annotations[keys.AWS_NEURON_ALLOCATED] == "true"
    assert annotations[keys.AWS_NEURON_PREDICATE_NODE] == "neuron-node"
    uuids = _uuids(pod, keys.AWS_NEURON_DEVICES_ALLOCATED)
    indices = sorted(int(uuid.rsplit("-", 1)[1]) for uuid in uuids)
    assert indices in ([0, 1, 2, 3], [4, 5, 6, 7])
    assert annotations[keys.AWS_NEURON_IDS] == ",".join(str(i) for i in indices)


async def test_amd_gpu_memory_through_the_json_register(cluster: System) -> None:
    limits = {"amd.com/gpu": 1, "amd.com/gpumem": 10000, "amd.com/gpucores": 50}
    pod = await _runs(cluster, "amd-node", limits)
    _hami_bound(pod, "amd", AMD, "amd-node")
    device = _granted(pod, keys.devices_allocated_key("amd"))
    assert device.usedmem == 10000


async def test_amd_grants_compute_units_and_the_product_type(cluster: System) -> None:
    limits = {"amd.com/gpu": 1, "amd.com/gpumem": 10000, "amd.com/gpucores": 50}
    pod = await _runs(cluster, "amd-node", limits)
    device = _granted(pod, keys.devices_allocated_key("amd"))
    assert (device.type, device.usedcores) == (AMD.device_type, AMD.core_count // 2)


async def test_biren_whole_cards_through_the_json_register(cluster: System) -> None:
    pod = await _runs(cluster, "biren-node", {"birentech.com/gpu": 1})
    _hami_bound(pod, "Biren", BIREN, "biren-node")


async def test_vastai_dies_of_one_card_through_the_json_register(cluster: System) -> None:
    # Die mode (the plugin's --device-strategy=die): dies are taken from the card (AIC) with the
    # most free dies, so after one die is used a pair comes whole from the other card (cards
    # are dies 0-1 and 2-3 in the stand-in).
    ids = device_ids(VASTAI, "vastai-node")
    one = await _runs(cluster, "vastai-node", {"vastaitech.com/va": 1}, name="one-die")
    (single,) = _hami_bound(one, "Vastai", VASTAI, "vastai-node")
    pair = await _runs(cluster, "vastai-node", {"vastaitech.com/va": 2}, name="two-dies")
    cards = {ids.index(uuid) // 2 for uuid in _hami_bound(pair, "Vastai", VASTAI, "vastai-node")}
    assert cards == {1 - ids.index(single) // 2}
