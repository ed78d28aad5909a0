"""Expected outcomes written on example pods, and whether they happened.

An example pod says what should become of it in ``demo.hami.io/*`` annotations:

``demo.hami.io/expect``
    ``placed`` (Running), ``unschedulable`` (Pending with a FailedScheduling reason),
    ``rejected`` (refused at admission) or ``preempted`` (gone, with kube-scheduler's
    ``Preempted`` Event on it: evicted for a pod of higher priority).
``demo.hami.io/expect-node``
    the node it must run on (``preempted``: the node it was evicted from).
``demo.hami.io/expect-preempted-by``
    with ``preempted``: the example pod (same namespace) it was evicted for, as the
    ``Preempted`` Event's preemptor UID or the extender's ``PreemptedForGPU`` Event names it.
``demo.hami.io/expect-gpu-model``
    a text every GPU it got has in its registered type (``A100``), case-insensitive.
``demo.hami.io/expect-gpu``
    a GPU UUID it must have got.
``demo.hami.io/expect-gpus-one-of``
    GPU sets separated by ``;``, each a comma-separated list of UUIDs: the GPUs it got must be
    exactly one of them (e.g. the NVLinked pairs of a node, for topology-aware placement).
``demo.hami.io/expect-same-gpu-as`` / ``demo.hami.io/expect-other-gpu-than``
    another example pod (same namespace) it must share a GPU with / must share none with (a
    pod using DRA claims has the GPUs its claims' CDI env names).
``demo.hami.io/expect-reason``
    a text the FailedScheduling message (or the admission refusal) must contain.
``demo.hami.io/expect-mig-profiles``
    the MIG profiles its instances must have, comma-separated in container and device order
    (``1g.5gb,3g.20gb``); each instance must also have been created (a MIG UUID recorded).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kubesim.stack.checks.dra import dra_container_devices
from hami_kubesim.stack.checks.mig import reservations_of
from hami_kubesim.stack.checks.preemptions import Preemption, preemptions
from hami_kubesim.stack.state import (
    ClusterState,
    Outcome,
    allocated_devices,
    failed_scheduling,
    node_devices,
    outcome,
)

__all__ = [
    "EXPECT",
    "EXPECT_PREFIX",
    "Expectation",
    "ExpectationResult",
    "evaluate",
    "expectation_of",
]

EXPECT_PREFIX: Final = "demo.hami.io/"
EXPECT: Final = EXPECT_PREFIX + "expect"
_OUTCOMES: Final = frozenset({"placed", "unschedulable", "rejected", "preempted"})


@dataclass(frozen=True, slots=True)
class Expectation:
    namespace: str
    name: str
    outcome: str
    node: str = ""
    gpu_model: str = ""
    gpu: str = ""
    same_gpu_as: str = ""
    other_gpu_than: str = ""
    reason: str = ""
    gpus_one_of: tuple[frozenset[str], ...] = ()
    mig_profiles: tuple[str, ...] = ()
    preempted_by: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ExpectationResult:
    expectation: Expectation
    ok: bool
    detail: str
    """What happened, and what was wrong when ``ok`` is false."""


def expectation_of(pod: Mapping[str, Any]) -> Expectation | None:
    """The expectation an example pod carries (None when it has none)."""
    view = PodView(pod)
    annotations = view.annotations

    def get(suffix: str) -> str:
        return str(annotations.get(EXPECT_PREFIX + suffix, "") or "")

    wanted = get("expect")
    if not wanted:
        return None
    if wanted not in _OUTCOMES:
        raise ValueError(f"{EXPECT}: {wanted!r} is not one of {sorted(_OUTCOMES)}")
    return Expectation(
        namespace=view.namespace or "default",
        name=view.name,
        outcome=wanted,
        node=get("expect-node"),
        gpu_model=get("expect-gpu-model"),
        gpu=get("expect-gpu"),
        same_gpu_as=get("expect-same-gpu-as"),
        other_gpu_than=get("expect-other-gpu-than"),
        reason=get("expect-reason"),
        gpus_one_of=_gpu_sets(get("expect-gpus-one-of")),
        mig_profiles=tuple(p.strip() for p in get("expect-mig-profiles").split(",") if p.strip()),
        preempted_by=get("expect-preempted-by"),
    )


def _gpu_sets(text: str) -> tuple[frozenset[str], ...]:
    sets = (frozenset(u.strip() for u in part.split(",") if u.strip()) for part in text.split(";"))
    return tuple(s for s in sets if s)


def _gpus(pod: Mapping[str, Any] | None) -> set[str]:
    """The GPUs the scheduler allocated to the pod, and those its DRA claims' CDI env names."""
    if pod is None:
        return set()
    allocated = {d.uuid for container in allocated_devices(pod) or () for d in container}
    claimed = {uuid for _, devices in dra_container_devices(pod) for uuid, _ in devices}
    return allocated | claimed


