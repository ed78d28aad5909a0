"""MetaX sGPU: app classes, QoS, online placement, MetaLink zones and the node score
(contract hami-extensions §1.2 Metax sGPU)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import ContainerDevice
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core import FitContext
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors import metax_sgpu
from hami_scheduler.core.vendors.context import SgpuTasks, VendorContext
from hami_scheduler.core.vendors.metax_sgpu import METAX_SGPU, app_class_fits, link_score

from .vendor_helpers import ctx_of, uuids_of, vdev, vreq

MODEL = "MXC500"


def sg(
    i: int,
    *,
    used: int = 0,
    usedmem: int = 0,
    usedcores: int = 0,
    health: bool = True,
    qos: str = "",
    zone: int = 0,
) -> DeviceUsage:
    return vdev(
        METAX_SGPU,
        i,
        uuid=f"GPU-{i}",
        model=MODEL,
        count=16,
        mem=65536,
        cores=100,
        used=used,
        usedmem=usedmem,
        usedcores=usedcores,
        health=health,
        custom={"QosPolicy": qos, "LinkZone": str(zone)},
    )


def ctx(
    *,
    qos: str = "best-effort",
    app_class: str = "",
    tasks: Mapping[str, SgpuTasks] | None = None,
    pending: Mapping[str, str] | None = None,
    topology: bool = False,
    base: FitContext | None = None,
) -> FitContext:
    return dataclasses.replace(
        base or FitContext(),
        vendor=VendorContext(
            sgpu_qos=qos,
            sgpu_app_class=app_class,
            sgpu_tasks=dict(tasks or {}),
            sgpu_qos_pending=dict(pending or {}),
            sgpu_topology_aware=topology,
        ),
    )


def share(nums: int = 1, *, mem: int = 4096, cores: int = 20) -> ContainerDeviceRequest:
    return vreq(METAX_SGPU, nums, mem=mem, cores=cores)


APP_CLASSES = [
    # (request class, device used, online tasks, offline tasks, fits)
    pytest.param("", 0, 0, 0, True, id="idle-takes-unclassed"),
    pytest.param("online", 0, 0, 0, True, id="idle-takes-online"),
    pytest.param("", 1, 0, 0, True, id="unclassed-joins-unclassed"),
    pytest.param("online", 1, 0, 0, False, id="online-never-joins-unclassed"),
    pytest.param("offline", 1, 0, 0, False, id="offline-never-joins-unclassed"),
    pytest.param("", 1, 1, 0, False, id="unclassed-never-joins-online"),
    pytest.param("", 1, 0, 1, False, id="unclassed-never-joins-offline"),
    pytest.param("online", 1, 1, 0, True, id="online-joins-online"),
    pytest.param("online", 1, 0, 1, True, id="online-joins-offline"),
    pytest.param("offline", 1, 0, 1, True, id="offline-joins-offline"),
    pytest.param("offline", 1, 1, 1, False, id="offline-never-joins-online"),
]


@pytest.mark.parametrize(("app_class", "used", "online", "offline", "fits"), APP_CLASSES)
def test_app_class_isolation(
    app_class: str, used: int, online: int, offline: int, fits: bool
) -> None:
    assert app_class_fits(app_class, sg(0, used=used), SgpuTasks(online, offline)) is fits


QOS = [
    pytest.param(0, "fixed-share", None, 20, True, id="idle-any-qos"),
    pytest.param(1, "fixed-share", None, 100, True, id="exclusive-any-qos"),
    pytest.param(1, "", None, 20, True, id="empty-device-qos"),
    pytest.param(1, "best-effort", None, 20, True, id="same-qos"),
    pytest.param(1, "fixed-share", None, 20, False, id="other-qos"),
    pytest.param(1, "fixed-share", "best-effort", 20, True, id="pending-overrides-report"),
    pytest.param(1, "best-effort", "burst-share", 20, False, id="pending-mismatch"),
    pytest.param(1, "fixed-share", "", 20, True, id="pending-cleared"),
]


@pytest.mark.parametrize(("used", "reported", "pending", "cores", "fits"), QOS)
def test_qos_must_match_a_used_device(
    used: int, reported: str, pending: str | None, cores: int, fits: bool
) -> None:
    dev = sg(0, used=used, qos=reported)
    pend = {} if pending is None else {"GPU-0": pending}
    result = metax_sgpu.fit([dev], share(cores=cores), ctx(pending=pend))
    assert ("CardQosPolicyMismatch" in result.reason) is not fits
    if fits and cores != 100:
        assert result.ok
    if not fits:
        assert result.reason == "1/1 CardQosPolicyMismatch"


def test_online_pods_skip_qos_and_cores_and_are_charged_no_cores() -> None:
    dev = sg(0, used=1, usedcores=100, qos="fixed-share")
    online = ctx(app_class="online", tasks={"GPU-0": SgpuTasks(online=1)})
    result = metax_sgpu.fit([dev], share(cores=50), online)
    assert result.ok
    granted = result.devices[0]
    assert (granted.type, granted.usedmem, granted.usedcores) == (MODEL, 4096, 0)


REFUSALS = [
    pytest.param(vdev("Metax-GPU", 0), FitContext(), "CardTypeMismatch", id="type"),
    pytest.param(sg(0, health=False), FitContext(), "CardUnhealthy", id="unhealthy"),
    pytest.param(sg(0), ctx_of(use_uuids=["GPU-9"]), "CardUuidMismatch", id="uuid"),
    pytest.param(sg(0, used=16), FitContext(), "CardTimeSlicingExhausted", id="slots"),
    pytest.param(sg(0, used=1), ctx_of(mutex=True), "ExclusiveDeviceAllocateConflict", id="mutex"),
    pytest.param(sg(0, used=1, usedmem=62000), FitContext(), "CardInsufficientMemory", id="mem"),
    pytest.param(sg(0, used=1, usedcores=90), FitContext(), "CardInsufficientCore", id="cores"),
]


@pytest.mark.parametrize(("dev", "base", "word"), REFUSALS)
def test_refusals(dev: DeviceUsage, base: FitContext, word: str) -> None:
    result = metax_sgpu.fit([dev], share(), ctx(base=base, qos=""))
    assert (result.ok, result.reason) == (False, f"1/1 {word}")


def test_app_class_refusal_word() -> None:
    result = metax_sgpu.fit([sg(0, used=1)], share(), ctx(app_class="online"))
    assert result.reason == "1/1 CardAppClassMismatch"


def test_whole_and_exhausted_core_refusals() -> None:
    whole = metax_sgpu.fit([sg(0, used=1)], share(cores=100), ctx())
    assert whole.reason == "1/1 ExclusiveDeviceAllocateConflict"
    full = metax_sgpu.fit([sg(0, used=2, usedcores=100)], share(cores=0), ctx())
    assert full.reason == "1/1 CardComputeUnitsExhausted"


def test_too_few_candidates() -> None:
    result = metax_sgpu.fit([sg(0), sg(1, health=False)], share(2), ctx())
    assert result.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardUnhealthy"


def test_online_pods_prefer_fewest_online_tasks_and_avoid_offline_only_devices() -> None:
    devices = [sg(i, used=1) for i in range(4)]
    tasks = {
        "GPU-0": SgpuTasks(online=2),
        "GPU-1": SgpuTasks(offline=1),
        "GPU-2": SgpuTasks(online=1, offline=3),
        "GPU-3": SgpuTasks(online=1, offline=1),
    }
    online = ctx(app_class="online", tasks=tasks)
    result = metax_sgpu.fit(devices, share(2), online)
    assert uuids_of(result.devices) == ["GPU-3", "GPU-2"]
    result = metax_sgpu.fit(devices, share(3), online)
    assert uuids_of(result.devices) == ["GPU-3", "GPU-2", "GPU-0"]
    only_offline = {"GPU-0": SgpuTasks(offline=3), "GPU-1": SgpuTasks(offline=1)}
    result = metax_sgpu.fit(
        devices[:2],
        share(1),
        ctx(app_class="online", tasks=only_offline),
    )
    assert uuids_of(result.devices) == ["GPU-1"]


def test_offline_pods_keep_the_policy_order() -> None:
    devices = [sg(0, zone=1), sg(1, zone=2), sg(2, zone=2)]
    result = metax_sgpu.fit(devices, share(1, cores=100), ctx(app_class="offline"))
    assert uuids_of(result.devices) == ["GPU-2"]


ZONES = [
    pytest.param([1, 1, 2, 2, 2], 2, ["GPU-1", "GPU-0"], id="smallest-sufficient-zone"),
    pytest.param([1, 2, 2, 2], 3, ["GPU-3", "GPU-2", "GPU-1"], id="only-zone-big-enough"),
    pytest.param([0, 1, 2, 2], 3, ["GPU-1", "GPU-3", "GPU-2"], id="across-zones-small-first"),
    pytest.param([0, 0, 1, 3], 3, ["GPU-3", "GPU-2", "GPU-1"], id="unzoned-last"),
    pytest.param([1, 2, 2], 1, ["GPU-0"], id="one-device-smallest-zone"),
]


@pytest.mark.parametrize(("zones", "nums", "expected"), ZONES)
def test_whole_devices_prefer_one_metalink_zone(
    zones: list[int], nums: int, expected: list[str]
) -> None:
    devices = [sg(i, zone=z) for i, z in enumerate(zones)]
    result = metax_sgpu.fit(devices, share(nums, cores=100), ctx())
    assert uuids_of(result.devices) == expected


def test_link_score() -> None:
    assert link_score([1, 1, 1]) == 30
    assert link_score([1, 2, 0, 0]) == 0
    assert link_score([-1, -1]) == 10


def grants(*pairs: tuple[str, int]) -> list[list[ContainerDevice]]:
    return [[ContainerDevice(u, MODEL, 1, c) for u, c in pairs]]


def test_online_score() -> None:
    node = [sg(0, used=1), sg(1, used=1), sg(2)]
    tasks = {"GPU-0": SgpuTasks(offline=2), "GPU-1": SgpuTasks(online=1, offline=1)}
    vendor = VendorContext(sgpu_app_class="online", sgpu_tasks=tasks)
    assert metax_sgpu.score("binpack", node, grants(("GPU-0", 0)), vendor) == -2_000_000.0
    assert metax_sgpu.score("binpack", node, grants(("GPU-1", 0)), vendor) == -220_000.0
    assert metax_sgpu.score("spread", node, grants(("GPU-1", 0)), vendor) == 220_000.0
    assert metax_sgpu.score("binpack", node, grants(("GPU-2", 0)), vendor) == 0.0


def test_topology_aware_exclusive_score() -> None:
    node = [sg(0, zone=1), sg(1, zone=1), sg(2, zone=2), sg(3, zone=2), sg(4, used=1, zone=2)]
    vendor = VendorContext(sgpu_topology_aware=True)
    # Granted 0,1 (zone 1 pair): allocated 10, available 20, rest 10 → 100 − 0.
    assert metax_sgpu.score("binpack", node, grants(("GPU-0", 100), ("GPU-1", 100)), vendor) == (
        100 * 10000.0
    )
    # Granted 0,2 (no link), breaking both pairs: allocated 0, rest 0 → −20.
    assert metax_sgpu.score("binpack", node, grants(("GPU-0", 100), ("GPU-2", 100)), vendor) == (
        -20 * 10000.0
    )
    assert metax_sgpu.score("binpack", node, grants(("GPU-0", 50)), vendor) == 0.0
    plain = VendorContext()
    assert metax_sgpu.score("binpack", node, grants(("GPU-0", 100)), plain) == 0.0


@settings(max_examples=200)
@given(
    state=st.lists(
        st.tuples(
            st.integers(0, 3),
            st.integers(0, 65536),
            st.integers(0, 100),
            st.sampled_from(["", "best-effort", "fixed-share"]),
            st.sampled_from(["", "online", "offline"]),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=6,
    ),
    nums=st.integers(1, 3),
    mem=st.integers(1, 40000),
    cores=st.sampled_from([0, 10, 50, 100]),
    app_class=st.sampled_from(["", "online", "offline"]),
    qos=st.sampled_from(["best-effort", "fixed-share"]),
)
def test_sgpu_never_overcommits_or_mixes_classes_or_qos(
    state: list[tuple[int, int, int, str, str, int]],
    nums: int,
    mem: int,
    cores: int,
    app_class: str,
    qos: str,
) -> None:
    devices = []
    tasks: dict[str, SgpuTasks] = {}
    for i, (used, usedmem, usedcores, dev_qos, dev_class, zone) in enumerate(state):
        dev = sg(
            i,
            used=used,
            usedmem=usedmem * min(used, 1),
            usedcores=usedcores * min(used, 1),
            qos=dev_qos,
            zone=zone,
        )
        devices.append(dev)
        if used and dev_class:
            tasks[dev.uuid] = SgpuTasks(
                online=used if dev_class == "online" else 0,
                offline=used if dev_class == "offline" else 0,
            )
    context = ctx(qos=qos, app_class=app_class, tasks=tasks)
    request = vreq(METAX_SGPU, nums, mem=mem, cores=cores)
    result = metax_sgpu.fit(devices, request, context)
    assert result == metax_sgpu.fit(devices, request, context)
    if not result.ok:
        return
    by_uuid = {d.uuid: d for d in devices}
    assert len({g.uuid for g in result.devices}) == len(result.devices) == nums
    for g in result.devices:
        dev = by_uuid[g.uuid]
        assert dev.usedmem + g.usedmem <= dev.totalmem
        assert dev.used < dev.count
        assert app_class_fits(app_class, dev, tasks.get(dev.uuid, SgpuTasks()))
        if app_class == "online":
            assert g.usedcores == 0
        else:
            assert dev.usedcores + g.usedcores <= dev.totalcore
            if dev.used and cores != 100:
                assert dev.custom["QosPolicy"] in ("", qos)
