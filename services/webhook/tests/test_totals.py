"""The capacity totals the webhook writes (``--write-capacity-totals``): values, where, when."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from hami_protocol.config.device import NvidiaConfig
from hami_protocol.totals import NVIDIA_CORES, NVIDIA_MEMORY
from hami_protocol.vendor.table import DEFAULT_VENDORS, nvidia_vendor
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.decision import Decision
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.settings import parse_settings

from .helpers import container, gpu, pod

ON = MutationRules(capacity_totals=True)


def on_with(**nvidia: Any) -> MutationRules:
    config = replace(NvidiaConfig(), **nvidia)
    vendors = (nvidia_vendor(config), *DEFAULT_VENDORS[1:])
    return MutationRules(nvidia=config, vendors=vendors, capacity_totals=True)


def admit(obj: dict[str, Any], rules: MutationRules = ON) -> tuple[Decision, dict[str, Any]]:
    decision = admit_pod(copy.deepcopy(obj), namespace="default", rules=rules)
    return decision, jsonpatch.apply_patch(obj, list(decision.patch))


def resources(result: dict[str, Any], index: int = 0, key: str = "containers") -> dict[str, Any]:
    found: dict[str, Any] = result["spec"][key][index].get("resources") or {}
    return found


def totals(result: dict[str, Any], index: int = 0, key: str = "containers") -> tuple[Any, ...]:
    res = resources(result, index, key)
    return tuple(
        (res.get(section) or {}).get(name)
        for section in ("limits", "requests")
        for name in (NVIDIA_MEMORY, NVIDIA_CORES)
    )


def test_off_by_default() -> None:
    assert not MutationRules().capacity_totals
    assert not parse_settings([], environ={}).rules.capacity_totals
    decision, result = admit(pod(container(limits=gpu(2, mem=3000, cores=30))), MutationRules())
    assert decision.outcome == "mutated"
    assert totals(result) == (None,) * 4


def test_flag_turns_it_on() -> None:
    assert parse_settings(["--write-capacity-totals"], environ={}).rules.capacity_totals
    env = {"HAMI_WRITE_CAPACITY_TOTALS": "true"}
    assert parse_settings([], environ=env).rules.capacity_totals


def test_limits_and_requests_carry_count_times_per_card_values() -> None:
    decision, result = admit(pod(container(limits=gpu(2, mem=3000, cores=30))))
    assert decision.outcome == "mutated"
    assert totals(result) == ("6000", "60", "6000", "60")


def test_totals_follow_the_defaults_the_webhook_injects() -> None:
    # gpumem alone: the default count (1) is added; no cores given and not a whole card: 0.
    _, result = admit(pod(container(limits={"nvidia.com/gpumem": "2000"})))
    assert totals(result) == ("2000", "0", "2000", "0")
    # A whole card: the webhook adds cores 100; no MiB is known at admission, memory counts 0.
    _, result = admit(pod(container(limits=gpu(1))))
    assert totals(result) == ("0", "100", "0", "100")
    # defaultMemory and memoryFactor are the scheduler's reading too.
    _, result = admit(pod(container(limits=gpu(2))), on_with(default_memory=4000))
    assert totals(result)[:2] == ("8000", "200")  # no memory named: a whole card's cores
    _, result = admit(pod(container(limits=gpu(1, mem=3))), on_with(memory_factor=1024))
    assert totals(result)[:2] == ("3072", "0")


def test_percentage_requests_count_cores_only() -> None:
    _, result = admit(pod(container(limits=gpu(2, pct=50, cores=40))))
    assert totals(result) == ("0", "80", "0", "80")


def test_init_containers_get_theirs() -> None:
    obj = pod(
        container("app", limits=gpu(1, mem=1000, cores=10)),
        init=[container("init", limits=gpu(1, mem=5000, cores=20))],
    )
    _, result = admit(obj)
    assert totals(result, key="initContainers") == ("5000", "20", "5000", "20")
    assert totals(result) == ("1000", "10", "1000", "10")


def test_wrong_values_are_corrected_and_foreign_ones_removed() -> None:
    lying = gpu(1, mem=1000, cores=10) | {NVIDIA_MEMORY: "1", NVIDIA_CORES: "999"}
    obj = pod(
        container("gpu", limits=lying, requests={NVIDIA_MEMORY: "1"}),
        container("plain", limits={NVIDIA_MEMORY: "5000", "cpu": "1"}),
    )
    _, result = admit(obj)
    assert totals(result) == ("1000", "10", "1000", "10")
    assert resources(result, 1) == {"limits": {"cpu": "1"}}


def test_a_pod_without_devices_cannot_hold_totals() -> None:
    obj = pod(container(limits={NVIDIA_MEMORY: "80000"}, requests={NVIDIA_MEMORY: "80000"}))
    decision, result = admit(obj)
    assert decision.outcome == "mutated"
    assert resources(result) == {"limits": {}, "requests": {}}
    # Nothing to correct: the pod is left alone, as without the mode.
    assert admit(pod(container(limits={"cpu": "1"})))[0].outcome == "allowed"


def test_admitting_the_result_again_changes_nothing() -> None:
    _, result = admit(pod(container(limits=gpu(3, mem=2000, cores=25))))
    again, _ = admit(result)
    assert again.outcome == "allowed"


@pytest.mark.parametrize("vendor_only", [{"cambricon.com/vmlu": "1"}, {"hygon.com/dcunum": "1"}])
def test_other_vendors_are_not_counted(vendor_only: dict[str, str]) -> None:
    _, result = admit(pod(container(limits=vendor_only)))
    assert totals(result) == (None,) * 4
