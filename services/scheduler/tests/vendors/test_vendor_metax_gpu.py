"""MetaX whole GPUs: the standard loop, the same-device filter and the topology score
(contract hami-extensions §1.2 Metax whole GPU)."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_scheduler.core import FitContext
from hami_scheduler.core.vendors import metax_gpu
from hami_scheduler.core.vendors.context import VendorContext
from hami_scheduler.core.vendors.metax_gpu import METAX_GPU

from .vendor_helpers import uuids_of, vdev, vreq

PLAIN = FitContext()


def with_pod(*uuids: str) -> FitContext:
    return dataclasses.replace(PLAIN, vendor=VendorContext(pod_uuids=uuids))


def test_the_standard_loop_takes_idle_gpus_whole() -> None:
    devices = [vdev(METAX_GPU, i, mem=65536, used=int(i == 2)) for i in range(3)]
    result = metax_gpu.fit(devices, vreq(METAX_GPU, 2, pct=100, cores=100), PLAIN)
    assert uuids_of(result.devices) == ["Metax-GPU-1", "Metax-GPU-0"]
    assert all((g.usedmem, g.usedcores) == (65536, 100) for g in result.devices)
    result = metax_gpu.fit(devices, vreq(METAX_GPU, 3, pct=100, cores=100), PLAIN)
    assert result.reason == "2/3 AllocatedCardsInsufficientRequest, 1/3 CardTimeSlicingExhausted"


def test_later_containers_stay_on_the_earlier_containers_gpu() -> None:
    devices = [vdev(METAX_GPU, i, count=2, mem=65536) for i in range(3)]
    request = vreq(METAX_GPU, 1, mem=1024, cores=10)
    result = metax_gpu.fit(devices, request, with_pod("Metax-GPU-0"))
    assert uuids_of(result.devices) == ["Metax-GPU-0"]
    result = metax_gpu.fit(devices[1:], request, with_pod("Metax-GPU-0"))
    assert result.reason == "2/2 CardNotFoundCustomFilterRule"
    result = metax_gpu.fit(devices, request, with_pod("Metax-GPU-0", "Metax-GPU-1"))
    assert result.reason == "3/3 CardNotFoundCustomFilterRule"


def test_the_custom_filter_runs_last() -> None:
    devices = [vdev(METAX_GPU, 0, count=1, used=1, mem=65536)]
    result = metax_gpu.fit(devices, vreq(METAX_GPU, 1, mem=1), with_pod("other"))
    assert result.reason == "1/1 CardTimeSlicingExhausted"


def test_score_by_node_policy() -> None:
    losses = {1: 0.0, 2: 300.0}
    scores = {1: 100.0, 2: 50.0}
    assert metax_gpu.score("binpack", 2, losses, scores) == 1700.0
    assert metax_gpu.score("spread", 2, losses, scores) == 1950.0
    assert metax_gpu.score("binpack", 1, losses, scores) == 2000.0
    assert metax_gpu.score("binpack", 4, losses, scores) == 0.0
    assert metax_gpu.score("other", 1, losses, scores) == 0.0


@settings(max_examples=150)
@given(
    used=st.lists(st.integers(0, 1), min_size=1, max_size=8),
    nums=st.integers(1, 4),
    earlier=st.lists(st.integers(0, 7), max_size=2),
)
def test_metax_gpus_are_never_shared_and_follow_earlier_containers(
    used: list[int], nums: int, earlier: list[int]
) -> None:
    devices = [
        vdev(METAX_GPU, i, mem=65536, used=u, usedmem=65536 * u, usedcores=100 * u)
        for i, u in enumerate(used)
    ]
    ctx = with_pod(*(f"Metax-GPU-{i}" for i in earlier))
    result = metax_gpu.fit(devices, vreq(METAX_GPU, nums, pct=100, cores=100), ctx)
    if result.ok:
        chosen = uuids_of(result.devices)
        assert len(set(chosen)) == nums
        assert all(devices[int(u.rsplit("-", 1)[1])].used == 0 for u in chosen)
        assert all(u == f"Metax-GPU-{i}" for u in chosen for i in earlier)
