"""Properties of the DRA allocator over generated inventories and claims.

Pods arrive one after another, each with one or two claims; whatever the allocator grants is
added to what is held.  Whatever happens: no device's capacity is over-committed, no
non-shared device is given twice (nor shared while held whole), and every granted device
satisfies the class's and the request's selectors (checked in Python, not through CEL).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_kube.objects import NodeView
from hami_kubesim.dra import Allocated, allocate, allocated_state
from hami_kubesim.dra.quantities import quantity_value
from hami_kubesim.dra_objects import DRIVER, device_class, exact_request, gpu_device, resource_slice
from hami_kubesim.dra_objects import resource_claim as claim_of

NODE = NodeView({"metadata": {"name": "node-a"}})
MODELS = ("A100", "H100")
GI = 1 << 30

# Selector families with a Python twin (device dict -> bool).
SELECTORS: dict[str, Callable[[dict[str, Any]], bool]] = {
    f'device.attributes["{DRIVER}"].model == "A100"': lambda d: (
        d["attributes"]["model"]["string"] == "A100"
    ),
    f'device.attributes["{DRIVER}"].index >= 1': lambda d: d["attributes"]["index"]["int"] >= 1,
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("12Gi")) >= 0': lambda d: (
        quantity_value(d["capacity"]["memory"]["value"], where="test") >= 12 * GI
    ),
}


@st.composite
def inventories(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 4))
    return [
        gpu_device(
            i,
            memory=f"{draw(st.sampled_from([4, 8, 16, 24]))}Gi",
            shared=draw(st.booleans()),
            model=draw(st.sampled_from(MODELS)),
        )
        for i in range(count)
    ]


@st.composite
def claims(draw: st.DrawFn, name: str) -> dict[str, Any]:
    wanted = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "memory": st.integers(1, 20 * 1024).map(lambda mi: f"{mi}Mi"),
                "cores": st.integers(0, 100).map(str),
            },
        )
    )
    selectors = draw(st.lists(st.sampled_from(sorted(SELECTORS)), max_size=2, unique=True))
    count = draw(st.integers(1, 2))
    return claim_of(
        name, exact_request("gpu", count=count, selectors=selectors, capacity=wanted or None)
    )


@st.composite
def pods(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    n = draw(st.integers(1, 6))
    return [[draw(claims(f"p{i}-c{j}")) for j in range(draw(st.integers(1, 2)))] for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(devices=inventories(), arrivals=pods())
def test_never_over_commits_and_always_satisfies_selectors(
    devices: list[dict[str, Any]], arrivals: list[list[dict[str, Any]]]
) -> None:
    slices = [resource_slice("node-a", devices)]
    by_name = {d["name"]: d for d in devices}
    classes = {DRIVER: device_class()}
    granted: list[dict[str, Any]] = []
    ids = (f"s{n}" for n in itertools.count())
    for pod in arrivals:
        outcome = allocate(
            pod,
            node=NODE,
            slices=slices,
            classes=classes,
            allocated=allocated_state(granted),
            new_share_id=lambda: next(ids),
        )
        if not isinstance(outcome, Allocated):
            continue
        for claim, result in zip(pod, outcome.claims, strict=True):
            _check_selectors(claim, result.allocation, by_name)
            granted.append(dict(result.allocation))
    _check_usage(granted, by_name)


def _check_selectors(
    claim: dict[str, Any], allocation: Any, devices: dict[str, dict[str, Any]]
) -> None:
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    wanted = [s["cel"]["expression"] for s in exactly.get("selectors", ())]
    results = allocation["devices"]["results"]
    assert len(results) == exactly.get("count", 1)
    assert len({r["device"] for r in results}) == len(results)
    for result in results:
        device = devices[result["device"]]
        assert result["driver"] == DRIVER
        assert all(SELECTORS[expression](device) for expression in wanted)


def _check_usage(granted: list[dict[str, Any]], devices: dict[str, dict[str, Any]]) -> None:
    whole: list[str] = []
    used: dict[str, dict[str, int]] = {}
    shares: set[str] = set()
    for allocation in granted:
        for result in allocation["devices"]["results"]:
            name = result["device"]
            if "shareID" not in result:
                whole.append(name)
                continue
            assert result["shareID"] not in shares
            shares.add(result["shareID"])
            assert devices[name].get("allowMultipleAllocations") is True
            for key, amount in result["consumedCapacity"].items():
                used.setdefault(name, {})[key] = used.get(name, {}).get(key, 0) + quantity_value(
                    amount, where="test"
                )
    assert len(whole) == len(set(whole)), "a non-shared device was given twice"
    assert not set(whole) & set(used), "a device was given whole and shared"
    for name, consumed in used.items():
        for key, amount in consumed.items():
            capacity = quantity_value(devices[name]["capacity"][key]["value"], where="test")
            assert amount <= capacity, f"{name} {key} over-committed: {amount} > {capacity}"
