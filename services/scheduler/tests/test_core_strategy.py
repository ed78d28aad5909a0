"""The vendor strategy registry: standard unless a vendor module is there, by family."""

from __future__ import annotations

import pytest

from hami_scheduler.core import fit as fit_module
from hami_scheduler.core.fit import fit_request
from hami_scheduler.core.strategy import (
    FIT_MODULES,
    STANDARD,
    FitModule,
    family_of,
    load_strategy,
    strategy_for,
)


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


@pytest.mark.parametrize("word", ["NVIDIA", "DCU", "MLU", "MR-V100", "Mthreads", "AMD", "Biren"])
def test_vendors_without_rules_of_their_own_walk_the_standard_loop(word: str) -> None:
    strategy = strategy_for(word)
    assert strategy.fit is fit_request
    assert strategy.score is None
    assert strategy.standard


def test_a_row_whose_module_is_missing_falls_back_to_the_standard_loop() -> None:
    assert load_strategy("X", FitModule("no_such_vendor_module")) is STANDARD
    assert load_strategy("X", None) is STANDARD


def test_a_row_plugs_in_the_named_fit_and_score() -> None:
    row = FitModule("hami_scheduler.core.fit", fit="device_refusal", score="request_memory")
    strategy = load_strategy("X", row)
    plugged: tuple[object, object] = (strategy.fit, strategy.score)
    assert plugged == (fit_module.device_refusal, fit_module.request_memory)
    assert not strategy.standard


def test_every_row_names_a_module_of_the_vendors_package() -> None:
    assert all("." not in row.module for row in FIT_MODULES.values())
