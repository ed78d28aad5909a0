"""The demo's run once the system is up: submit the examples one after another, waiting for each
pod's outcome, then print the report, the invariants and what the vGPU monitors saw.

Kept apart from :mod:`.cli` (start-up, the access hints of ``--keep-running``, the command
line) so each reads as one step of the demo.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from hami_kube.objects import PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.demo.cluster import PREEMPTION_MODE
from hami_kubesim.demo.examples import pods_of
from hami_kubesim.stack.checks.expectations import ExpectationResult, evaluate, expectation_of
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.checks.preemptions import preemptions
from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ClusterState, outcome, pod_key, stage
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.settle import settled

_EVENTS_TIMEOUT = 5.0
"""How long the extender gets to record its PreemptedForGPU Events (it writes them on its own
watches, after kube-scheduler's deletions)."""
_POD_TIMEOUT = 30.0
_MONITOR_TIMEOUT = 15.0
"""How long the monitors get to report every running container (each finds a new region at its
next pass)."""


class Progress:
    """One progress line rewritten in place on a terminal; elsewhere only finished steps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last = ""

    def show(self, text: str, *, tick: bool = False) -> None:
        """``tick``: a timer update, shown only where it can be rewritten in place."""
        if self._tty:
            self._stream.write("\r\033[K" + text)
            self._stream.flush()
            self._last = text
        elif not tick:
            self._stream.write(text + "\n")
            self._stream.flush()

    def done(self, text: str) -> None:
        if self._tty and self._last:
            self._stream.write("\r\033[K")
        self._stream.write(text + "\n")
        self._stream.flush()
        self._last = ""


async def _create_other(system: System, document: dict[str, Any], progress: Progress) -> None:
    """A document that is not a pod (a PriorityClass, a claim or a claim template): created,
    nothing to wait for."""
    what = f"{document.get('kind')} {(document.get('metadata') or {}).get('name')}"
    try:
        await system.create(document)
    except StatusError as error:
        progress.done(f"{what}: refused: {error.message}")
        return
    progress.done(f"{what}: created")


async def _submit(
    system: System, documents: Sequence[dict[str, Any]], progress: Progress
) -> dict[str, str]:
    """Create each document in order, and wait until each pod has an outcome; returns admission
    refusals by pod key.

    A pod evicted by a later one's preemption is gone: :func:`settled` reads pods that exist,
    so the wait for its preemptor ends once the preemptor itself is Running."""
    rejections: dict[str, str] = {}
    pods = pods_of(documents)
    number = 0
    for pod in documents:
        if pod.get("kind", "Pod") != "Pod":
            await _create_other(system, pod, progress)
            continue
        number += 1
        key = pod_key(pod)
        label = f"[{number}/{len(pods)}] {key}"
        progress.show(f"{label}: submitting", tick=True)
        try:
            await system.create(pod)
        except StatusError as error:
            rejections[key] = error.message
            progress.done(f"{label}: refused at admission")
            continue

        def report(state: ClusterState, elapsed: float, label: str = label, key: str = key) -> None:
            found = next((p for p in state.pods if pod_key(p) == key), None)
            where = "admitted" if found is None else stage(state, found)
            progress.show(f"{label}: {where} ({elapsed:.1f} s)", tick=True)

        state = await system.wait_for(
            settled([key]), within=_POD_TIMEOUT, what=f"an outcome for {key}", progress=report
        )
        found = state.pod(*key.split("/", 1))
        result = "?" if found is None else outcome(state, found).value
        node = "" if found is None else PodView(found).node_name
        evicted = [seen.victim for seen in preemptions(state) if seen.preemptor == key]
        took = f", evicting {', '.join(evicted)}" if evicted else ""
        progress.done(f"{label}: {result}{' on ' + node if node else ''}{took}")
    return rejections


def _evaluate(
    state: ClusterState, pods: Sequence[dict[str, Any]], rejections: dict[str, str]
) -> list[ExpectationResult]:
    results = []
    for pod in pods:
        want = expectation_of(pod)
        if want is not None:
            results.append(evaluate(state, want, rejection=rejections.get(want.key)))
    return results


def _gpu_events_recorded(state: ClusterState) -> bool:
    """Every preemption has the extender's PreemptedForGPU Event too (what its victim freed)."""
    return all(seen.frees for seen in preemptions(state))


async def run_examples(
    system: System, documents: Sequence[dict[str, Any]], *, examples: Path, out: TextIO
) -> bool:
    """Submit the examples, print the report; whether every expectation and invariant held."""
    pods = pods_of(documents)
    print(f"submitting {len(pods)} example pods from {examples}", file=out)
    progress = Progress(out)
    rejections = await _submit(system, documents, progress)
    # Pods placed later may have woken an unschedulable one (a bind's node lock changes the
    # node): report once every pod has settled again, as kube-scheduler left them.
    keys = [pod_key(pod) for pod in pods if pod_key(pod) not in rejections]
    state = await system.wait_for(
        settled(keys), within=_POD_TIMEOUT, what="every example pod settles"
    )
    # The report names the GPU a victim freed from the extender's Event; a missing one is
    # reported as such, not waited for without end.
    with contextlib.suppress(TimeoutError):
        state = await system.wait_for(
            lambda s: settled(keys)(s) and _gpu_events_recorded(s),
            within=_EVENTS_TIMEOUT,
            what="the extender's PreemptedForGPU events",
        )
    usage, missed = await system.wait_monitors(within=_MONITOR_TIMEOUT)
    results = _evaluate(state, pods, rejections)
    out.write(
        render_report(
            state,
            results=results,
            rejections=rejections,
            usage=usage,
            preemption_mode=PREEMPTION_MODE,
        )
    )
    violations = check_all(state)
    print(f"Invariants: {len(violations)} violations", file=out)
    for violation in violations:
        print(f"  {violation}", file=out)
    print(
        f"vGPU monitors: {len(usage.containers)} containers reported, "
        f"{len(missed)} not as allocated",
        file=out,
    )
    for problem in missed:
        print(f"  {problem}", file=out)
    return all(r.ok for r in results) and not violations and not missed
