"""Hand-built GPU map documents (the JSON API v1 of docs/gpumap.md) for the page's tests.

Shapes follow the contract field for field; values are chosen to exercise the page: a holder
whose names are hostile HTML, a card without usage figures, an over-limit holder, a vendor the
decoder does not know, a fragmented node, a pending pod never filtered.
"""

from __future__ import annotations

from typing import Any, Final

API_VERSION: Final = "gpumap.hami.io/v1"
GENERATED_AT: Final = "2026-11-29T10:00:00Z"
HOSTILE: Final = '<script>alert("x")</script>\'&"</td>'
"""A pod name no API server would accept, as a decoder bug or a forged annotation might carry."""


def holder(
    pod: str,
    memory: int,
    cores: int,
    *,
    namespace: str = "team-a",
    container: str = "main",
    used: int | None = None,
    utilization: int | None = None,
    over: bool = False,
    priority: int = 0,
) -> dict[str, Any]:
    usage = (
        None
        if used is None and utilization is None
        else {"memoryUsed": used, "utilization": utilization, "overLimit": over}
    )
    return {
        "namespace": namespace,
        "pod": pod,
        "container": container,
        "uid": f"uid-{pod}",
        "memory": memory,
        "cores": cores,
        "priority": priority,
        "usage": usage,
    }


def card(
    index: int,
    holders: list[dict[str, Any]],
    *,
    total: int = 24576,
    vendor: str = "NVIDIA",
    model: str = "NVIDIA A10",
    mode: str = "hami-core",
    health: bool = True,
    shares: int = 10,
    usage: dict[str, Any] | None = None,
    raw: dict[str, Any] | None = None,
) -> dict[str, Any]:
    memory = sum(h["memory"] for h in holders)
    cores = sum(h["cores"] for h in holders)
    device: dict[str, Any] = {
        "id": f"GPU-{index:04d}-uuid",
        "index": index,
        "vendor": vendor,
        "type": model,
        "mode": mode,
        "health": health,
        "numa": index % 2,
        "memory": {"total": total, "allocated": memory, "free": total - memory},
        "cores": {"total": 100, "allocated": cores, "free": 100 - cores},
        "shares": {"total": shares, "used": len(holders)},
        "holders": holders,
        "usage": usage,
    }
    if raw is not None:
        device["raw"] = raw
    return device


