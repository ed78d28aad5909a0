"""Ascend: the standard loop, vNPU modes, NetworkID topology, 910C card pairs and the
NetworkID score (contract hami-extensions §0 standard loop, §1.2 Ascend)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import ContainerDevice
from hami_scheduler.core import DeviceSelectors, FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import ascend
from hami_scheduler.core.vendors.context import VendorContext

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

B3 = "Ascend910B3"
C = "Ascend910C"
PLAIN = FitContext()


def npu(
    i: int,
    *,
    word: str = B3,
    net: str | None = None,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    health: bool = True,
    numa: int = 0,
    count: int = 4,
    aicore: int = 20,
) -> DeviceUsage:
    return vdev(
        word,
        i,
        count=count,
        mem=65536,
        cores=aicore,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        health=health,
        numa=numa,
        custom=None if net is None else {"NetworkID": net},
    )


def with_mode(mode: str, node_hami_core: bool, base: FitContext = PLAIN) -> FitContext:
    return dataclasses.replace(
        base,
        vendor=VendorContext(ascend_vnpu_mode=mode, ascend_node_hami_core=node_hami_core),
    )


STANDARD_REFUSALS = [
    pytest.param(npu(0, health=False), PLAIN, vreq(B3, mem=1), "CardNotHealth", id="health"),
    pytest.param(npu(0, word="Ascend310P"), PLAIN, vreq(B3, mem=1), "CardTypeMismatch", id="type"),
    pytest.param(
        npu(0),
        ctx_of(nouse_types=["Ascend910B3"]),
        vreq(B3, mem=1),
        "CardTypeMismatch",
        id="nouse-type",
    ),
    pytest.param(npu(0), ctx_of(use_uuids=["x"]), vreq(B3, mem=1), "CardUuidMismatch", id="uuid"),
    pytest.param(npu(0, used=4), PLAIN, vreq(B3, mem=1), "CardTimeSlicingExhausted", id="slots"),
    pytest.param(
        npu(0, used=1),
        ctx_of(mutex=True),
        vreq(B3, mem=1),
        "ExclusiveDeviceAllocateConflict",
        id="mutex",
    ),
    pytest.param(
        npu(0, usedmem=60000), PLAIN, vreq(B3, mem=8192), "CardInsufficientMemory", id="memory"
    ),
    pytest.param(
        npu(0, usedcores=15), PLAIN, vreq(B3, mem=1, cores=8), "CardInsufficientCore", id="cores"
    ),
    pytest.param(
        npu(0, used=1, aicore=100),
        PLAIN,
        vreq(B3, mem=1, cores=100),
        "ExclusiveDeviceAllocateConflict",
        id="whole-card-conflict",
    ),
    pytest.param(
        npu(0, used=1, usedcores=20),
        PLAIN,
        vreq(B3, mem=1, cores=0),
        "CardComputeUnitsExhausted",
        id="units-exhausted",
    ),
]


@pytest.mark.parametrize(("dev", "ctx", "request_", "word"), STANDARD_REFUSALS)
def test_standard_loop_refusals(
    dev: DeviceUsage, ctx: FitContext, request_: object, word: str
) -> None:
    assert isinstance(request_, type(vreq(B3)))
    result = ascend.fit([dev], request_, ctx)
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_the_loop_walks_from_the_end_and_grants_memory_and_cores() -> None:
    devices = [npu(0), npu(1), npu(2, health=False)]
    result = ascend.fit(devices, vreq(B3, 1, mem=16384, cores=5), PLAIN)
    assert uuids_of(result.devices) == [f"{B3}-1"]
    assert (result.devices[0].usedmem, result.devices[0].usedcores) == (16384, 5)
    result = ascend.fit(devices, vreq(B3, 1, pct=50), PLAIN)
    assert result.devices[0].usedmem == 32768


def test_too_few_fitting_devices_report_what_was_allocated() -> None:
    devices = [npu(0), npu(1, health=False)]
    result = ascend.fit(devices, vreq(B3, 2, mem=1), PLAIN)
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth"


def test_numa_bind_restarts_the_run() -> None:
    ctx = FitContext(selectors=DeviceSelectors(numa_bind=True))
    devices = [npu(0, numa=0), npu(1, numa=1), npu(2, numa=1, health=False)]
    result = ascend.fit(devices, vreq(B3, 2, mem=1), ctx)
    assert result.reason == (
        "1/3 AllocatedCardsInsufficientRequest, 1/3 CardNotHealth, 1/3 NumaNotFit"
    )
    devices = [npu(0, numa=0), npu(1, numa=1), npu(2, numa=1)]
    assert uuids_of(ascend.fit(devices, vreq(B3, 2, mem=1), ctx).devices) == [
        f"{B3}-2",
        f"{B3}-1",
    ]


def test_hami_core_counts_a_device_as_100_cores() -> None:
    dev = npu(0, usedcores=50, aicore=20)
    result = ascend.fit([dev], vreq(B3, mem=1, cores=40), with_mode("hami-core", True))
    assert result.ok, result.reason
    assert result.devices[0].usedcores == 40
    result = ascend.fit([dev], vreq(B3, mem=1, cores=40), PLAIN)
    assert result.reason == "1/1 CardInsufficientCore"
    result = ascend.fit([npu(0, used=1)], vreq(B3, mem=1, cores=100), with_mode("hami-core", True))
    assert result.reason == "1/1 ExclusiveDeviceAllocateConflict"


MODES = [
    pytest.param("hami-core", False, False, id="hami-core-pod-plain-node"),
    pytest.param("hami-core", True, True, id="hami-core-pod-hami-core-node"),
    pytest.param("template", True, False, id="template-pod-hami-core-node"),
    pytest.param("template", False, True, id="template-pod-plain-node"),
    pytest.param("", True, True, id="no-mode-hami-core-node"),
    pytest.param("", False, True, id="no-mode-plain-node"),
]


@pytest.mark.parametrize(("mode", "node_hami_core", "fits"), MODES)
def test_vnpu_mode_must_suit_the_node(mode: str, node_hami_core: bool, fits: bool) -> None:
    result = ascend.fit([npu(0), npu(1)], vreq(B3, mem=1), with_mode(mode, node_hami_core))
    assert result.ok is fits
    if not fits:
        assert result.reason == "1/2 ModeNotFit"


def test_topology_one_npu_takes_the_first_collected() -> None:
    devices = [npu(0, net="0"), npu(1, net="1"), npu(2, net="1")]
    result = ascend.fit(devices, vreq(B3, 1, mem=1), PLAIN)
    assert uuids_of(result.devices) == [f"{B3}-2"]


def test_topology_fills_from_the_largest_network_group() -> None:
    devices = [
        npu(0, net="0"),
        npu(1, net="0"),
        npu(2, net="0"),
        npu(4, net="1"),
        npu(5, net="1"),
    ]
    result = ascend.fit(devices, vreq(B3, 2, mem=1), PLAIN)
    assert uuids_of(result.devices) == [f"{B3}-2", f"{B3}-1"]
    result = ascend.fit(devices, vreq(B3, 4, mem=1), PLAIN)
    assert sorted(uuids_of(result.devices)) == [f"{B3}-0", f"{B3}-1", f"{B3}-2", f"{B3}-5"]


def test_topology_needs_every_device_to_have_a_network_id() -> None:
    devices = [npu(0, net="0"), npu(1), npu(2, net="1"), npu(3, net="1")]
    # No topology: the standard loop stops at the last two in policy order.
    result = ascend.fit(devices, vreq(B3, 2, mem=1), PLAIN)
    assert uuids_of(result.devices) == [f"{B3}-3", f"{B3}-2"]
    devices = [npu(0, net="0"), npu(1, net="0"), npu(2, net="1")]
    result = ascend.fit(devices, vreq(B3, 2, mem=1), PLAIN)
    assert sorted(uuids_of(result.devices)) == [f"{B3}-0", f"{B3}-1"]


def test_topology_only_for_910_words() -> None:
    devices = [npu(i, word="Ascend310P", net=str(n)) for i, n in enumerate(["0", "0", "1"])]
    result = ascend.fit(devices, vreq("Ascend310P", 2, mem=1), PLAIN)
    assert uuids_of(result.devices) == ["Ascend310P-2", "Ascend310P-1"]


def test_topology_with_too_few_fitting_devices_fails() -> None:
    devices = [npu(0, net="0"), npu(1, net="0", health=False)]
    result = ascend.fit(devices, vreq(B3, 2, mem=1), PLAIN)
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth"


def c_npu(i: int, **kw: object) -> DeviceUsage:
    return npu(i, word=C, net="0", **kw)  # type: ignore[arg-type]


PAIRS = [
    pytest.param([0, 1], set(), 2, ["0", "1"], id="one-full-card"),
    pytest.param([0, 1, 2, 3], {0}, 2, ["2", "3"], id="half-used-card-skipped"),
    pytest.param([0, 1, 2, 3, 4, 5], {2}, 4, ["0", "1", "4", "5"], id="two-full-cards"),
    pytest.param([0, 1, 2, 4, 6], set(), 4, None, id="one-full-three-halves"),
    pytest.param([0, 2], set(), 2, None, id="two-halves"),
    pytest.param([0, 2, 4, 6], set(), 4, None, id="no-full-card"),
    pytest.param([0, 1, 2, 3], set(), 3, None, id="odd-request-never-pairs"),
]


@pytest.mark.parametrize(("indices", "busy", "nums", "expected"), PAIRS)
def test_910c_takes_whole_cards(
    indices: list[int], busy: set[int], nums: int, expected: list[str] | None
) -> None:
    devices = [c_npu(i, used=4 if i in busy else 0) for i in indices]
    result = ascend.fit(devices, vreq(C, nums, mem=1), PLAIN)
    if expected is None:
        assert not result.ok
        assert "NumaNotFit" in result.reason or "AllocatedCards" in result.reason
    else:
        assert result.ok
        assert sorted(u.rsplit("-", 1)[1] for u in uuids_of(result.devices)) == expected


def test_910c_pairs_without_network_ids_too() -> None:
    devices = [npu(0, word=C), npu(2, word=C)]
    result = ascend.fit(devices, vreq(C, 2, mem=1), PLAIN)
    assert (result.ok, result.reason) == (False, "2/2 NumaNotFit")
    devices = [npu(0, word=C), npu(1, word=C), npu(3, word=C)]
    result = ascend.fit(devices, vreq(C, 2, mem=1), PLAIN)
    assert sorted(uuids_of(result.devices)) == [f"{C}-0", f"{C}-1"]


def test_910c_partial_pairing_reports_the_paired_npus() -> None:
    devices = [c_npu(i) for i in (0, 1, 2, 4)]
    result = ascend.fit(devices, vreq(C, 4, mem=1), PLAIN)
    assert result.reason == "2/4 AllocatedCardsInsufficientRequest, 2/4 NumaNotFit"


def test_910c_single_npu_is_the_plain_topology_rule() -> None:
    devices = [c_npu(0), c_npu(2)]
    assert uuids_of(ascend.fit(devices, vreq(C, 1, mem=1), PLAIN).devices) == [f"{C}-2"]


def granted(*uuids: str) -> list[ContainerDevice]:
    return [ContainerDevice(u, B3, 1, 0) for u in uuids]


def test_score_is_the_largest_network_share_per_container_times_ten() -> None:
    node = [npu(0, net="0"), npu(1, net="0"), npu(2, net="1"), npu(3, net="1")]
    one, two, three = f"{B3}-0", f"{B3}-1", f"{B3}-2"
    assert ascend.score(B3, node, [granted(one, two)]) == 10.0
    assert ascend.score(B3, node, [granted(one, three)]) == 5.0
    assert ascend.score(B3, node, [granted(one, two), [], granted(three)]) == 20.0
    assert ascend.score("Ascend310P", node, [granted(one, two)]) == 0.0
    bare = [npu(0), npu(1, net="0")]
    assert ascend.score(B3, bare, [granted(one, two)]) == 0.0


@settings(max_examples=200)
@given(
    state=st.lists(
        st.tuples(
            st.integers(0, 4),
            st.integers(0, 65536),
            st.integers(0, 20),
            st.sampled_from(["0", "1"]),
        ),
        min_size=1,
        max_size=8,
    ),
    nums=st.integers(1, 4),
    mem=st.integers(0, 40000),
    cores=st.integers(0, 20),
    word=st.sampled_from([B3, C]),
)
def test_ascend_never_overcommits_and_is_deterministic(
    state: list[tuple[int, int, int, str]], nums: int, mem: int, cores: int, word: str
) -> None:
    devices = [
        npu(i, word=word, used=used, usedmem=usedmem, usedcores=usedcores, net=net)
        for i, (used, usedmem, usedcores, net) in enumerate(state)
    ]
    request = vreq(word, nums, mem=mem, cores=cores) if mem else vreq(word, nums, pct=25)
    result = ascend.fit(devices, request, PLAIN)
    assert result == ascend.fit(devices, request, PLAIN)
    if not result.ok:
        assert result.reason
        return
    by_uuid = {dev.uuid: dev for dev in devices}
    assert len(set(uuids_of(result.devices))) == len(result.devices) == nums
    for g in result.devices:
        dev = by_uuid[g.uuid]
        assert dev.used < dev.count
        assert dev.usedmem + g.usedmem <= dev.totalmem
        assert dev.usedcores + g.usedcores <= dev.totalcore
    if word == C and nums > 1:
        cards = [by_uuid[g.uuid].index // 2 for g in result.devices]
        assert all(cards.count(card) == 2 for card in cards)
