"""Usage bookkeeping: building nodes from the registry, applying and removing pods."""

from __future__ import annotations

from hami_protocol.node.registry import DeviceInfo, DevicePairScore
from hami_protocol.pod.devices import DeviceUsageSummary, PodDevices, decode_pod_devices_canonical
from hami_scheduler.core import (
    UsageTotals,
    apply_usage,
    build_node_usage,
    pod_usage,
    remove_usage,
    unknown_devices,
)


def info(uuid: str, *, index: int = 0, model: str = "NVIDIA-Tesla T4") -> DeviceInfo:
    return DeviceInfo(
        id=uuid, index=index, count=10, devmem=8000, devcore=100, type=model, numa=0, health=True
    )


def hold(uuid: str, mem: int, cores: int, slots: int = 1) -> DeviceUsageSummary:
    return DeviceUsageSummary(uuid, "NVIDIA", mem, cores, slots)


def test_build_groups_devices_by_vendor_and_applies_usage() -> None:
    n = build_node_usage(
        "n",
        {"NVIDIA": [info("g0"), info("g1", index=1)], "MLU": [info("m0", model="MLU-370")]},
        cordon=["g1"],
        pair_scores=[DevicePairScore("g0", (("g1", 200),))],
        usages=[hold("g0", 1000, 10), hold("g0", 500, 5), hold("gone", 1, 1)],
    )
    assert n.name == "n"
    assert n.layout.vendors == ("NVIDIA", "MLU")
    assert [d.uuid for d in n.vendor_devices("NVIDIA")] == ["g0", "g1"]
    assert n.vendor_devices("MLU")[0].vendor == "MLU"
    assert n.vendor_devices("AMD") == ()
    g0 = n.device("g0")
    assert g0 is not None
    assert (g0.used, g0.usedmem, g0.usedcores) == (2, 1500, 15)
    assert n.device("gone") is None
    assert n.layout.cordon == frozenset({"g1"})
    assert n.layout.pair_score("g0", "g1") == 200
    assert n.layout.pair_score("g1", "g0") == 0
    assert n.totals == UsageTotals(2, 30, 1500, 24000, 15, 300)


def test_apply_then_remove_is_the_identity_and_shares_the_layout() -> None:
    n = build_node_usage("n", {"NVIDIA": [info("g0"), info("g1")]})
    usage = [hold("g0", 3000, 30), hold("g1", 1000, 0, 2)]
    placed = apply_usage(n, usage)
    assert placed.layout is n.layout
    assert placed.devices[0].usedmem == 3000
    assert placed.totals.used == 3
    assert remove_usage(placed, usage) == n
    assert remove_usage(placed, usage).totals == n.totals


def test_untouched_devices_are_shared_between_versions() -> None:
    n = build_node_usage("n", {"NVIDIA": [info("g0"), info("g1")]})
    placed = apply_usage(n, [hold("g0", 1, 1)])
    assert placed.devices[1] is n.devices[1]
    assert apply_usage(n, []) is n
    assert apply_usage(n, [hold("gone", 1, 1)]) is n


def test_removal_never_goes_below_zero() -> None:
    n = build_node_usage("n", {"NVIDIA": [info("g0")]})
    emptied = remove_usage(n, [hold("g0", 100, 100, 3)])
    g0 = emptied.devices[0]
    assert (g0.used, g0.usedmem, g0.usedcores) == (0, 0, 0)


def test_unknown_devices_are_reported() -> None:
    n = build_node_usage("n", {"NVIDIA": [info("g0")]})
    assert unknown_devices(n, [hold("g0", 1, 1), hold("x", 1, 1)]) == ("x",)


def test_pod_usage_collapses_init_and_app_per_vendor() -> None:
    nvidia = decode_pod_devices_canonical(
        "g0,NVIDIA,5000,10:;g0,NVIDIA,3000,20:;g0,NVIDIA,1000,5:;"
    )
    mlu = decode_pod_devices_canonical(";;m0,MLU,256,10:;")
    usage = pod_usage(PodDevices.from_mapping({"NVIDIA": nvidia, "MLU": mlu}), init_count=1)
    by_uuid = {u.uuid: u for u in usage}
    assert by_uuid["g0"] == DeviceUsageSummary("g0", "NVIDIA", 5000, 25, 2)
    assert by_uuid["m0"] == DeviceUsageSummary("m0", "MLU", 256, 10, 1)
    finished = pod_usage(
        PodDevices.from_mapping({"NVIDIA": nvidia}), init_count=1, init_finished=True
    )
    assert finished == (DeviceUsageSummary("g0", "NVIDIA", 4000, 25, 2),)


def test_totals_score_formula() -> None:
    assert UsageTotals(5, 10, 4000, 8000, 50, 100).score == 15.0
    assert UsageTotals(5, 10, 4000, 0, 50, 100).score == 0.0


def test_open_devices_leave_out_what_cannot_take_a_request() -> None:
    devices = [
        DeviceInfo("full", 0, 1, 8000, 100, "NVIDIA-T4", 0, True),
        DeviceInfo("sick", 1, 10, 8000, 100, "NVIDIA-T4", 0, False),
        DeviceInfo("mig", 2, 10, 8000, 100, "NVIDIA-A100", 0, True, mode="mig"),
        DeviceInfo("cordoned", 3, 10, 8000, 100, "NVIDIA-T4", 0, True),
        DeviceInfo("small", 4, 10, 2000, 100, "NVIDIA-T4", 0, True),
        DeviceInfo("big", 5, 10, 16000, 200, "NVIDIA-T4", 0, True),
    ]
    n = build_node_usage(
        "n",
        {"NVIDIA": devices},
        cordon=["cordoned"],
        usages=[hold("full", 0, 0), hold("big", 4000, 150)],
    )
    view = n.open("NVIDIA")
    assert [row[-1].uuid for row in view.rows] == ["big", "small"]
    assert (view.max_free_mem, view.max_free_cores) == (12000, 100)
    # big grants up to 75 % (12000 of 16000), small 100 %.
    assert view.max_percentage == 100
    assert n.open("NVIDIA") is view
    assert n.open("AMD").rows == ()
    assert apply_usage(n, [hold("small", 2000, 0)]).open("NVIDIA").max_percentage == 75
