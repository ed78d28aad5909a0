"""Every vendor row through the strategy registry on a small node of that vendor: its fit with the
context the decision builds, its score with the arguments its own signature takes, and the
usage each vendor's grants charge (Enflame DRS slices, AWS Neuron core masks, Kunlun vXPU
shares)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from hami_protocol import keys
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.node.registry import DeviceInfo, custom_info
from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerSlot, PodDeviceRequests, container_requests
from hami_protocol.vendor.annotations import drs_profiles
from hami_protocol.vendor.table import Vendor, vendors_from_config
from hami_scheduler.core import (
    FitContext,
    NodeUsage,
    PodPlan,
    apply_usage,
    build_node_usage,
    decide_node,
    pod_plan,
    remove_usage,
)
from hami_scheduler.core.decide import decision_usage
from hami_scheduler.core.strategy import FIT_MODULES, ScoreArgs, family_of, strategy_for
from hami_scheduler.core.vendors.context import (
    NO_POD_FACTS,
    DrsProfile,
    NodeVendorFacts,
    SgpuNodeState,
    SgpuTasks,
    VendorPodFacts,
    vendor_context,
)

CONFIG = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
ROWS = vendors_from_config(CONFIG, enable_ascend=True, enable_iluvatar=True)
DRS_PROFILES = {"1g.8gb": "0", "2g.16gb": "1", "4g.32gb": "2"}


def _device(word: str, index: int, **fields: object) -> DeviceInfo:
    base: dict[str, object] = {
        "id": f"{word}-{index}",
        "index": index,
        "count": 4,
        "devmem": 32768,
        "devcore": 100,
        "type": word,
        "numa": 0,
        "health": True,
    }
    base.update(fields)
    return DeviceInfo(**base)  # type: ignore[arg-type]


def small_node(row: Vendor) -> tuple[list[DeviceInfo], dict[str, str], NodeVendorFacts]:
    """Two to eight devices of ``row`` as its plugin registers them, the limits of a pod asking
    one of them, and the node's vendor facts."""
    word = row.common_word
    limits: dict[str, str] = {row.count_resource: "1"}
    facts = NodeVendorFacts()
    if word.startswith("Ascend"):
        devices = [
            _device(
                word,
                i,
                count=4,
                devmem=65536,
                devcore=20,
                custom_info=custom_info({"NetworkID": i // 2}),
            )
            for i in range(4)
        ]
        limits[row.memory_resource or ""] = "16384"
    elif word == "AWSNeuron":
        devices = [
            _device(
                word,
                i,
                count=2,
                devmem=0,
                devcore=3,
                custom_info=custom_info({"AWSNodeType": "trn1"}),
            )
            for i in range(4)
        ]
    elif word == "Enflame":
        devices = [
            _device(
                word,
                i,
                id=f"n-enflame-drs-{i}",
                count=4,
                devmem=32768,
                custom_info=custom_info(
                    {"minor": str(i), "index": str(i), "profiles": DRS_PROFILES, "maxSlice": 4}
                ),
            )
            for i in range(2)
        ]
        limits = {row.count_resource: "2"}
        facts = NodeVendorFacts(
            drs_profiles=tuple(
                DrsProfile(p.name, p.id, p.slices, p.memory_gb)
                for p in drs_profiles(DRS_PROFILES, 4)
            )
        )
    elif word in ("kunlun",):
        devices = [_device(word, i, count=100, devmem=98304, numa=i // 4) for i in range(8)]
    elif word == "XPU":
        devices = [_device(word, i, count=4, devmem=98304) for i in range(8)]
        limits[row.memory_resource or ""] = "24576"
    elif word == "Vastai":
        devices = [
            _device(word, i, custom_info=custom_info({"AIC": str(i // 2), "DeviceStrategy": "die"}))
            for i in range(4)
        ]
    elif word == "Metax-SGPU":
        devices = [
            _device(
                word,
                i,
                id=f"GPU-{i}",
                type="MXC500",
                custom_info=custom_info({"QosPolicy": "best-effort", "LinkZone": 1}),
            )
            for i in range(2)
        ]
        limits[row.memory_resource or ""] = "4"
    elif word == "Metax-GPU":
        devices = [_device(word, i, count=1, devmem=65536) for i in range(2)]
        facts = NodeVendorFacts(metax_losses={1: 100.0}, metax_scores={1: 40.0})
    elif word == "AMD":
        devices = [_device(word, i, type="AMD_Instinct_MI300X_VF", devcore=304) for i in range(2)]
        limits[row.memory_resource or ""] = "1000"
    else:
        devices = [_device(word, i) for i in range(2)]
        if row.memory_resource:
            limits[row.memory_resource] = "1"
    return devices, limits, facts


def _plan(row: Vendor, limits: Mapping[str, str], vendor: VendorPodFacts = NO_POD_FACTS) -> PodPlan:
    requests = container_requests(
        {"name": "c", "resources": {"limits": dict(limits)}}, vendors=ROWS
    )
    assert row.common_word in requests, (row.common_word, limits)
    slot = ContainerSlot("c", is_init=False, requests=requests)
    return pod_plan(PodDeviceRequests((slot,)), vendor=vendor)


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.common_word != "NVIDIA"], ids=lambda r: r.common_word
)
def test_every_rows_fit_and_score_through_the_registry(row: Vendor) -> None:
    word = row.common_word
    devices, limits, facts = small_node(row)
    node = build_node_usage("n", {word: devices}, vendor=facts)
    plan = _plan(row, limits)
    strategy = strategy_for(word)
    assert (family_of(word) in FIT_MODULES) == (not strategy.standard)
    (request,) = (r for slot in plan.requests.slots for w, r in slot.requests.items() if w == word)
    ctx = FitContext(vendor=vendor_context(word, plan.vendor, facts, node_name="n"))
    result = strategy.fit(list(reversed(node.vendor_devices(word))), request, ctx)
    assert result.ok, (word, result.reason)
    assert result.devices
    assert {d.uuid for d in result.devices} <= {d.id for d in devices}
    if strategy.score is not None:
        value = strategy.score(ScoreArgs(word, node, (result.devices,), "binpack", ctx.vendor))
        assert isinstance(value, float)
    decision = decide_node(node, plan)
    assert decision.fits, decision.reason


def test_scores_get_their_own_arguments() -> None:
    by_word = {row.common_word: row for row in ROWS}
    # MetaX whole GPUs: 2000 − losses[requested] under binpack, − scores[requested] under spread.
    devices, _, facts = small_node(by_word["Metax-GPU"])
    node = build_node_usage("n", {"Metax-GPU": devices}, vendor=facts)
    score = strategy_for("Metax-GPU").score
    assert score is not None
    granted = (ContainerDevice("Metax-GPU-0", "Metax-GPU", 65536, 100),)
    assert score(ScoreArgs("Metax-GPU", node, (granted,), "binpack")) == 1900.0
    assert score(ScoreArgs("Metax-GPU", node, (granted,), "spread")) == 1960.0
    # Ascend: the chip word first — two NPUs of one NetworkID score 10.
    devices, _, _ = small_node(by_word["Ascend910B3"])
    node = build_node_usage("n", {"Ascend910B3": devices})
    pair = (
        ContainerDevice("Ascend910B3-0", "Ascend910B3", 0, 0),
        ContainerDevice("Ascend910B3-1", "Ascend910B3", 0, 0),
    )
    ascend = strategy_for("Ascend910B3").score
    assert ascend is not None
    assert ascend(ScoreArgs("Ascend910B3", node, (pair,))) == 10.0
    # MetaX sGPU: the vendor context (an online pod on a device with one online pod: −20).
    devices, _, _ = small_node(by_word["Metax-SGPU"])
    node = build_node_usage("n", {"Metax-SGPU": devices})
    ctx = vendor_context(
        "Metax-SGPU",
        VendorPodFacts(sgpu_app_class="online"),
        NodeVendorFacts(),
        node_name="n",
        sgpu_state=lambda name: SgpuNodeState(tasks={"GPU-0": SgpuTasks(online=1)}),
    )
    sgpu = strategy_for("Metax-SGPU").score
    assert sgpu is not None
    one = (ContainerDevice("GPU-0", "MXC500", 1024, 0),)
    assert sgpu(ScoreArgs("Metax-SGPU", node, (one,), "binpack", ctx)) == -200000.0


# --- contexts --------------------------------------------------------------------------------


def test_ascend_mode_follows_the_node_annotation_over_the_configuration() -> None:
    pod = VendorPodFacts(ascend_vnpu_mode="hami-core", ascend_hami_core_default=False)
    assert not vendor_context("Ascend910B3", pod, NodeVendorFacts()).ascend_node_hami_core
    node = NodeVendorFacts(ascend_hami_core=True)
    assert vendor_context("Ascend910B3", pod, node).ascend_node_hami_core
    configured = VendorPodFacts(ascend_hami_core_default=True)
    assert not vendor_context(
        "Ascend910B3", configured, NodeVendorFacts(ascend_hami_core=False)
    ).ascend_node_hami_core


def test_a_hami_core_pod_is_refused_mode_not_fit_on_a_template_node() -> None:
    row = next(r for r in ROWS if r.common_word == "Ascend910B3")
    devices, limits, _ = small_node(row)
    plan = _plan(row, limits, VendorPodFacts(ascend_vnpu_mode="hami-core"))
    template_node = build_node_usage("n", {"Ascend910B3": devices})
    decision = decide_node(template_node, plan)
    assert not decision.fits
    assert "ModeNotFit" in decision.reason
    core_node = build_node_usage(
        "n", {"Ascend910B3": devices}, vendor=NodeVendorFacts(ascend_hami_core=True)
    )
    assert decide_node(core_node, plan).fits


def test_metax_gpu_containers_share_the_first_containers_device() -> None:
    row = next(r for r in ROWS if r.common_word == "Mthreads")
    devices = [_device("Mthreads", i, count=100, devmem=24576, devcore=16) for i in range(2)]
    node = build_node_usage("n", {"Mthreads": devices})
    limits = {row.count_resource: "1", row.memory_resource or "": "4"}
    requests = container_requests({"name": "c", "resources": {"limits": limits}}, vendors=ROWS)
    slots = tuple(ContainerSlot(f"c{i}", is_init=False, requests=requests) for i in range(2))
    decision = decide_node(node, pod_plan(PodDeviceRequests(slots)))
    assert decision.fits
    ((_, per_container),) = decision.devices.entries
    assert per_container[0][0].uuid == per_container[1][0].uuid


def test_sgpu_state_and_earlier_containers_make_the_pending_qos() -> None:
    state = SgpuNodeState(qos_pending={"GPU-0": "fixed-share"})
    ctx = vendor_context(
        "Metax-SGPU",
        VendorPodFacts(sgpu_qos="burst-share"),
        NodeVendorFacts(),
        node_name="n",
        earlier=((ContainerDevice("GPU-1", "MXC500", 1024, 10),),),
        sgpu_state=lambda name: state,
    )
    assert dict(ctx.sgpu_qos_pending) == {"GPU-0": "fixed-share", "GPU-1": "burst-share"}
    assert ctx.pod_uuids == ("GPU-1",)


def test_nvidia_never_builds_a_vendor_context() -> None:
    assert strategy_for("NVIDIA").standard


# --- usage charged per vendor ---------------------------------------------------------------


def test_an_enflame_drs_grant_holds_its_profiles_slices() -> None:
    row = next(r for r in ROWS if r.common_word == "Enflame")
    devices, _, facts = small_node(row)
    node = build_node_usage("n", {"Enflame": devices}, vendor=facts)
    plan = _plan(row, {row.count_resource: "2"})
    decision = decide_node(node, plan)
    assert decision.fits
    usage = decision_usage(decision, plan)
    placed = apply_usage(node, usage)
    (granted,) = decision.devices.entries[0][1][0]
    held = placed.device(granted.uuid)
    assert held is not None
    assert (held.used, held.usedmem, held.usedcores) == (2, 16384, 50)
    # Two GCUs of four slices take four grants of two slices; a fifth is refused.
    full = placed
    for _ in range(3):
        more = decide_node(full, plan)
        assert more.fits, more.reason
        full = apply_usage(full, decision_usage(more, plan))
    assert [dev.used for dev in full.devices] == [4, 4]
    refused = decide_node(full, plan)
    assert not refused.fits
    assert "CardTimeSlicingExhausted" in refused.reason
    # Removal is the exact inverse.
    assert remove_usage(placed, usage).devices == node.devices


@pytest.mark.parametrize(("cores", "masks"), [("1", (0b01, 0b10)), ("2", (0b11,))])
def test_aws_neuron_core_grants_are_disjoint_masks(cores: str, masks: tuple[int, ...]) -> None:
    row = next(r for r in ROWS if r.common_word == "AWSNeuron")
    devices = [
        _device(
            "AWSNeuron",
            0,
            count=2,
            devmem=0,
            devcore=3,
            custom_info=custom_info({"AWSNodeType": "trn1"}),
        )
    ]
    node: NodeUsage = build_node_usage("n", {"AWSNeuron": devices})
    plan = _plan(row, {row.cores_resource or "": cores})
    seen: list[int] = []
    for _ in masks:
        decision = decide_node(node, plan)
        assert decision.fits, decision.reason
        seen.append(decision.devices.entries[0][1][0][0].usedcores)
        node = apply_usage(node, decision_usage(decision, plan))
    assert tuple(seen) == masks
    assert node.devices[0].usedcores == 0b11
    refused = decide_node(node, plan)
    assert not refused.fits


def test_kunlun_vxpu_shares_are_charged_so_only_equal_shares_join() -> None:
    row = next(r for r in ROWS if r.common_word == "XPU")
    devices = [_device("XPU", 0, count=4, devmem=98304)]
    node = build_node_usage("n", {"XPU": devices})
    quarter = _plan(row, {row.count_resource: "1", row.memory_resource or "": "24576"})
    half = _plan(row, {row.count_resource: "1", row.memory_resource or "": "49152"})
    first = decide_node(node, quarter)
    assert first.devices.entries[0][1][0][0].usedcores == 25
    node = apply_usage(node, decision_usage(first, quarter))
    assert (node.devices[0].used, node.devices[0].usedmem, node.devices[0].usedcores) == (
        1,
        24576,
        25,
    )
    assert decide_node(node, quarter).fits
    assert not decide_node(node, half).fits


def test_node_annotations_the_fits_read_are_vendor_node_keys() -> None:
    from hami_scheduler.cache.nodes import VENDOR_NODE_KEYS

    assert keys.ASCEND_NODE_VNPU_CORE in VENDOR_NODE_KEYS
    assert keys.METAX_GPU_TOPOLOGY_LOSSES in VENDOR_NODE_KEYS
