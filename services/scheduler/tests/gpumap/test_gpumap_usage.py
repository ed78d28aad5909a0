"""Usage beside allocation, pure parts: a monitor's text read into figures, joined into the map
document (null for missing, never 0; over-limit flagged, not clamped), and where the monitors
are (the flag's forms, the monitor Service's EndpointSlices)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.cache.nodes import read_node, slim_node
from hami_scheduler.gpumap.locate import (
    MonitorSource,
    TemplateLocator,
    endpoint_urls,
    parse_monitor_source,
)
from hami_scheduler.gpumap.monitors import parse_exposition
from hami_scheduler.gpumap.usage import Figures, NodeReading, apply_usage, read_figures

MIB = 1 << 20
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
CARD = "GPU-0123456789abcdef0123456789abcdef-0001"  # 45 characters: the monitor keeps 40


def series(name: str, pod: str, container: str, uuid: str, value: float, ns: str = "ml") -> str:
    return (
        f'{name}{{namespace="{ns}",pod="{pod}",container="{container}",vdevice_index="0",'
        f'device_uuid="{uuid[:40]}",zone="vGPU"}} {value}\n'
    )


def container_text(pod: str, container: str, uuid: str, used: int, limit: int, util: float) -> str:
    return (
        series("hami_vgpu_memory_used_bytes", pod, container, uuid, used)
        + series("hami_container_device_memory_bytes", pod, container, uuid, used)
        + series("hami_vgpu_memory_limit_bytes", pod, container, uuid, limit)
        + series("hami_container_device_utilization_ratio", pod, container, uuid, util)
    )


HEADER = (
    "# HELP hami_vgpu_memory_used_bytes Device memory used by the container.\n"
    "# TYPE hami_vgpu_memory_used_bytes gauge\n"
    "# HELP process_cpu_seconds_total CPU.\n# TYPE process_cpu_seconds_total counter\n"
    "process_cpu_seconds_total 12.5\n"
)


def map_node(name: str = "n", *, holders: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "name": name,
        "devices": [
            {
                "id": CARD,
                "memory": {"total": 16000, "allocated": 4000, "free": 12000},
                "holders": holders
                if holders is not None
                else [
                    {"namespace": "ml", "pod": "train", "memory": 3000, "usage": None},
                    {"namespace": "ml", "pod": "idle", "memory": 1000, "usage": None},
                ],
                "usage": None,
            },
            {"id": "GPU-other", "memory": {"total": 16000}, "holders": [], "usage": None},
        ],
    }


def test_parse_sums_a_pods_containers_per_card_and_ignores_other_families() -> None:
    text = (
        HEADER
        + container_text("train", "a", CARD, 1000 * MIB, 3000 * MIB, 20)
        + container_text("train", "b", CARD, 500 * MIB, 3000 * MIB, 15.5)
        + container_text("serve", "main", "GPU-other", 10 * MIB, 100 * MIB, 0)
    )
    figures = parse_exposition(text)
    assert figures.pods[("ml", "train", CARD[:40])] == Figures(1500 * MIB, 6000 * MIB, 35.5)
    assert figures.cards[CARD[:40]] == Figures(1500 * MIB, 6000 * MIB, 35.5)
    assert figures.pods[("ml", "serve", "GPU-other")].utilization == 0
    assert figures.host == {}


def test_parse_reads_host_series_and_legacy_names_once() -> None:
    host = (
        f'hami_host_gpu_memory_used_bytes{{node="n",device_index="0",device_uuid="{CARD}",'
        f'device_type="NVIDIA-T4",zone="vGPU"}} {2048 * MIB}\n'
        f'hami_host_gpu_utilization_ratio{{node="n",device_index="0",device_uuid="{CARD}",'
        f'device_type="NVIDIA-T4",zone="vGPU"}} 40\n'
    )
    legacy = (
        f'vGPU_device_memory_usage_in_bytes{{podnamespace="ml",podname="train",ctrname="a",'
        f'vdeviceid="0",deviceuuid="{CARD[:40]}",zone="vGPU"}} {700 * MIB}\n'
        f'Device_utilization_desc_of_container{{podnamespace="ml",podname="train",ctrname="a",'
        f'vdeviceid="0",deviceuuid="{CARD[:40]}",zone="vGPU"}} 5\n'
    )
    current = container_text("train", "a", CARD, 700 * MIB, 3000 * MIB, 5)
    both = parse_exposition(host + current + legacy)
    # --legacy-metrics exports both names: one container counts once.
    assert both.pods[("ml", "train", CARD[:40])] == Figures(700 * MIB, 3000 * MIB, 5)
    assert both.host[CARD[:40]] == Figures(used_bytes=2048 * MIB, utilization=40)
    only_legacy = parse_exposition(legacy)
    assert only_legacy.pods[("ml", "train", CARD[:40])] == Figures(700 * MIB, None, 5)


def test_parse_refuses_what_is_not_prometheus_text() -> None:
    with pytest.raises(ValueError, match="float"):
        parse_exposition('hami_vgpu_memory_used_bytes{namespace="ml" 12\n')
    assert parse_exposition("<html>not metrics</html>\n") == read_figures([])


def test_join_puts_usage_beside_allocation_and_null_where_nothing_was_measured() -> None:
    figures = read_figures(
        [
            ("hami_vgpu_memory_used_bytes", _labels("train", CARD), 1000 * MIB + 1),
            ("hami_vgpu_memory_limit_bytes", _labels("train", CARD), 3000 * MIB),
            ("hami_container_device_utilization_ratio", _labels("train", CARD), 27.25),
            # Allocated and idle: memory held, utilization 0 — shown, not hidden as no data.
            ("hami_vgpu_memory_used_bytes", _labels("idle", CARD), 200 * MIB),
            ("hami_vgpu_memory_limit_bytes", _labels("idle", CARD), 1000 * MIB),
            ("hami_container_device_utilization_ratio", _labels("idle", CARD), 0),
        ]
    )
    node = map_node()
    node["devices"][0]["holders"].append(
        {"namespace": "ml", "pod": "fresh", "memory": 500, "usage": None}
    )
    at = NOW - timedelta(seconds=4)
    apply_usage([node], {"n": NodeReading("http://m/metrics", at=at, figures=figures)}, now=NOW)
    assert node["monitor"] == {
        "url": "http://m/metrics",
        "at": "2026-01-01T11:59:56Z",
        "ageSeconds": 4.0,
        "error": None,
    }
    card, other = node["devices"]
    assert card["usage"] == {
        "memoryUsed": 1201,  # rounded up: any byte held shows
        "utilization": 27.2,
        "source": "containers",
        "at": "2026-01-01T11:59:56Z",
        "overLimit": False,
    }
    train, idle, fresh = card["holders"]
    assert train["usage"] == {
        "memoryUsed": 1001,
        "memoryLimit": 3000,
        "utilization": 27.2,
        "overLimit": False,
    }
    assert idle["usage"] == {
        "memoryUsed": 200,
        "memoryLimit": 1000,
        "utilization": 0,
        "overLimit": False,
    }
    assert fresh["usage"] is None  # never touched the GPU: no data, not 0
    assert other["usage"] is None


def test_over_the_limit_and_over_100_percent_are_flagged_not_clamped() -> None:
    figures = read_figures(
        [
            ("hami_vgpu_memory_used_bytes", _labels("train", CARD), 3500 * MIB),
            ("hami_vgpu_memory_limit_bytes", _labels("train", CARD), 3000 * MIB),
            ("hami_container_device_utilization_ratio", _labels("train", CARD), 40),
            # No limit series: the allocation (1000 MiB) is the limit.
            ("hami_vgpu_memory_used_bytes", _labels("idle", CARD), 900 * MIB),
            ("hami_container_device_utilization_ratio", _labels("idle", CARD), 130),
            ("hami_host_gpu_memory_used_bytes", {"device_uuid": CARD}, 17000 * MIB),
        ]
    )
    node = map_node()
    apply_usage([node], {"n": NodeReading("u", at=NOW, figures=figures)}, now=NOW)
    card = node["devices"][0]
    train, idle = card["holders"]
    assert train["usage"]["memoryUsed"] == 3500
    assert train["usage"]["overLimit"] is True
    assert idle["usage"] == {
        "memoryUsed": 900,
        "memoryLimit": 1000,
        "utilization": 130,
        "overLimit": True,
    }
    # The host's figure wins for the card (NVML sees every process), over the card's memory.
    assert card["usage"]["source"] == "host"
    assert card["usage"]["memoryUsed"] == 17000
    assert card["usage"]["utilization"] is None
    assert card["usage"]["overLimit"] is True


def test_an_unreachable_monitor_leaves_usage_null_with_the_reason() -> None:
    node, quiet = map_node("n"), map_node("q")
    why = "unreachable: ClientConnectorError: refused"
    apply_usage([node, quiet], {"n": NodeReading("http://x/metrics", error=why)}, now=NOW)
    assert node["monitor"] == {"url": "http://x/metrics", "at": None, "ageSeconds": None,
                               "error": why}  # fmt: skip
    assert all(d["usage"] is None for d in node["devices"])
    assert all(h["usage"] is None for h in node["devices"][0]["holders"])
    assert quiet["monitor"] is None  # not asked (usage off)


def test_a_raw_card_of_an_unhandled_vendor_gets_no_usage() -> None:
    node = map_node(holders=[])
    node["devices"][0]["raw"] = {"key": "hami.io/node-x-register", "note": "..."}
    figures = read_figures([("hami_host_gpu_memory_used_bytes", {"device_uuid": CARD}, MIB)])
    apply_usage([node], {"n": NodeReading("u", at=NOW, figures=figures)}, now=NOW)
    assert node["devices"][0]["usage"] is None


def _labels(pod: str, uuid: str, container: str = "main") -> dict[str, str]:
    return {"namespace": "ml", "pod": pod, "container": container, "device_uuid": uuid[:40]}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", MonitorSource()),
        ("  ", MonitorSource()),
        ("http://{node_ip}:9394/metrics", MonitorSource(template="http://{node_ip}:9394/metrics")),
        ("https://{node}.gpu.example/m", MonitorSource(template="https://{node}.gpu.example/m")),
        ("hami-system/hami-device-plugin-monitor",
         MonitorSource(service=("hami-system", "hami-device-plugin-monitor"))),
    ],
)  # fmt: skip
def test_monitor_source_forms(value: str, expected: MonitorSource) -> None:
    assert parse_monitor_source(value) == expected
    assert parse_monitor_source(value).enabled == bool(value.strip())


@pytest.mark.parametrize(
    "value",
    ["ftp://{node_ip}/m", "http://{host}:9394/", "http://{0}/", "hami-system", "A/b", "a/b/c"],
)
def test_monitor_source_refuses_what_it_cannot_use(value: str) -> None:
    with pytest.raises(ValueError, match="--gpumap-monitors"):
        parse_monitor_source(value)


async def test_template_locator_needs_the_address_it_names() -> None:
    addresses = {"n": "10.0.0.7", "six": "fd00::7"}
    locator = TemplateLocator("http://{node_ip}:9394/metrics", addresses.get)
    found = await locator.locate(["n", "six", "bare"])
    assert found["n"] == ("http://10.0.0.7:9394/metrics", None)
    assert found["six"] == ("http://[fd00::7]:9394/metrics", None)
    assert found["bare"][0] is None
    assert "InternalIP" in str(found["bare"][1])
    by_name = TemplateLocator("http://{node}:9394/metrics", addresses.get)
    assert (await by_name.locate(["bare"]))["bare"] == ("http://bare:9394/metrics", None)


def test_endpoint_urls_map_each_node_to_its_monitor_pod() -> None:
    slices = [
        {
            "ports": [{"name": "metrics", "port": 9397}, {"name": "monitor", "port": 9394}],
            "endpoints": [
                {"addresses": ["10.1.0.5"], "nodeName": "a", "conditions": {"ready": True}},
                {"addresses": ["10.1.0.6"], "nodeName": "b", "conditions": {"ready": False}},
                {"addresses": ["10.1.0.7"], "nodeName": "c"},  # ready unset counts as ready
                {"addresses": ["10.1.0.8"]},  # no node: cannot be placed
            ],
        },
        # One port only, whatever its name (the stack's slices, one per local monitor).
        {"ports": [{"port": 31001}], "endpoints": [{"addresses": ["fd00::9"], "nodeName": "d"}]},
        # Two ports, none named monitor: not a monitor slice.
        {"ports": [{"port": 1}, {"port": 2}], "endpoints": [{"addresses": ["x"], "nodeName": "e"}]},
    ]
    found = endpoint_urls(slices)
    assert found["a"] == ("http://10.1.0.5:9394/metrics", None)
    assert found["b"] == (None, "the monitor pod on this node is not ready")
    assert found["c"] == ("http://10.1.0.7:9394/metrics", None)
    assert found["d"] == ("http://[fd00::9]:31001/metrics", None)
    assert set(found) == {"a", "b", "c", "d"}


def test_the_nodes_internal_ip_survives_slimming_for_the_template() -> None:
    addresses = [
        {"type": "Hostname", "address": "n"},
        {"type": "InternalIP", "address": "10.0.0.7"},
        {"type": "InternalIP", "address": "fd00::7"},
    ]
    obj: dict[str, Any] = {
        "metadata": {"name": "n"},
        "status": {"addresses": addresses, "images": [{"names": ["big"]}]},
    }
    slim_node(obj, DEFAULT_VENDORS)
    assert obj["status"] == {"addresses": [{"type": "InternalIP", "address": "10.0.0.7"}]}
    assert read_node(obj, DEFAULT_VENDORS).address == "10.0.0.7"
    assert read_node({"metadata": {"name": "bare"}}, DEFAULT_VENDORS).address == ""
