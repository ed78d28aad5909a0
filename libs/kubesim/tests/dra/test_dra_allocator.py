"""The DRA allocator against the contract's rules (§2.2 charging, §3.2 pools, §3.3 search)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from hami_kube.objects import NodeView
from hami_kubesim.dra import (
    CANNOT_ALLOCATE,
    Allocated,
    AllocatedState,
    AllocatorError,
    Unfit,
    allocate,
    allocated_state,
)
from hami_kubesim.dra.model import DeviceId
from hami_kubesim.dra_objects import DRIVER, device_class, exact_request, gpu_device, resource_slice
from hami_kubesim.dra_objects import resource_claim as claim_of

NODE = NodeView({"metadata": {"name": "node-a", "labels": {"zone": "z1"}}})
CLASSES = {DRIVER: device_class()}
GPU0 = DeviceId(DRIVER, "node-a", "gpu-0")


def resource_claim(
    name: str,
    *,
    memory: str | None = None,
    cores: str | None = None,
    count: int | None = None,
    selectors: tuple[str, ...] = (),
    device_class_name: str = DRIVER,
) -> dict[str, Any]:
    """A claim with one request ``gpu`` for ``count`` GPUs, each with the given capacity."""
    wanted = {k: v for k, v in (("memory", memory), ("cores", cores)) if v is not None}
    request = exact_request(
        "gpu",
        device_class_name=device_class_name,
        count=count,
        selectors=selectors,
        capacity=wanted or None,
    )
    return claim_of(name, request)


def _ids() -> Iterator[str]:
    for n in itertools.count():
        yield f"share-{n}"


def run(
    claims: list[dict[str, Any]],
    slices: list[dict[str, Any]],
    *,
    allocated: AllocatedState | None = None,
    classes: Mapping[str, Mapping[str, Any]] = CLASSES,
) -> Allocated | Unfit:
    ids = _ids()
    return allocate(
        claims,
        node=NODE,
        slices=slices,
        classes=classes,
        allocated=allocated or AllocatedState(),
        new_share_id=lambda: next(ids),
    )


def allocation(outcome: Allocated | Unfit, index: int = 0) -> Mapping[str, Any]:
    assert isinstance(outcome, Allocated), outcome
    return outcome.claims[index].allocation


def held_by(outcome: Allocated | Unfit) -> AllocatedState:
    assert isinstance(outcome, Allocated), outcome
    return allocated_state(c.allocation for c in outcome.claims)


def results(outcome: Allocated | Unfit, index: int = 0) -> list[dict[str, Any]]:
    return list(allocation(outcome, index)["devices"]["results"])


def devices_of(outcome: Allocated | Unfit, index: int = 0) -> list[str]:
    return [r["device"] for r in results(outcome, index)]


def one_gpu(**kwargs: Any) -> list[dict[str, Any]]:
    return [resource_slice("node-a", [gpu_device(0, **kwargs)])]


# -- consumable capacity ----------------------------------------------------------------------


def test_two_4gi_claims_share_one_16gi_gpu_with_distinct_share_ids() -> None:
    outcome = run([resource_claim("a", memory="4Gi"), resource_claim("b", memory="4Gi")], one_gpu())
    first, second = results(outcome, 0)[0], results(outcome, 1)[0]
    assert first["device"] == second["device"] == "gpu-0"
    assert first["shareID"] != second["shareID"]
    assert first["consumedCapacity"] == {"memory": "4Gi", "cores": "0"}
    assert second["consumedCapacity"] == {"memory": "4Gi", "cores": "0"}
    assert (first["request"], first["driver"], first["pool"]) == ("gpu", DRIVER, "node-a")


def test_a_third_claim_is_refused_once_memory_is_spent() -> None:
    slices = one_gpu()
    both = run([resource_claim("a", memory="4Gi"), resource_claim("b", memory="4Gi")], slices)
    held = held_by(both)
    assert held.consumed[GPU0] == {"memory": 8 << 30, "cores": 0}
    assert run([resource_claim("c", memory="10Gi")], slices, allocated=held) == Unfit(
        CANNOT_ALLOCATE
    )
    assert devices_of(run([resource_claim("c", memory="8Gi")], slices, allocated=held)) == ["gpu-0"]


def test_a_claim_asking_more_than_any_device_has_is_unfit() -> None:
    outcome = run([resource_claim("big", memory="20Gi")], one_gpu())
    assert outcome == Unfit("cannot allocate all claims")


def test_no_capacity_request_takes_the_policy_defaults() -> None:
    # memory defaults to the whole card, cores to 0 (the shared decision).
    outcome = run([resource_claim("whole")], one_gpu())
    assert results(outcome)[0]["consumedCapacity"] == {"memory": "16Gi", "cores": "0"}


def test_a_capacity_without_default_is_consumed_whole() -> None:
    # §2.2's trap: no requestPolicy.default means the full value is charged.
    device = gpu_device(0)
    del device["capacity"]["cores"]["requestPolicy"]
    slices = [resource_slice("node-a", [device])]
    first = run([resource_claim("a", memory="1Gi")], slices)
    assert results(first)[0]["consumedCapacity"]["cores"] == "100"
    held = held_by(first)
    assert run([resource_claim("b", memory="1Gi")], slices, allocated=held) == Unfit()


@pytest.mark.parametrize(
    ("requested", "consumed"),
    [
        ("1000Ki", "1Mi"),  # up to the step grid
        ("1536Ki", "2Mi"),
        ("1", "1Mi"),  # below min -> min
        ("4Gi", "4Gi"),
    ],
)
def test_valid_range_rounds_up(requested: str, consumed: str) -> None:
    outcome = run([resource_claim("a", memory=requested)], one_gpu())
    assert results(outcome)[0]["consumedCapacity"]["memory"] == consumed


def test_valid_values_take_the_smallest_not_below_and_refuse_above_all() -> None:
    device = gpu_device(0)
    device["capacity"]["memory"]["requestPolicy"] = {
        "default": "16Gi",
        "validValues": ["4Gi", "8Gi", "16Gi"],
    }
    slices = [resource_slice("node-a", [device])]
    assert results(run([resource_claim("a", memory="5Gi")], slices))[0]["consumedCapacity"] == {
        "memory": "8Gi",
        "cores": "0",
    }
    assert run([resource_claim("a", memory="17Gi")], slices) == Unfit()


def test_a_range_max_below_the_request_makes_the_device_unusable() -> None:
    device = gpu_device(0)
    device["capacity"]["memory"]["requestPolicy"]["validRange"]["max"] = "8Gi"
    assert run([resource_claim("a", memory="9Gi")], [resource_slice("node-a", [device])]) == Unfit()


def test_capacity_keys_are_compared_verbatim() -> None:
    claim = resource_claim("a")
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {
        "requests": {f"{DRIVER}/memory": "1Gi"}
    }
    assert run([claim], one_gpu()) == Unfit()


def test_an_exclusive_device_filters_by_capacity_and_is_given_once() -> None:
    slices = one_gpu(shared=False)
    assert run([resource_claim("a", memory="17Gi")], slices) == Unfit()
    outcome = run([resource_claim("a", memory="4Gi")], slices)
    result = results(outcome)[0]
    assert not {"shareID", "consumedCapacity"} & result.keys()
    held = held_by(outcome)
    assert run([resource_claim("b", memory="1Gi")], slices, allocated=held) == Unfit()
    assert run([resource_claim("a"), resource_claim("b")], slices) == Unfit()


def test_a_whole_allocation_blocks_sharing_and_shares_block_exclusive_use() -> None:
    whole = AllocatedState(exclusive=frozenset({GPU0}))
    assert run([resource_claim("a", memory="1Gi")], one_gpu(), allocated=whole) == Unfit()
    shared = AllocatedState(consumed={GPU0: {"memory": 1 << 30}})
    assert run([resource_claim("a")], one_gpu(shared=False), allocated=shared) == Unfit()


def test_one_request_never_takes_the_same_shared_device_twice() -> None:
    assert run([resource_claim("a", memory="1Gi", count=2)], one_gpu()) == Unfit()
    two = [resource_slice("node-a", [gpu_device(0), gpu_device(1)])]
    assert devices_of(run([resource_claim("a", memory="1Gi", count=2)], two)) == [
        "gpu-0",
        "gpu-1",
    ]


# -- pools ------------------------------------------------------------------------------------


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    old = resource_slice("node-a", [gpu_device(0, memory="8Gi")], generation=1, name="s-old")
    new = resource_slice("node-a", [gpu_device(5, memory="32Gi")], generation=2, name="s-new")
    assert devices_of(run([resource_claim("a", memory="20Gi")], [old, new])) == ["gpu-5"]
    assert devices_of(run([resource_claim("a", memory="1Gi")], [new, old])) == ["gpu-5"]


def test_an_incomplete_pool_is_skipped_and_all_requests_fail_on_it() -> None:
    part = resource_slice("node-a", [gpu_device(0)], slice_count=2, name="s-1")
    assert run([resource_claim("a", memory="1Gi")], [part]) == Unfit()
    claim = resource_claim("all")
    claim["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": DRIVER,
        "allocationMode": "All",
    }
    with pytest.raises(AllocatorError, match="is currently being updated"):
        run([claim], [part])
    rest = resource_slice("node-a", [gpu_device(1)], slice_count=2, name="s-2")
    assert devices_of(run([claim], [rest, part])) == ["gpu-0", "gpu-1"]


def test_a_pool_with_a_repeated_device_name_is_invalid() -> None:
    bad = resource_slice("node-a", [gpu_device(0), gpu_device(0)])
    assert run([resource_claim("a", memory="1Gi")], [bad]) == Unfit()


def test_pools_are_tried_by_driver_then_name_and_other_nodes_ignored() -> None:
    slices = [
        resource_slice("node-a", [gpu_device(7)], pool="zeta", name="z"),
        resource_slice("node-a", [gpu_device(3)], pool="alpha", name="a"),
        resource_slice("node-b", [gpu_device(1)], name="b"),
    ]
    outcome = run([resource_claim("a", memory="1Gi")], slices)
    assert [(r["pool"], r["device"]) for r in results(outcome)] == [("alpha", "gpu-3")]


def test_node_local_devices_pin_the_allocation_to_the_node() -> None:
    outcome = run([resource_claim("a", memory="1Gi")], one_gpu())
    assert allocation(outcome)["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    }


def test_slices_for_all_nodes_or_by_selector() -> None:
    shared = resource_slice("node-a", [gpu_device(0)])
    del shared["spec"]["nodeName"]
    shared["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z2"]}]}
        ]
    }
    assert run([resource_claim("a", memory="1Gi")], [shared]) == Unfit()
    shared["spec"]["nodeSelector"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] = ["z1"]
    outcome = run([resource_claim("a", memory="1Gi")], [shared])
    assert allocation(outcome)["nodeSelector"] == shared["spec"]["nodeSelector"]
    del shared["spec"]["nodeSelector"]
    shared["spec"]["allNodes"] = True
    assert "nodeSelector" not in allocation(run([resource_claim("a")], [shared]))


# -- search -----------------------------------------------------------------------------------


def test_backtracking_across_two_requests() -> None:
    # Request "any" takes gpu-0 first; "first" (index 0 only) then fails, so the search goes back
    # and gives "any" gpu-1.
    slices = [resource_slice("node-a", [gpu_device(0, shared=False), gpu_device(1, shared=False)])]
    claim = resource_claim("pair")
    claim["spec"]["devices"]["requests"] = [
        {"name": "any", "exactly": {"deviceClassName": DRIVER}},
        {
            "name": "first",
            "exactly": {
                "deviceClassName": DRIVER,
                "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].index == 0'}}],
            },
        },
    ]
    assert [(r["request"], r["device"]) for r in results(run([claim], slices))] == [
        ("any", "gpu-1"),
        ("first", "gpu-0"),
    ]


def test_backtracking_across_claims() -> None:
    slices = [resource_slice("node-a", [gpu_device(0, shared=False), gpu_device(1, shared=False)])]
    picky = resource_claim("picky", selectors=(f'device.attributes["{DRIVER}"].index == 0',))
    outcome = run([resource_claim("any"), picky], slices)
    assert (devices_of(outcome, 0), devices_of(outcome, 1)) == (["gpu-1"], ["gpu-0"])


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    slices = [resource_slice("node-a", [gpu_device(0, model="A100")])]
    claim = resource_claim("fa")
    claim["spec"]["devices"]["requests"] = [
        {
            "name": "gpu",
            "firstAvailable": [
                {
                    "name": "h100",
                    "deviceClassName": DRIVER,
                    "selectors": [
                        {"cel": {"expression": f'device.attributes["{DRIVER}"].model == "H100"'}}
                    ],
                },
                {
                    "name": "big",
                    "deviceClassName": DRIVER,
                    "capacity": {"requests": {"memory": "32Gi"}},
                },
                {
                    "name": "any",
                    "deviceClassName": DRIVER,
                    "capacity": {"requests": {"memory": "2Gi"}},
                },
            ],
        }
    ]
    result = results(run([claim], slices))[0]
    assert result["request"] == "gpu/any"
    assert result["consumedCapacity"]["memory"] == "2Gi"


def test_constraints_match_and_distinct_attributes() -> None:
    slices = [
        resource_slice(
            "node-a",
            [gpu_device(0, model="A100"), gpu_device(1, model="H100"), gpu_device(2, model="H100")],
        )
    ]
    claim = resource_claim("c", memory="1Gi", count=2)
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/model"}]
    assert devices_of(run([claim], slices)) == ["gpu-1", "gpu-2"]
    claim["spec"]["devices"]["constraints"] = [{"distinctAttribute": f"{DRIVER}/model"}]
    assert devices_of(run([claim], slices)) == ["gpu-0", "gpu-1"]
    claim["spec"]["devices"]["constraints"] = [{"matchAttribute": f"{DRIVER}/missing"}]
    assert run([claim], slices) == Unfit()


def test_all_mode_takes_every_selected_device() -> None:
    slices = [resource_slice("node-a", [gpu_device(0), gpu_device(1), gpu_device(2, memory="8Gi")])]
    claim = resource_claim("all")
    claim["spec"]["devices"]["requests"][0]["exactly"] = {
        "deviceClassName": DRIVER,
        "allocationMode": "All",
        "capacity": {"requests": {"memory": "10Gi"}},
    }
    # gpu-2 publishes too little memory for the policy: it is not part of "all".
    assert devices_of(run([claim], slices)) == ["gpu-0", "gpu-1"]
    held = AllocatedState(exclusive=frozenset({DeviceId(DRIVER, "node-a", "gpu-1")}))
    assert run([claim], slices, allocated=held) == Unfit()


def test_cel_selectors_with_quantities_and_class_selectors() -> None:
    slices = [resource_slice("node-a", [gpu_device(0, memory="8Gi"), gpu_device(1, memory="40Gi")])]
    big = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("16Gi")) >= 0'
    assert devices_of(run([resource_claim("a", selectors=(big,))], slices)) == ["gpu-1"]
    classes = {
        DRIVER: device_class(
            selectors=(f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("10Gi"))',)
        )
    }
    assert devices_of(run([resource_claim("a")], slices, classes=classes)) == ["gpu-0"]
    multi = 'device.allowMultipleAllocations && device.attributes["other.domain"].size() == 0'
    assert devices_of(run([resource_claim("a", selectors=(multi,))], slices)) == ["gpu-0"]


def test_cel_errors_abort_the_allocation() -> None:
    for expression in (f'device.attributes["{DRIVER}"].nosuch == 1', "device.driver", "1 +"):
        with pytest.raises(AllocatorError, match="CEL"):
            run([resource_claim("a", selectors=(expression,))], one_gpu())


def test_a_missing_device_class_is_named() -> None:
    claim = resource_claim("a", device_class_name="nope")
    assert run([claim], one_gpu()) == Unfit("device class nope does not exist")


def test_too_many_devices_for_one_claim() -> None:
    with pytest.raises(AllocatorError, match="exceeds the claim limit of 32"):
        run([resource_claim("a", count=33)], one_gpu())


def test_taints_need_a_toleration() -> None:
    device = gpu_device(0)
    device["taints"] = [{"key": "broken", "effect": "NoSchedule"}]
    slices = [resource_slice("node-a", [device])]
    assert run([resource_claim("a", memory="1Gi")], slices) == Unfit()
    claim = resource_claim("a", memory="1Gi")
    claim["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": "broken", "operator": "Exists"}
    ]
    assert results(run([claim], slices))[0]["tolerations"] == [
        {"key": "broken", "operator": "Exists"}
    ]


def test_class_and_claim_config_are_copied() -> None:
    opaque = {"driver": DRIVER, "parameters": {"x": 1}}
    klass = device_class()
    klass["spec"]["config"] = [{"opaque": opaque}]
    claim = resource_claim("a", memory="1Gi")
    claim["spec"]["devices"]["config"] = [{"requests": ["gpu"], "opaque": opaque}]
    outcome = run([claim], one_gpu(), classes={DRIVER: klass})
    assert allocation(outcome)["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpu"], "opaque": opaque},
        {"source": "FromClaim", "requests": ["gpu"], "opaque": opaque},
    ]