def node(name: str, devices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    free = [d["memory"]["free"] for d in devices] or [0]
    free_cores = [d["cores"]["free"] for d in devices] or [0]
    return {
        "name": name,
        "registeredAt": "2026-11-29T09:59:18Z",
        "handshake": "Reported 2026-11-29 09:59:18",
        "health": "Healthy",
        "policy": {"node": "binpack", "gpu": "spread"},
        "free": {
            "memory": sum(free),
            "largestMemory": max(free),
            "cores": sum(free_cores),
            "largestCores": max(free_cores),
        },
        "fragmented": False,
        "devices": devices,
        **extra,
    }


def map_doc(nodes: list[dict[str, Any]], *, page: int = 1, pages: int = 1) -> dict[str, Any]:
    devices = [d for n in nodes for d in n["devices"]]
    total = sum(d["memory"]["total"] for d in devices)
    allocated = sum(d["memory"]["allocated"] for d in devices)
    return {
        "apiVersion": API_VERSION,
        "kind": "GpuMap",
        "generatedAt": GENERATED_AT,
        "leader": "hami-scheduler-0",
        "cluster": {
            "nodes": len(nodes),
            "devices": len(devices),
            "memory": {
                "total": total,
                "allocated": allocated,
                "free": total - allocated,
                "largestFree": max((d["memory"]["free"] for d in devices), default=0),
            },
            "cores": {"total": 100 * len(devices), "allocated": 0, "free": 0, "largestFree": 100},
            "fragmented": True,
        },
        "page": {"page": page, "perPage": 50, "total": len(nodes) * pages, "pages": pages},
        "nodes": nodes,
    }


def sample_map() -> dict[str, Any]:
    """Two nodes: a shared A10 node with hostile, usage-less and over-limit holders, and a node
    with an unhealthy card and a vendor the decoder does not know."""
    node_a = node(
        "node-a",
        [
            card(
                0,
                [
                    holder("train-0", 6144, 30, used=5000, utilization=80),
                    holder(HOSTILE, 4096, 20, namespace="team-b"),
                    holder("hog", 2048, 10, used=3000, utilization=120, over=True),
                ],
                usage={"memoryUsed": 13000, "utilization": 95, "source": "vgpu-monitor"},
            ),
            card(1, [], usage=None),
        ],
    )
    node_b = node(
        "node-b",
        [
            card(0, [holder("infer", 8192, 50, namespace="team-c")], health=False),
            card(
                1,
                [],
                vendor="Acme-NPU",
                model="acme-x1",
                mode="acme-share",
                raw={"id": "acme-0", "count": 4, "devmem": 32768},
            ),
        ],
        health="Unhealthy",
        fragmented=True,
    )
    return map_doc([node_a, node_b])


def pending_item(
    name: str,
    waiting: int,
    *,
    verdict: dict[str, Any] | None,
    kubernetes: dict[str, Any] | None = None,
    namespace: str = "team-a",
    nominated: str | None = None,
) -> dict[str, Any]:
    return {
        "namespace": namespace,
        "name": name,
        "uid": f"uid-{name}",
        "since": "2026-11-29T09:00:00Z",
        "waitingSeconds": waiting,
        "request": {
            "containers": [
                {
                    "name": "main",
                    "vendor": "NVIDIA",
                    "count": 2,
                    "memory": 20000,
                    "memoryPercentage": None,
                    "cores": 50,
                    "type": ["A100"],
                    "uuid": [],
                }
            ]
        },
        "policy": {"node": "binpack", "gpu": "spread"},
        "verdict": verdict,
        "kubernetes": kubernetes,
        "nominatedNode": nominated,
    }


def sample_pending() -> dict[str, Any]:
    memory_short = {
        "at": "2026-11-29T09:59:50Z",
        "nodes": 12,
        "fitting": 0,
        "reasons": [
            {"reason": "CardInsufficientMemory", "nodes": 9, "examples": ["node-a", "node-b"]},
            {"reason": "CardTypeMismatch", "nodes": 3, "examples": ["node-c", "node-d", "node-e"]},
        ],
    }
    items = [
        pending_item("short-wait", 30, verdict=None),
        pending_item(
            "big-job",
            4000,
            verdict=memory_short,
            kubernetes={"reason": "Unschedulable", "message": "0/12 nodes are available"},
            nominated="node-a",
        ),
        pending_item(HOSTILE, 600, verdict=memory_short, namespace="team-b"),
    ]
    return {
        "apiVersion": API_VERSION,
        "kind": "PendingGpuPods",
        "generatedAt": GENERATED_AT,
        "page": {"page": 1, "perPage": 50, "total": len(items), "pages": 1},
        "items": items,
    }


def _probe(**answer: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "FitProbe", "generatedAt": GENERATED_AT, **answer}


def fit_fits() -> dict[str, Any]:
    return _probe(
        fits=True,
        placements=[
            {"node": "node-a", "devices": [{"id": "GPU-0001-uuid", "memory": 4000, "cores": 30}]},
            {"node": "node-c", "devices": [{"id": "GPU-0007-uuid", "memory": 4000, "cores": 30}]},
        ],
        binding=None,
        reasons=[],
    )


def fit_nowhere() -> dict[str, Any]:
    return _probe(
        fits=False,
        placements=[],
        binding={"reason": "CardInsufficientMemory", "nodes": 9},
        reasons=[
            {"reason": "CardInsufficientMemory", "nodes": 9, "examples": ["node-a", "node-b"]},
            {"reason": "NodeInsufficientDevice", "nodes": 3, "examples": ["node-c"]},
        ],
    )


def large_map(nodes: int, cards: int = 8, holders: int = 3) -> dict[str, Any]:
    """A page of ``nodes`` nodes × ``cards`` cards, ``holders`` holders each (for timing)."""
    return map_doc(
        [
            node(
                f"node-{n:05d}",
                [
                    card(
                        c,
                        [
                            holder(f"pod-{n}-{c}-{h}", 2048, 10, used=1000, utilization=40)
                            for h in range(holders)
                        ],
                    )
                    for c in range(cards)
                ],
            )
            for n in range(nodes)
        ]
    )
