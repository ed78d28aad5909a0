"""Seeded fault scenarios played on a running system, with the invariants checked after each.

:mod:`.scenarios` generates them (pure: pod creations and deletions, API faults, service
restarts) and :mod:`.incidents` holds the bind-path incidents they may contain (pure);
:mod:`.runner` plays scenarios and sums them up (:func:`run_scenario`, :func:`run_scenarios`;
:func:`chaos_spec` and :func:`chaos_config` say what they run on and may contain);
:mod:`.player` carries out each step; :mod:`.timeline` records how node locks and pods changed,
for the node-lock invariant.
"""

from hami_kubesim.stack.chaos.runner import (
    CHAOS_LOCK_TIMEOUT,
    ChaosSummary,
    PodResult,
    ScenarioResult,
    chaos_config,
    chaos_spec,
    run_scenario,
    run_scenarios,
)

__all__ = [
    "CHAOS_LOCK_TIMEOUT",
    "ChaosSummary",
    "PodResult",
    "ScenarioResult",
    "chaos_config",
    "chaos_spec",
    "run_scenario",
    "run_scenarios",
]
