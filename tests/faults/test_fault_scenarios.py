"""Seeded random fault scenarios on one running system, with the invariants checked after each.

Each scenario streams pod creations and deletions for 1.5 s while the API server answers a share
of requests with errors, delays others, drops watches (cleanly, with ERROR 410, or by cutting
the connection), compacts its history (forcing 410 Expired on resumption), and a service
process is killed or stopped and started again. Then the faults stop, every pod settles, and
the invariant checker runs over the whole cluster (see ``hami_kubesim.stack.invariants``).

The seeds are fixed, so the timelines are the same in every run; each seed is its own test, so a
failing seed is reported alone, with its timeline (``-k "scenario and 7"`` runs one). The last
test checks what the scenarios did together and prints the summary. 20 scenarios keep this suite
to about a minute on two cores; ``bench/e2e_faults.py`` runs hundreds. The scheduling loop's
pod backoff is shortened (0.2 s doubling to 2 s instead of the chart's 1 s to 10 s) so pods
retried after a fault settle within the scenario; the node-lock expiry is 3 s for the same
reason (see ``hami_kubesim.stack.chaos.chaos_spec``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from hami_kubesim.stack.chaos import (
    CHAOS_LOCK_TIMEOUT,
    ChaosSummary,
    chaos_spec,
    run_scenario,
)
from hami_kubesim.stack.invariants import check_all
from hami_kubesim.stack.scenarios import ScenarioConfig, describe, generate_scenario
from hami_kubesim.stack.system import System, running_system

pytestmark = pytest.mark.asyncio(loop_scope="module")

SEEDS = range(20)
LOCK_TIMEOUT = CHAOS_LOCK_TIMEOUT


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def chaos_system() -> AsyncIterator[System]:
    async with running_system(chaos_spec()) as running:
        yield running


@pytest.fixture(scope="module")
def scenarios() -> ChaosSummary:
    """The results of the seeds run so far in this module."""
    return ChaosSummary()


def _config(system: System) -> ScenarioConfig:
    return ScenarioConfig(services=tuple(p.name for p in system.services()))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
async def test_fault_scenario_breaks_no_invariant(
    chaos_system: System, scenarios: ChaosSummary, seed: int
) -> None:
    scenario = generate_scenario(seed, _config(chaos_system))
    result = await run_scenario(chaos_system, scenario, lock_timeout=LOCK_TIMEOUT)
    scenarios.results.append(result)
    timeline = "\n    ".join(describe(scenario))
    found = "\n  ".join(str(v) for v in result.violations)
    assert result.violations == (), f"seed {seed}:\n  {found}\ntimeline:\n    {timeline}"


async def test_the_scenarios_together_exercised_the_system(
    chaos_system: System, scenarios: ChaosSummary, fault_summary: list[str]
) -> None:
    fault_summary.append(scenarios.render())
    if len(scenarios.results) < len(SEEDS):
        pytest.skip(f"needs all {len(SEEDS)} seeds; {len(scenarios.results)} ran")
    assert sum(scenarios.outcomes.values()) > 0
    assert scenarios.faults["API errors answered"] > 0
    assert scenarios.outcomes["Running"] > 0
    # Every scenario cleaned up after itself: the cluster is empty and consistent.
    state = chaos_system.state()
    assert state.pods == ()
    assert check_all(state, lock_timeout=LOCK_TIMEOUT) == ()
