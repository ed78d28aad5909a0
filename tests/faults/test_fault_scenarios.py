"""Seeded random fault scenarios on one running system, with the invariants checked after each.

Each scenario streams pod creations and deletions for 1.5 s while the API server answers a share
of requests with errors, delays others, drops watches (cleanly, with ERROR 410, or by cutting
the connection), compacts its history (forcing 410 Expired on resumption), and a service
process is killed or stopped and started again. Then the faults stop, every pod settles, and
the invariant checker runs over the whole cluster (see ``hami_kubesim.stack.invariants``).

The seeds are fixed, so the timelines are the same in every run. 20 scenarios keep this suite
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
    ScenarioResult,
    chaos_spec,
    run_scenarios,
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


@pytest.mark.timeout(400)
async def test_random_fault_scenarios_break_no_invariant(
    chaos_system: System, fault_summary: list[str]
) -> None:
    config = ScenarioConfig(services=tuple(p.name for p in chaos_system.services()))
    failing: list[str] = []

    def record(result: ScenarioResult) -> None:
        if result.violations:
            steps = "\n    ".join(describe(generate_scenario(result.seed, config)))
            failing.append(f"seed {result.seed}:\n    {steps}")

    summary = await run_scenarios(
        chaos_system, SEEDS, config, lock_timeout=LOCK_TIMEOUT, on_result=record
    )
    fault_summary.append(summary.render())

    assert len(summary.results) == len(SEEDS)
    assert summary.faults["API errors answered"] > 0
    assert sum(summary.outcomes.values()) > 0
    assert summary.outcomes["Running"] > 0
    assert summary.violations == [], "\n".join(failing)
    # Every scenario cleaned up after itself: the cluster is empty and consistent.
    state = chaos_system.state()
    assert state.pods == ()
    assert check_all(state, lock_timeout=LOCK_TIMEOUT) == ()
