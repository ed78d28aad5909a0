"""The tables, from the contract documents (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hami_kubectl.views.fit import render_fit
from hami_kubectl.views.gpumap import render_map
from hami_kubectl.views.pending import render_pending, request_text, verdict_text
from hami_kubectl.views.text import columns, duration, pages

from .plugin_helpers import contract

NOW = datetime(2026, 1, 10, 12, 0, 0, tzinfo=UTC)


def test_map_table() -> None:
    assert render_map(contract("map"), wide=False, now=NOW).splitlines() == [
        "  GPU                TYPE     MEMORY(MiB)   CORES     SHARES   HOLDERS",
        "gpu-a · Healthy · registered 2m ago · free 21504 MiB (largest on one card 15360 MiB)"
        " · cores free 150% (largest 100%)",
        "  GPU0               T4       9216/15360    50/100%   2/10     "
        "ml/train-1(6144 MiB), ml/infer-2(3072 MiB)",
        "  GPU1               T4       0/15360       0/100%    0/10     -",
        "npu-b · Unhealthy · registered never · free 15360 MiB (largest on one card 15360 MiB)"
        " · cores free 100% (largest 100%)",
        "  GPU0 (unhealthy)   Acme-9   0/15360       0/100%    0/4      -",
        "",
        "cluster: 2 nodes, 3 GPUs · memory 9216/46080 MiB allocated, free 36864 MiB (largest "
        "piece 15360 MiB) · cores 50/300% allocated, free 250% (largest 100%) · not fragmented",
        "page 1/1 · 2 nodes",
    ]


def test_map_wide_shows_mode_usage_ids_and_raw_vendor_values() -> None:
    text = render_map(contract("map"), wide=True, now=NOW)
    header, *_ = text.splitlines()
    assert header.split() == [
        "GPU", "TYPE", "VENDOR", "MODE", "NUMA", "MEMORY(MiB)", "CORES", "SHARES", "USED", "ID",
        "HOLDERS",
    ]  # fmt: skip
    assert "ml/train-1/main(6144 MiB, 30%, used 7000 MiB, OVER LIMIT)" in text
    assert "ml/infer-2/srv(3072 MiB, 20%)" in text
    assert "7200 MiB, 85%" in text
    assert "GPU-0a1b2c3d-0000-1111-2222-333344445555" in text
    assert "raw: acme.com/npu-register=npu-7,4,15360,100,Acme-9,0,false" in text


def test_map_fragmented_and_paged() -> None:
    document = contract("map")
    document["nodes"][0]["fragmented"] = True
    document["cluster"]["fragmented"] = True
    document["page"] = {"page": 1, "perPage": 1, "total": 2, "pages": 2}
    lines = render_map(document, wide=False, now=NOW).splitlines()
    assert lines[1].endswith(" · FRAGMENTED")
    assert lines[-2].endswith(" · FRAGMENTED")
    assert lines[-1] == "page 1/2 · 2 nodes · next: --page 2"
    assert render_map({"nodes": []}, wide=False, now=NOW).startswith("no nodes match\n")


def test_pending_table() -> None:
    assert render_pending(contract("pending"), wide=False, now=NOW).splitlines() == [
        "NAMESPACE   NAME    WAITING   REQUEST                        EXTENDER VERDICT"
        "                                              KUBERNETES",
        "ml          big-1   5m12s     1×20000 MiB 30% cores (A100)   0/8 nodes fit: 5 "
        "CardInsufficientMemory, 3 CardTypeMismatch   Unschedulable: 0/8 nodes are available: "
        "8 node(s) didn't fi…",
        "dev         gated   45s       2×50% mem                      not filtered by the "
        "extender yet                              SchedulingGated: Scheduling is blocked due "
        "to non-empty sch…",
        "page 1/1 · 2 pending pods",
    ]


def test_pending_pieces() -> None:
    item = contract("pending")["items"][0]
    assert request_text(item, wide=True) == "main: 1×20000 MiB 30% cores (A100)"
    assert verdict_text(None) == "not filtered by the extender yet"
    assert verdict_text(item["verdict"], wide=True) == (
        "0/8 nodes fit: 5 CardInsufficientMemory (gpu-a, gpu-c), 3 CardTypeMismatch (gpu-d)"
    )
    whole = {"request": {"containers": [{"count": 1, "vendor": "NVIDIA"}]}}
    assert request_text(whole) == "1×whole card"


def test_fit_tables() -> None:
    assert render_fit(contract("fit-fits"), wide=False).splitlines() == [
        "fits now on 2 nodes (best first):",
        "NODE    DEVICES",
        "gpu-a   GPU-9f8e7d6c… 4000 MiB 30%",
        "gpu-c   GPU-11112222… 4000 MiB 30%",
    ]
    wide = render_fit(contract("fit-fits"), wide=True)
    assert "GPU-9f8e7d6c-0000-1111-2222-333344445555 4000 MiB 30%" in wide
    assert "CardInsufficientMemory   1       gpu-d" in wide
    assert render_fit(contract("fit-nofit"), wide=False).splitlines() == [
        "does not fit anywhere now: CardInsufficientMemory binds (5 nodes)",
        "REASON                   NODES   EXAMPLES",
        "CardInsufficientMemory   5       gpu-a, gpu-c",
        "CardTypeMismatch         3       gpu-d",
    ]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (59, "59s"), (312, "5m12s"), (900, "15m"), (3 * 3600 + 240, "3h4m"),
     (10 * 3600 + 60, "10h"), (2 * 86400 + 5 * 3600, "2d5h"), (40 * 86400, "40d"), (-5, "0s")],
)  # fmt: skip
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_columns_and_pages() -> None:
    assert columns([["A", "BB", "C"], ["xxx", "y", "long last"]]) == [
        "A     BB   C",
        "xxx   y    long last",
    ]
    assert pages(None, "nodes") == ""
    assert pages({"page": 3, "pages": 3, "total": 120}, "nodes") == "page 3/3 · 120 nodes"


def test_map_shows_dra_cards_with_claims_apart() -> None:
    document = contract("map")
    card = {
        "id": "GPU-d-0", "index": 0, "vendor": "NVIDIA", "type": "NVIDIA-A100", "mode": "dra",
        "health": True, "schedulable": False, "numa": 0,
        "memory": {"total": 16384, "allocated": 10240, "free": 6144},
        "cores": {"total": 100, "allocated": 20, "free": 80},
        "shares": {"total": None, "used": 2},
        "holders": [
            {"namespace": "ns", "claim": "first", "pod": "pod-a", "container": "",
             "pods": [{"name": "pod-a", "uid": "a"}], "memory": 4096, "cores": 20},
            {"namespace": "ns", "claim": "second", "pod": "pod-b", "container": "",
             "pods": [{"name": "pod-b", "uid": "b"}, {"name": "pod-c", "uid": "c"}],
             "memory": 6144, "cores": 0},
        ],
        "usage": None,
    }  # fmt: skip
    figures = {"devices": 1, "memory": {"total": 16384, "free": 6144, "largestFree": 6144}}
    document["nodes"].insert(0, {"name": "d", "health": "Healthy", "vendors": [], "dra": figures,
                                 "free": {}, "devices": [card]})  # fmt: skip
    document["cluster"]["dra"] = figures
    lines = render_map(document, wide=False, now=NOW).splitlines()
    assert lines[1].startswith("d · Healthy · DRA only (placed by kube-scheduler) · ")
    assert lines[1].endswith(" · DRA 1 GPUs, free 6144 MiB (largest 6144 MiB)")
    row = lines[2].split()
    assert row[:5] == ["GPU0", "NVIDIA-A100", "10240/16384", "20/100%", "2"]
    assert "ns/first→pod-a(4096 MiB), ns/second→pod-b,pod-c(6144 MiB)" in lines[2]
    assert lines[-2].endswith(" · DRA 1 GPUs, free 6144 MiB (largest 6144 MiB)")
    wide = render_map(document, wide=True, now=NOW)
    assert " dra " in wide
    document["dra"] = {"watched": False, "reason": "forbidden (403)"}
    assert "DRA GPUs not shown: forbidden (403)" in render_map(document, wide=False, now=NOW)
