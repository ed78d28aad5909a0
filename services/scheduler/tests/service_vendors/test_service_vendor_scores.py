"""The vendors' own node scores and placement rules through the extender's HTTP interface against
kubesim: Ascend's NetworkID score, MetaX's GPU topology score, Kunlunxin's wings and bubble
score, MetaX sGPU's app classes, QoS and score.

Nodes are registered as kubesim's plugin stand-ins register them.  Each score test offers two
candidates of which the node policy alone (the usage score) picks one and the vendor's score
the other; a spread case checks the direction a score takes under spread.  Where the pod can
turn the score off (a count the node publishes no topology for, a pod that is not
topology-aware) a control case shows the policy's own choice on the same nodes."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

import pytest

from hami_kubesim.testing import eventually
from hami_kubesim.vendors.inventory import VendorDevices, device_ids, node_annotations
from hami_protocol import keys
from hami_scheduler.core.vendors.metax_sgpu import QOS_KEY

from ..service_helpers import Harness, pinned, vendor_harness

ASCEND = "Ascend910B3"
SGPU = "Metax-SGPU"
KUNLUN = "kunlun"


async def _split_and_together(
    h: Harness, word: str, share: Mapping[str, str], notes: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """Nodes "split" — 5 devices of ``word``, of which the stand-in puts 0-3 in one group
    (Ascend NetworkID 0, MetaX MetaLink zone 1) and 4 in another — and "together" — 2 devices
    of one group.  A pod asking ``share`` is pinned to each of devices 1-3 of "split": the
    busier node (binpack prefers it) keeps whole devices in two groups only, 0 and 4.  The
    device IDs of "split"."""
    split = VendorDevices(word, 5)
    await h.add_vendor_node("split", split)
    await h.add_vendor_node("together", VendorDevices(word, 2))
    devices = device_ids(split, "split")
    for i in (1, 2, 3):
        held = {**(notes or {}), **pinned(word, devices[i])}
        assert await h.placed(f"share-{i}", share, ["split"], held) == "split"
    return devices


# --- Ascend: NetworkID groups ------------------------------------------------------------------

ASCEND_SLICE = {f"huawei.com/{ASCEND}": "1", f"huawei.com/{ASCEND}-memory": "16384"}


async def test_an_ascend_multi_npu_pod_goes_where_its_npus_share_a_network_id() -> None:
    async with vendor_harness() as h:
        npus = await _split_and_together(h, ASCEND, ASCEND_SLICE)
        # Scores: "split" 10 x 1/2 plus its usage, "together" 10 x 2/2.
        limits = {f"huawei.com/{ASCEND}": "2"}
        assert await h.placed("pair", limits, ["split", "together"]) == "together"
        together = device_ids(VendorDevices(ASCEND, 2), "together")
        assert sorted(h.granted("pair", ASCEND)) == sorted(together)
        # On "split" alone the pair is what it would have got: one NPU of each network.
        assert await h.placed("pair-2", limits, ["split"]) == "split"
        assert sorted(h.granted("pair-2", ASCEND)) == sorted([npus[0], npus[4]])


# --- MetaX whole GPUs: the plugin's topology losses and scores ---------------------------------

METAX_GPU = "Metax-GPU"
METAX_TWO = {"metax-tech.com/gpu": "2"}


def _topology_map(two: int | None) -> str:
    """A node's losses or scores: ``two`` for a 2-GPU placement (``None``: no entry)."""
    return '{"1": 0}' if two is None else f'{{"1": 0, "2": {two}}}'


@pytest.mark.parametrize(
    ("policy", "busy", "idle", "winner"),
    [
        # binpack scores 2000 - losses[2]: the idle node's smaller loss outweighs the busy
        # node's usage.
        ("binpack", 300, 100, "idle"),
        # spread takes the lowest 2000 - scores[2]: the busy node's higher topology score
        # outweighs the idle node's lower usage.
        ("spread", 300, 100, "busy"),
        # Control: no entry for 2 GPUs scores nothing, and each policy picks by usage alone.
        ("binpack", None, None, "busy"),
        ("spread", None, None, "idle"),
    ],
    ids=["binpack-losses", "spread-scores", "binpack-no-topology", "spread-no-topology"],
)
async def test_the_metax_gpu_topology_score_picks_the_better_placement(
    policy: str, busy: int | None, idle: int | None, winner: str
) -> None:
    read, unread = (keys.METAX_GPU_TOPOLOGY_LOSSES, keys.METAX_GPU_TOPOLOGY_SCORES)
    if policy == "spread":
        read, unread = unread, read
    async with vendor_harness() as h:
        for name, two in (("busy", busy), ("idle", idle)):
            # The map the policy does not read says the opposite: reading it would fail.
            opposite = None if two is None else 400 - two
            topology = {read: _topology_map(two), unread: _topology_map(opposite)}
            await h.add_vendor_node(name, VendorDevices(METAX_GPU, 4), annotations=topology)
        assert await h.placed("one", {"metax-tech.com/gpu": "1"}, ["busy"]) == "busy"
        policy_note = {keys.NODE_SCHEDULER_POLICY: policy}
        assert await h.placed("two", METAX_TWO, ["busy", "idle"], policy_note) == winner


