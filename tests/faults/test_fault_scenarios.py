"""Seeded random fault scenarios on one running system, with the invariants checked after each.

Each scenario streams pod creations and deletions for 1.5 s while the API server answers a share
of requests with errors, delays others, drops watches (cleanly, with ERROR 410, or by cutting
the connection), compacts its history (forcing 410 Expired on resumption), and a service
process is killed or stopped and started again; about a third also contain an incident of the
bind path on one node (``hami_kubesim.stack.chaos.incidents``: a paused kubelet outlasting the node
lock, admission out of bind order, a device-plugin restart between bind and Allocate, a
default-scheduler pod asking for a GPU, pods placed by an old HAMi release, a pod created from a
placed pod's manifest) or of preemption (``hami_kubesim.stack.chaos.preemption``: a victim taking
its whole grace period, a preemptor deleted while nominated, two preemptors racing for one
freed card, the extender restarted while a preemptor waits). Then the faults stop, every pod
settles, and the invariant checker runs over the whole cluster (see
``hami_kubesim.stack.checks.invariants``), the preemption rules over every preemption the
scheduling loop carried out.

The seeds are fixed, so the timelines are the same in every run; each seed is its own test, so a
failing seed is reported alone, with its timeline (``-k "scenario and 7"`` runs one). The last
test checks what the scenarios did together and prints the summary. 20 scenarios keep this suite
to about a minute and a half on two cores; ``bench/e2e_faults.py`` runs hundreds. The scheduling
loop's pod backoff is shortened (0.2 s doubling to 2 s instead of the chart's 1 s to 10 s) so
pods retried after a fault settle within the scenario; the node-lock expiry is 3 s for the same
reason (see ``hami_kubesim.stack.chaos.chaos_spec``).
"""

from __future__ import annotations

import pytest

from hami_kubesim.stack.chaos import CHAOS_LOCK_TIMEOUT, ChaosSummary, chaos_config, run_scenario
from hami_kubesim.stack.chaos.scenarios import describe, generate_scenario
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.system.handle import System

pytestmark = pytest.mark.asyncio(loop_scope="package")

SEEDS = range(20)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("seed", SEEDS)
async def test_fault_scenario_breaks_no_invariant(
    chaos_system: System, scenarios: ChaosSummary, seed: int
) -> None:
    scenario = generate_scenario(seed, chaos_config(chaos_system))
    result = await run_scenario(chaos_system, scenario, lock_timeout=CHAOS_LOCK_TIMEOUT)
    scenarios.results.append(result)
    timeline = "\n    ".join(describe(scenario))
    found = "\n  ".join(str(v) for v in result.violations)
    assert result.violations == (), f"seed {seed}:\n  {found}\ntimeline:\n    {timeline}"


async def test_the_scenarios_together_exercised_the_system(
    chaos_system: System, scenarios: ChaosSummary, fault_summary: list[str]
) -> None:
    fault_summary.append(scenarios.render())
    random = [r for r in scenarios.results if r.seed in SEEDS]
    if len(random) < len(SEEDS):
        pytest.skip(f"needs all {len(SEEDS)} seeds; {len(random)} ran")
    assert sum(scenarios.outcomes.values()) > 0
    assert scenarios.faults["API errors answered"] > 0
    assert scenarios.outcomes["Running"] > 0
    assert scenarios.incidents, "no seed drew an incident"
    # Every scenario cleaned up after itself: the cluster is empty and consistent.
    state = chaos_system.state()
    assert state.pods == ()
    assert check_all(state, lock_timeout=CHAOS_LOCK_TIMEOUT) == ()
