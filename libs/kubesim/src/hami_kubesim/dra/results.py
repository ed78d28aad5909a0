"""What an allocation writes into ``status.allocation`` (contract §3.5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hami_kubesim.dra.claims import ClaimSpec, DeviceRequest
from hami_kubesim.dra.model import Device
from hami_kubesim.dra.quantities import format_quantity

__all__ = ["Pick", "allocation_result", "node_local_selector"]


@dataclass(frozen=True, slots=True)
class Pick:
    """One device chosen for one request of one claim during the search."""

    request: DeviceRequest
    device: Device
    consumed: Mapping[str, int] | None  # recorded for shared devices only
    share_id: str = ""


def node_local_selector(node: str) -> dict[str, Any]:
    """The selector of an allocation that uses node-local devices: this node, by name."""
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def allocation_result(
    claim: ClaimSpec,
    picks: Sequence[Pick],
    classes: Mapping[str, Mapping[str, Any]],
    node: str,
) -> dict[str, Any]:
    """``status.allocation`` for ``claim`` from its picks, in allocation order."""
    results = [_result(pick) for pick in picks]
    allocation: dict[str, Any] = {"devices": {"results": results}}
    config = _class_config(picks, classes) + _claim_config(claim, picks)
    if config:
        allocation["devices"]["config"] = config
    selector = _node_selector(picks, node)
    if selector is not None:
        allocation["nodeSelector"] = selector
    return allocation


def _result(pick: Pick) -> dict[str, Any]:
    device = pick.device
    result: dict[str, Any] = {
        "request": pick.request.name,
        "driver": device.id.driver,
        "pool": device.id.pool,
        "device": device.id.device,
    }
    if pick.request.admin_access:
        result["adminAccess"] = True
    if pick.request.tolerations:
        result["tolerations"] = [dict(t) for t in pick.request.tolerations]
    if pick.consumed is not None:
        result["shareID"] = pick.share_id
        result["consumedCapacity"] = {
            name: format_quantity(amount, binary=device.capacity[name].binary)
            for name, amount in pick.consumed.items()
        }
    return result


def _class_config(
    picks: Sequence[Pick], classes: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    # Each class once, in the order requests first use it, with the requests that use it.
    users: dict[str, list[str]] = {}
    for pick in picks:
        names = users.setdefault(pick.request.class_name, [])
        if pick.request.name not in names:
            names.append(pick.request.name)
    config: list[dict[str, Any]] = []
    for class_name, names in users.items():
        spec = (classes.get(class_name) or {}).get("spec") or {}
        for entry in spec.get("config") or ():
            if isinstance(entry, Mapping) and entry.get("opaque"):
                config.append(
                    {"source": "FromClass", "requests": list(names), "opaque": entry["opaque"]}
                )
    return config


def _claim_config(claim: ClaimSpec, picks: Sequence[Pick]) -> list[dict[str, Any]]:
    allocated = {p.request.name for p in picks} | {p.request.name.split("/")[0] for p in picks}
    config: list[dict[str, Any]] = []
    for entry in claim.config:
        requests = [str(r) for r in entry.get("requests") or ()]
        if entry.get("opaque") and (not requests or allocated.intersection(requests)):
            config.append({"source": "FromClaim", "requests": requests, "opaque": entry["opaque"]})
    return config


def _node_selector(picks: Sequence[Pick], node: str) -> dict[str, Any] | None:
    if any(p.device.node_local for p in picks):
        return node_local_selector(node)
    # Simplification: upstream intersects several slices' selectors; the first one stands here.
    return next(
        (dict(p.device.node_selector) for p in picks if p.device.node_selector is not None), None
    )