# --- Kunlunxin whole XPUs: wings 0-3 / 4-7, cross-wing groups, the bubble score ----------------

XPUS = VendorDevices(KUNLUN, 8)


def _xpus(n: int) -> dict[str, str]:
    return {"kunlunxin.com/xpu": str(n)}


async def _occupy(h: Harness, node: str, indices: Sequence[int]) -> None:
    """One single-XPU pod pinned to each of ``indices`` on ``node``."""
    ids = device_ids(XPUS, node)
    for i in indices:
        assert await h.placed(f"{node}-xpu-{i}", _xpus(1), [node], pinned(KUNLUN, ids[i])) == node


def _board_indices(h: Harness, pod: str) -> str:
    notes = h.pod(pod)["metadata"]["annotations"]
    granted = [uuid.rsplit("-", 1)[1] for uuid in h.granted(pod, KUNLUN)]
    assert notes[keys.KUNLUN_DEVICE_IDX] == ",".join(granted)
    return str(notes[keys.KUNLUN_DEVICE_IDX])


@pytest.mark.parametrize(
    ("used", "count", "chosen"),
    [
        # Within one wing: the wing whose free count is the first of count..4 that matches.
        ((0, 1), 2, "2,3"),
        ((0,), 2, "1,2"),
        ((0,), 4, "4,5,6,7"),
        # No wing has room: a cross-linked pair, or a cross group leaving a linked pair (1-5).
        ((0, 1, 2, 4, 5, 6), 2, "3,7"),
        ((0, 4), 4, "2,3,6,7"),
    ],
    ids=["two-in-the-fuller-wing", "two-in-a-wing", "four-in-a-wing", "cross-pair", "cross-group"],
)
async def test_kunlun_xpus_are_taken_within_a_wing_else_across_linked_wings(
    used: tuple[int, ...], count: int, chosen: str
) -> None:
    async with vendor_harness() as h:
        await h.add_vendor_node("n", XPUS)
        await _occupy(h, "n", used)
        assert await h.placed("p", _xpus(count), ["n"]) == "n"
        assert _board_indices(h, "p") == chosen


async def test_kunlun_bubble_score_outweighs_binpack_usage() -> None:
    async with vendor_harness() as h:
        await h.add_vendor_node("two-used", XPUS)
        await h.add_vendor_node("one-used", XPUS)
        await _occupy(h, "two-used", (0, 1))
        await _occupy(h, "one-used", (0,))
        # Bubble of the pod's XPUs minus bubble of those in use: two-used gives it 2,3
        # (2 - 2 -> 2000, plus the busier node's usage), one-used 1,2 (2 - 3 -> 3000).
        assert await h.placed("pair", _xpus(2), ["two-used", "one-used"]) == "one-used"
        assert _board_indices(h, "pair") == "1,2"


# --- MetaX sGPU: app classes, QoS, online placement and the node score -------------------------

SGPU_SHARE = {
    "metax-tech.com/sgpu": "1",
    "metax-tech.com/vmemory": "4",
    "metax-tech.com/vcore": "20",
}
SGPU_WHOLE = {"metax-tech.com/sgpu": "2", "metax-tech.com/vcore": "100"}


def _sgpu_notes(
    app_class: str = "", qos: str = keys.METAX_QOS_BEST_EFFORT, **more: str
) -> dict[str, str]:
    """The pod's sGPU annotations (the webhook always sets a QoS policy)."""
    notes = {keys.METAX_SGPU_QOS_POLICY: qos, **more}
    if app_class:
        notes[keys.METAX_SGPU_APP_CLASS] = app_class
    return notes


@pytest.mark.parametrize(
    ("first", "second", "joins"),
    [
        ("offline", "online", True),
        ("online", "online", True),
        ("offline", "offline", True),
        # An offline pod would be suspended by the online one.
        ("online", "offline", False),
        # Classed and unclassed pods never share a device.
        ("online", "", False),
        ("", "offline", False),
    ],
)
async def test_sgpu_app_classes_share_a_device_as_hami_allows(
    first: str, second: str, joins: bool
) -> None:
    async with vendor_harness() as h:
        await h.add_vendor_node("n", VendorDevices(SGPU, 1))
        assert await h.placed("first", SGPU_SHARE, ["n"], _sgpu_notes(first)) == "n"
        if joins:
            assert await h.placed("second", SGPU_SHARE, ["n"], _sgpu_notes(second)) == "n"
        else:
            reason = await h.refusal("second", SGPU_SHARE, "n", _sgpu_notes(second))
            assert reason == "1/1 CardAppClassMismatch"


