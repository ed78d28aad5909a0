"""The vendor strategy registry: standard unless a row names a vendor module, by family; a row
naming what does not exist fails at load."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hami_protocol.request.containers import (
    PERCENTAGE_UNSET,
    ContainerDeviceRequest,
    ContainerSlot,
    PodDeviceRequests,
)
from hami_scheduler.core import NodeUsage, PodPlan, decide_node, pod_plan, select_node
from hami_scheduler.core.fit import fit_request
from hami_scheduler.core.quick import quick_plan
from hami_scheduler.core.strategy import (
    FIT_MODULES,
    STANDARD,
    STRATEGIES,
    FitModule,
    ScoreArgs,
    StrategyError,
    family_of,
    load_strategy,
    strategy_for,
)
from hami_scheduler.core.vendors import (
    amd,
    ascend,
    awsneuron,
    biren,
    enflame,
    kunlun,
    metax_gpu,
    metax_sgpu,
    mthreads,
    vastai,
)

from ..core_helpers import dev, node


@pytest.mark.parametrize(
    ("word", "family"),
    [
        ("NVIDIA", "NVIDIA"),
        ("Ascend910B3", "Ascend"),
        ("Ascend310P", "Ascend"),
        ("kunlun", "kunlun"),
        ("XPU", "XPU"),
        ("MR-V100", "MR-V100"),
    ],
)
def test_words_map_to_their_family(word: str, family: str) -> None:
    assert family_of(word) == family


@pytest.mark.parametrize("word", ["NVIDIA", "DCU", "MLU", "MR-V100", "BI-V150"])
def test_vendors_without_rules_of_their_own_walk_the_standard_loop(word: str) -> None:
    strategy = strategy_for(word)
    assert strategy.fit is fit_request
    assert strategy.score is None
    assert strategy.standard


@pytest.mark.parametrize(
    ("word", "module", "fit"),
    [
        ("AMD", amd, amd.fit),
        ("Biren", biren, biren.fit),
        ("Mthreads", mthreads, mthreads.fit),
        ("Metax-GPU", metax_gpu, metax_gpu.fit),
        ("Metax-SGPU", metax_sgpu, metax_sgpu.fit),
        ("Ascend910B3", ascend, ascend.fit),
        ("Enflame", enflame, enflame.fit),
        ("GCU", enflame, enflame.fit_gcu),
        ("XPU", kunlun, kunlun.fit_vxpu),
        ("Vastai", vastai, vastai.fit),
    ],
)
def test_vendors_with_rules_of_their_own_get_their_module_fit(
    word: str, module: object, fit: object
) -> None:
    assert strategy_for(word).fit is fit


def test_a_row_naming_a_missing_module_fails_at_load() -> None:
    with pytest.raises(StrategyError, match="no_such_vendor_module"):
        load_strategy("X", FitModule("no_such_vendor_module"))
    assert load_strategy("X", None) is STANDARD


def test_a_row_naming_a_missing_function_fails_at_load() -> None:
    with pytest.raises(StrategyError, match="fitt"):
        load_strategy("X", FitModule("kunlun", fit="fitt"))
    with pytest.raises(StrategyError, match="scor"):
        load_strategy("X", FitModule("kunlun", score="scor"))


def test_a_row_naming_an_unknown_score_shape_fails_at_load() -> None:
    with pytest.raises(StrategyError, match="shape"):
        load_strategy("X", FitModule("kunlun", score="score", score_shape="policy"))


def test_every_row_is_loaded_at_import() -> None:
    assert set(STRATEGIES) == set(FIT_MODULES)
    assert all(not strategy.standard for strategy in STRATEGIES.values())


def test_a_row_plugs_in_the_named_fit_and_score() -> None:
    row = FitModule("hami_scheduler.core.fit", fit="device_refusal", score="request_memory")
    strategy = load_strategy("X", row)
    assert strategy.fit is not fit_request
    assert strategy.score is not None
    assert not strategy.standard


def test_kunlun_plugs_in_its_module_fit_and_score() -> None:
    strategy = strategy_for("kunlun")
    assert strategy.fit == kunlun.fit
    assert strategy.score is not None
    # An empty node and an empty pod: bubble delta 0 → HAMi's 2000.
    assert strategy.score(ScoreArgs("kunlun", node("n", []), ())) == 2000.0
    assert strategy_for("XPU").fit == kunlun.fit_vxpu


def test_aws_neuron_plugs_in_its_module_fit_without_a_score() -> None:
    strategy = strategy_for("AWSNeuron")
    assert strategy.fit == awsneuron.fit
    assert strategy.score is None
    assert not strategy.standard


def kunlun_node(used: Sequence[int] = (), *, nvidia: int = 2) -> NodeUsage:
    devices = [dev(f"T4-{i}", index=i) for i in range(nvidia)]
    devices += [
        dev(
            f"xpu-{i}",
            vendor="kunlun",
            model="kunlun",
            index=i,
            count=1,
            mem=98304,
            used=int(i in used),
        )
        for i in range(8)
    ]
    return node("n", devices)


def two_vendor_plan(xpus: int) -> PodPlan:
    slot = ContainerSlot(
        "c0",
        is_init=False,
        requests={
            "NVIDIA": ContainerDeviceRequest(1, "NVIDIA", 1000, PERCENTAGE_UNSET, 10),
            "kunlun": ContainerDeviceRequest(xpus, "kunlun", 0, 100, 100),
        },
    )
    return pod_plan(PodDeviceRequests((slot,)))


def test_a_pod_asking_two_vendors_gets_each_vendors_fit_and_the_vendor_score() -> None:
    usage = kunlun_node(used=(0,))
    plan = two_vendor_plan(2)
    assert quick_plan(plan) is None
    decision = decide_node(usage, plan)
    assert decision.fits
    by_word = dict(decision.devices.entries)
    assert len(by_word["NVIDIA"][0]) == 1
    # The wing rule: two XPUs from the wing with the fewest feasible free devices (1-3).
    assert [d.uuid for d in by_word["kunlun"][0]] == ["xpu-1", "xpu-2"]
    # HAMi's Kunlun score is 0 on a node with other vendors' devices.
    assert decision.score == usage.base_score
    selection = select_node(plan, {"n": usage})
    assert selection.node == "n"
    assert selection.fitting["n"] == decision.score


def test_a_vendor_node_score_is_added_to_the_usage_score() -> None:
    usage = kunlun_node(used=(0,), nvidia=0)
    slot = ContainerSlot(
        "c0", is_init=False, requests={"kunlun": ContainerDeviceRequest(2, "kunlun", 0, 100, 100)}
    )
    decision = decide_node(usage, pod_plan(PodDeviceRequests((slot,))))
    # Used {0}, placed {1, 2}: bubble 3 → 2, delta −1 → 3000.
    assert decision.score == usage.base_score + 3000.0


def test_a_vendor_fit_refusal_is_the_nodes_reason() -> None:
    decision = decide_node(kunlun_node(used=range(8)), two_vendor_plan(2))
    assert not decision.fits
    assert decision.reason
