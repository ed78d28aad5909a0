"""Scenario generation is deterministic per seed and stays within its configuration; metrics
text is parsed and summarised."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.stack.chaos.scenarios import (
    CreatePod,
    DeletePod,
    InjectErrors,
    ScenarioConfig,
    StartService,
    StopService,
    describe,
    generate_scenario,
)
from hami_kubesim.stack.metrics import histogram_summary, parse_samples, sample_value

CONFIG = ScenarioConfig(services=("webhook", "scheduler-0", "deviceplugin-n1"))


@given(st.integers(min_value=0, max_value=2**32))
def test_a_seed_always_gives_the_same_well_formed_timeline(seed: int) -> None:
    scenario = generate_scenario(seed, CONFIG)
    assert scenario == generate_scenario(seed, CONFIG)
    times = [step.at for step in scenario.steps]
    assert times == sorted(times)
    assert all(0 <= t <= CONFIG.duration for t in times)
    low, high = CONFIG.pods
    assert low <= len(scenario.pods) <= high
    assert len(set(scenario.pods)) == len(scenario.pods)
    created = {}
    for step in scenario.steps:
        if isinstance(step, CreatePod):
            created[step.pod["metadata"]["name"]] = step.at
            assert step.pod["spec"]["schedulerName"] == "hami-scheduler"
            assert step.pod["metadata"]["namespace"] == CONFIG.namespace
        if isinstance(step, DeletePod):
            assert step.at >= created[step.name]
    for step in scenario.steps:
        if isinstance(step, InjectErrors) and step.code == 409:
            assert step.verb in ("create", "update")
    stops = [s for s in scenario.steps if isinstance(s, StopService)]
    starts = [s for s in scenario.steps if isinstance(s, StartService)]
    assert [s.service for s in stops] == [s.service for s in starts]
    assert all(s.service in CONFIG.services for s in stops)
    assert all(b.at >= a.at for a, b in zip(stops, starts, strict=True))
    assert len(describe(scenario)) == len(scenario.steps)


def test_different_seeds_differ_and_services_are_only_stopped_when_named() -> None:
    assert generate_scenario(1, CONFIG) != generate_scenario(2, CONFIG)
    quiet = ScenarioConfig()
    for seed in range(50):
        assert generate_scenario(seed, quiet).count(StopService) == 0
    stopping = sum(generate_scenario(seed, CONFIG).count(StopService) for seed in range(100))
    assert 20 <= stopping <= 60


METRICS = """\
# HELP hami_demo_seconds A histogram.
# TYPE hami_demo_seconds histogram
hami_demo_seconds_bucket{verb="filter",le="0.01"} 50.0
hami_demo_seconds_bucket{verb="filter",le="0.1"} 90.0
hami_demo_seconds_bucket{verb="filter",le="1.0"} 100.0
hami_demo_seconds_bucket{verb="filter",le="+Inf"} 100.0
hami_demo_seconds_count{verb="filter"} 100.0
hami_demo_seconds_sum{verb="filter"} 2.5
# HELP hami_things Things.
# TYPE hami_things gauge
hami_things{kind="nodes"} 3.0
hami_things{kind="pods"} 7.0
"""


def test_metrics_are_parsed_and_histograms_summarised() -> None:
    samples = parse_samples(METRICS)
    assert sample_value(samples, "hami_things", kind="pods") == 7.0
    assert sample_value(samples, "hami_things") == 10.0
    assert sample_value(samples, "hami_missing") is None
    summary = histogram_summary(samples, "hami_demo_seconds", verb="filter")
    assert summary is not None
    assert summary.count == 100
    assert summary.mean == pytest.approx(0.025)
    assert summary.p50 == pytest.approx(0.01)
    assert summary.p99 == pytest.approx(0.1 + 0.9 * 0.9)
    assert histogram_summary(samples, "hami_demo_seconds", verb="bind") is None