def _placed_problems(state: ClusterState, want: Expectation, pod: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    node = PodView(pod).node_name
    gpus = _gpus(pod)
    if want.node and node != want.node:
        problems.append(f"expected node {want.node}")
    if want.gpu and want.gpu not in gpus:
        problems.append(f"expected GPU {want.gpu}")
    if want.gpus_one_of and gpus not in want.gpus_one_of:
        problems.append(f"expected one of the GPU sets {[sorted(s) for s in want.gpus_one_of]}")
    if want.gpu_model:
        registered = state.node(node)
        types = {d.id: d.type for d in (node_devices(registered) or ())} if registered else {}
        wrong = sorted(
            types.get(g, "?")
            for g in gpus
            if want.gpu_model.lower() not in types.get(g, "").lower()
        )
        if wrong or not gpus:
            problems.append(f"expected only {want.gpu_model} GPUs, got {wrong or 'none'}")
    if want.same_gpu_as:
        other = state.pod(want.namespace, want.same_gpu_as)
        if not gpus & _gpus(other):
            problems.append(f"expected to share a GPU with {want.same_gpu_as}")
    if want.other_gpu_than:
        other = state.pod(want.namespace, want.other_gpu_than)
        if gpus & _gpus(other):
            problems.append(f"expected no GPU in common with {want.other_gpu_than}")
    if want.mig_profiles:
        reservations = reservations_of(pod) or ()
        profiles = tuple(r.profile for r in reservations)
        if profiles != want.mig_profiles:
            wanted = list(want.mig_profiles)
            problems.append(f"expected MIG profiles {wanted}, got {list(profiles)}")
        elif any(r.runtime is None for r in reservations):
            problems.append("a MIG instance was not created")
    return problems


def _preempted(state: ClusterState, want: Expectation) -> ExpectationResult:
    pod = state.pod(want.namespace, want.name)
    if pod is not None:
        return ExpectationResult(want, False, f"expected preempted, is {outcome(state, pod).value}")
    found = [p for p in preemptions(state) if p.victim == want.key]
    if not found:
        return ExpectationResult(want, False, "gone, but no Preempted event names it")
    seen: Preemption = found[-1]
    problems = []
    if want.node and seen.node != want.node:
        problems.append(f"expected node {want.node}")
    if want.preempted_by:
        by = f"{want.namespace}/{want.preempted_by}"
        preemptor = state.pod(want.namespace, want.preempted_by)
        uid = PodView(preemptor).uid if preemptor is not None else ""
        if by != seen.extender_preemptor and not (uid and uid == seen.preemptor_uid):
            problems.append(f"expected preempted by {want.preempted_by}")
    detail = f"preempted by {seen.preemptor} on {seen.node}"
    return ExpectationResult(
        want, not problems, detail + ("; " + "; ".join(problems) if problems else "")
    )


def evaluate(
    state: ClusterState, want: Expectation, *, rejection: str | None = None
) -> ExpectationResult:
    """Whether ``want`` happened; ``rejection`` is the admission refusal when the create
    failed."""
    if rejection is not None:
        if want.outcome != "rejected":
            return ExpectationResult(want, False, f"rejected at admission: {rejection}")
        if want.reason and want.reason not in rejection:
            return ExpectationResult(want, False, f"rejected, but not for {want.reason!r}")
        return ExpectationResult(want, True, f"rejected: {rejection}")
    if want.outcome == "preempted":
        return _preempted(state, want)
    pod = state.pod(want.namespace, want.name)
    if pod is None:
        return ExpectationResult(want, False, "pod not found")
    result = outcome(state, pod)
    if want.outcome == "placed":
        if result is not Outcome.RUNNING:
            return ExpectationResult(want, False, f"expected Running, is {result.value}")
        problems = _placed_problems(state, want, pod)
        detail = f"Running on {PodView(pod).node_name}"
        return ExpectationResult(
            want, not problems, detail + ("; " + "; ".join(problems) if problems else "")
        )
    if want.outcome == "unschedulable":
        if result is not Outcome.UNSCHEDULABLE:
            return ExpectationResult(want, False, f"expected Unschedulable, is {result.value}")
        message = (failed_scheduling(state, pod) or ("",))[-1]
        if want.reason and want.reason not in message:
            return ExpectationResult(want, False, f"unschedulable, but not for {want.reason!r}")
        return ExpectationResult(want, True, "unschedulable")
    return ExpectationResult(want, False, f"expected rejection at admission, is {result.value}")