async def test_an_online_sgpu_pod_avoids_devices_running_only_offline_pods() -> None:
    spec = VendorDevices(SGPU, 2)
    async with vendor_harness() as h:
        await h.add_vendor_node("n", spec)
        busy, idle = device_ids(spec, "n")
        offline = _sgpu_notes("offline", **pinned(SGPU, busy))
        assert await h.placed("offline", SGPU_SHARE, ["n"], offline) == "n"
        # binpack would take the busier device; the online order puts offline-only ones last.
        binpack = {keys.GPU_SCHEDULER_POLICY: "binpack"}
        assert await h.placed("online", SGPU_SHARE, ["n"], _sgpu_notes("online", **binpack))
        assert h.granted("online", SGPU) == [idle]


@pytest.mark.parametrize(
    "policy",
    [
        # An online pod scores -100 per offline pod on an offline-only device and -20 per
        # online pod (x10000), so it joins the online pod although binpack prefers the node
        # whose offline pod holds more cores.
        "binpack",
        # The score is policy-neutral: spread negates it (and here agrees with usage).
        "spread",
    ],
)
async def test_the_sgpu_score_steers_an_online_pod_away_from_offline_pods(policy: str) -> None:
    async with vendor_harness() as h:
        await h.add_vendor_node("with-offline", VendorDevices(SGPU, 1))
        await h.add_vendor_node("with-online", VendorDevices(SGPU, 1))
        for name, held in (("with-offline", "offline"), ("with-online", "online")):
            assert await h.placed(held, SGPU_SHARE, [name], _sgpu_notes(held)) == name
        notes = _sgpu_notes("online", **{keys.NODE_SCHEDULER_POLICY: policy})
        candidates = ["with-offline", "with-online"]
        assert await h.placed("p", SGPU_SHARE, candidates, notes) == "with-online"


async def _report_qos(h: Harness, node: str, spec: VendorDevices, qos: str) -> None:
    """The plugin's next report: its devices' QoS policy is now ``qos``."""
    notes = node_annotations(dataclasses.replace(spec, qos_policy=qos), node, datetime.now(UTC))
    await h.api.patch("nodes", node, {"metadata": {"annotations": notes}}, patch_type="merge")

    def reported() -> bool:
        usage = h.scheduler.cache.nodes.get(node)
        return usage is not None and all(
            dev.custom.get(QOS_KEY) == qos for dev in usage.vendor_devices(SGPU)
        )

    await eventually(reported, what=f"{node} reports QoS {qos}")


async def test_sgpu_pods_of_another_qos_policy_do_not_join_a_shared_device() -> None:
    spec = VendorDevices(SGPU, 1, qos_policy=keys.METAX_QOS_BEST_EFFORT)
    fixed = _sgpu_notes(qos=keys.METAX_QOS_FIXED_SHARE)
    effort = _sgpu_notes(qos=keys.METAX_QOS_BEST_EFFORT)
    async with vendor_harness() as h:
        await h.add_vendor_node("n", spec)
        # An idle device takes any policy, whatever the plugin last reported for it.
        assert await h.placed("fixed", SGPU_SHARE, ["n"], fixed) == "n"
        await eventually(lambda: h.scheduler.cache.assumed_count() == 0, what="fixed observed")
        # The plugin still reports best-effort: the device now runs fixed-share all the same.
        mismatch = "1/1 CardQosPolicyMismatch"
        assert await h.refusal("effort", SGPU_SHARE, "n", effort) == mismatch
        await _report_qos(h, "n", spec, keys.METAX_QOS_FIXED_SHARE)
        assert await h.refusal("effort-2", SGPU_SHARE, "n", effort) == mismatch
        assert await h.placed("fixed-2", SGPU_SHARE, ["n"], fixed) == "n"


@pytest.mark.parametrize(("aware", "winner"), [("true", "together"), ("false", "split")])
async def test_the_sgpu_score_keeps_a_topology_aware_pods_whole_devices_in_one_metalink_zone(
    aware: str, winner: str
) -> None:
    async with vendor_harness() as h:
        await _split_and_together(h, SGPU, SGPU_SHARE, _sgpu_notes())
        # Topology-aware: "together" scores 10 x one link (x10000), "split" nothing; otherwise
        # binpack takes the busier node.
        notes = _sgpu_notes(**{keys.METAX_SGPU_TOPOLOGY_AWARE: aware})
        assert await h.placed("whole", SGPU_WHOLE, ["split", "together"], notes) == winner
