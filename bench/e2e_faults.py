"""Hundreds of seeded fault scenarios on one running system; the invariants checked after each.

The same scenarios as ``tests/faults`` (``hami_kubesim.stack.chaos.scenarios``): pod creations and
deletions while the API server injects errors and latency, drops watches and forces 410s, and
service processes are killed and restarted; a share of them also contain an incident of the
bind path (``hami_kubesim.stack.chaos.incidents``: a paused kubelet outlasting the node lock,
admission out of bind order, a device-plugin restart between bind and Allocate, a
default-scheduler pod asking for a GPU, pods placed by an old HAMi release, a pod created from
a placed pod's manifest) or of preemption (``hami_kubesim.stack.chaos.preemption``: a victim
taking its whole grace period, a preemptor deleted while nominated, two preemptors racing, the
extender restarted while a preemptor waits). After each, every pod settles and the invariant
checker runs over the cluster (no device over-committed, no kubelet replica held twice,
container env equal to the allocation and to the kubelet's devices, no node lock refusing a
bind once its owner stopped waiting, no pod lost, every preemption victim of lower priority and
needed, no held slice given to a lower-priority pod). Prints one line per scenario and the
totals; asserts nothing (a violation is printed with the seed that reproduces its timeline).

    uv run --frozen python bench/e2e_faults.py [--scenarios 200] [--first-seed 1000]
        [--incident-share 0.3] [--incidents lock-expiry,default-scheduler]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Sequence

from hami_kubesim.stack.chaos import (
    CHAOS_LOCK_TIMEOUT,
    ScenarioResult,
    chaos_config,
    chaos_spec,
    run_scenarios,
)
from hami_kubesim.stack.chaos.incidents import INCIDENTS, incident_named
from hami_kubesim.stack.chaos.scenarios import describe, generate_scenario
from hami_kubesim.stack.system.lifecycle import running_system
from hami_runtime.logs import configure_logging


def stop_on_sigterm() -> None:
    """SIGTERM cancels the run, so every process is stopped and the work dir removed."""
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)


async def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenarios", type=int, default=200)
    parser.add_argument("--first-seed", type=int, default=1000)
    parser.add_argument("--duration", type=float, default=1.5, help="seconds of stream each")
    parser.add_argument(
        "--incident-share", type=float, default=0.3, help="share of scenarios with an incident"
    )
    parser.add_argument(
        "--incidents",
        default=",".join(i.name for i in INCIDENTS),
        help="comma-separated incidents that may occur (default: all)",
    )
    args = parser.parse_args(argv)
    try:
        incidents = [incident_named(name) for name in args.incidents.split(",") if name]
    except ValueError as error:
        parser.error(str(error))
    configure_logging("console", "error")
    stop_on_sigterm()
    started = time.monotonic()
    async with running_system(chaos_spec()) as system:
        print(f"system up in {time.monotonic() - started:.1f} s; logs in {system.logs_dir}")
        config = chaos_config(
            system,
            duration=args.duration,
            incidents=incidents,
            incident_share=args.incident_share,
        )

        def show(result: ScenarioResult) -> None:
            faults = sum(result.faults.values())
            outcomes = ", ".join(f"{k} {v}" for k, v in sorted(result.outcomes.items()))
            mark = "ok" if not result.violations else f"{len(result.violations)} VIOLATIONS"
            incident = f" [{result.incident}]" if result.incident else ""
            if result.preemptions:
                incident += f" ({result.preemptions} preemptions)"
            print(
                f"seed {result.seed:>6}: {result.seconds:4.1f} s, {faults:>3} faults, "
                f"pods: {outcomes}{incident}: {mark}",
                flush=True,
            )
            for violation in result.violations:
                print(f"    {violation}")
            if result.violations:
                for line in describe(generate_scenario(result.seed, config)):
                    print(f"      {line}")

        seeds = range(args.first_seed, args.first_seed + args.scenarios)
        summary = await run_scenarios(
            system, seeds, config, lock_timeout=CHAOS_LOCK_TIMEOUT, on_result=show
        )
    elapsed = time.monotonic() - started
    print(f"\n{summary.render()}")
    print(f"wall time {elapsed:.0f} s ({elapsed / max(1, args.scenarios):.1f} s per scenario)")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
