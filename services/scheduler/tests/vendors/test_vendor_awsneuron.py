"""AWS Neuron: contiguous runs of whole devices and NeuronCore bitmasks
(contract hami-extensions §1.2 AWS Neuron)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import awsneuron
from hami_scheduler.core.vendors.awsneuron import AWS_NEURON, NODE_TYPE_KEY, run_starts

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

PLAIN = FitContext()


def neuron(
    i: int,
    *,
    node_type: str = "trn1.32xlarge",
    used: int = 0,
    mask: int = 0,
    health: bool = True,
    cores: int = 2,
) -> DeviceUsage:
    return vdev(
        AWS_NEURON,
        i,
        count=cores,
        mem=0,
        cores=(1 << cores) - 1,
        used=used,
        usedcores=mask,
        health=health,
        custom={NODE_TYPE_KEY: node_type},
    )


def node(
    n: int, busy: frozenset[int] | set[int] = frozenset(), node_type: str = "trn1.32xlarge"
) -> list[DeviceUsage]:
    return [
        neuron(i, node_type=node_type, used=1 if i in busy else 0, mask=3 if i in busy else 0)
        for i in range(n)
    ]


def indices(result_uuids: list[str]) -> list[int]:
    return [int(u.rsplit("-", 1)[1]) for u in result_uuids]


RUNS = [
    pytest.param("trn1.32xlarge", 16, set(), 4, [0, 1, 2, 3], id="aligned-first"),
    pytest.param("trn1.32xlarge", 16, {1}, 4, [4, 5, 6, 7], id="aligned-skips-broken-block"),
    pytest.param("trn1.32xlarge", 16, {0, 8}, 8, None, id="aligned-8-both-halves-broken"),
    pytest.param("trn1.32xlarge", 16, set(), 16, list(range(16)), id="aligned-16"),
    pytest.param("trn1.32xlarge", 16, {3}, 8, list(range(8, 16)), id="aligned-8-second-half"),
    pytest.param("trn1.32xlarge", 16, set(), 2, None, id="two-is-not-an-aligned-size"),
    pytest.param("trn1.32xlarge", 16, set(), 3, None, id="three-is-not-an-aligned-size"),
    pytest.param("trn1.32xlarge", 6, {0}, 4, None, id="aligned-block-past-the-end"),
    pytest.param("inf2.48xlarge", 12, {0}, 2, [1, 2], id="inf-any-start"),
    pytest.param("inf2.48xlarge", 12, {0, 2}, 3, [3, 4, 5], id="inf-three"),
    pytest.param("Inf1.24xlarge", 4, {1}, 2, [2, 3], id="Inf-capital"),
    pytest.param("inf2.48xlarge", 4, {1, 3}, 2, None, id="inf-no-run"),
]


@pytest.mark.parametrize(("node_type", "n", "busy", "nums", "expected"), RUNS)
def test_several_devices_take_a_contiguous_idle_run(
    node_type: str, n: int, busy: set[int], nums: int, expected: list[int] | None
) -> None:
    devices = node(n, busy, node_type)
    result = awsneuron.fit(devices, vreq(AWS_NEURON, nums, cores=2), PLAIN)
    if expected is None:
        assert (result.ok, result.reason) == (False, f"1/{n} NumaNotFit")
    else:
        assert result.ok
        assert indices(uuids_of(result.devices)) == expected
        assert all((d.usedmem, d.usedcores) == (0, 3) for d in result.devices)


def test_a_run_needs_healthy_selected_devices_and_a_node_type() -> None:
    devices = node(8)
    devices[1] = neuron(1, health=False)
    result = awsneuron.fit(devices, vreq(AWS_NEURON, 4), PLAIN)
    assert indices(uuids_of(result.devices)) == [4, 5, 6, 7]
    result = awsneuron.fit(node(8), vreq(AWS_NEURON, 4), ctx_of(nouse_uuids=["AWSNeuron-2"]))
    assert indices(uuids_of(result.devices)) == [4, 5, 6, 7]
    bare = [vdev(AWS_NEURON, i, count=2, cores=3) for i in range(4)]
    result = awsneuron.fit(bare, vreq(AWS_NEURON, 4), PLAIN)
    assert (result.ok, result.reason) == (False, "1/4 NumaNotFit")


def test_a_run_follows_registered_indices_not_the_policy_order() -> None:
    devices = list(reversed(node(8, {0})))
    result = awsneuron.fit(devices, vreq(AWS_NEURON, 4), PLAIN)
    assert indices(uuids_of(result.devices)) == [4, 5, 6, 7]


def test_run_starts() -> None:
    assert list(run_starts("inf2", 5, 2)) == [0, 1, 2, 3]
    assert list(run_starts("trn1", 16, 4)) == [0, 4, 8, 12]
    assert list(run_starts("trn1", 16, 5)) == []


MASKS = [
    pytest.param(0, 1, 0b01, id="first-user-one-core"),
    pytest.param(0, 2, 0b11, id="first-user-two-cores"),
    pytest.param(0b01, 1, 0b10, id="second-user-gets-the-complement"),
    pytest.param(0b10, 1, 0b01, id="complement-the-other-way"),
]


@pytest.mark.parametrize(("held", "cores", "expected"), MASKS)
def test_one_device_grants_a_core_mask(held: int, cores: int, expected: int) -> None:
    dev = neuron(0, used=1 if held else 0, mask=held)
    result = awsneuron.fit([dev], vreq(AWS_NEURON, 1, cores=cores), PLAIN)
    assert result.ok
    assert (result.devices[0].usedmem, result.devices[0].usedcores) == (0, expected)


REFUSALS = [
    pytest.param(neuron(0, health=False), PLAIN, "1/1 CardNotHealth", id="health"),
    pytest.param(vdev("NVIDIA", 0, count=2, cores=3), PLAIN, "1/1 CardTypeMismatch", id="type"),
    pytest.param(neuron(0), ctx_of(use_uuids=["x"]), "1/1 CardUuidMismatch", id="uuid"),
    pytest.param(neuron(0, used=2, mask=3), PLAIN, "1/1 CardTimeSlicingExhausted", id="slots"),
    pytest.param(
        neuron(0, used=1, mask=1),
        ctx_of(mutex=True),
        "1/1 ExclusiveDeviceAllocateConflict",
        id="mutex",
    ),
    pytest.param(
        neuron(0, cores=4, used=3, mask=0b0111), PLAIN, "1/1 CardInsufficientCore", id="cores"
    ),
]


@pytest.mark.parametrize(("dev", "ctx", "reason"), REFUSALS)
def test_one_device_refusals(dev: DeviceUsage, ctx: FitContext, reason: str) -> None:
    result = awsneuron.fit([dev], vreq(AWS_NEURON, 1, cores=2), ctx)
    assert (result.ok, result.reason) == (False, reason)


def test_one_device_walks_from_the_end_and_tallies() -> None:
    devices = [neuron(0), neuron(1, used=1, mask=0b01), neuron(2, health=False)]
    result = awsneuron.fit(devices, vreq(AWS_NEURON, 1, cores=2), PLAIN)
    assert uuids_of(result.devices) == ["AWSNeuron-0"]
    result = awsneuron.fit(devices[1:], vreq(AWS_NEURON, 1, cores=2), PLAIN)
    assert result.reason == "1/2 CardInsufficientCore, 1/2 CardNotHealth"


@settings(max_examples=200)
@given(
    masks=st.lists(st.integers(0, 15), min_size=1, max_size=8),
    cores=st.integers(1, 4),
    nums=st.integers(1, 5),
    inf=st.booleans(),
)
def test_core_masks_never_overlap_and_runs_take_idle_distinct_devices(
    masks: list[int], cores: int, nums: int, inf: bool
) -> None:
    node_type = "inf2.xlarge" if inf else "trn1.2xlarge"
    devices = [
        neuron(i, cores=4, used=mask.bit_count(), mask=mask, node_type=node_type)
        for i, mask in enumerate(masks)
    ]
    result = awsneuron.fit(devices, vreq(AWS_NEURON, nums, cores=cores), PLAIN)
    assert result == awsneuron.fit(devices, vreq(AWS_NEURON, nums, cores=cores), PLAIN)
    if not result.ok:
        return
    by_uuid = {dev.uuid: dev for dev in devices}
    assert len(set(uuids_of(result.devices))) == len(result.devices) == nums
    for granted in result.devices:
        dev = by_uuid[granted.uuid]
        if nums == 1:
            assert granted.usedcores & dev.usedcores == 0
            assert granted.usedcores.bit_count() == cores
            assert granted.usedcores & ~dev.totalcore == 0
        else:
            assert dev.used == 0
    if nums > 1:
        got = indices(uuids_of(result.devices))
        assert got == list(range(got[0], got[0] + nums))
