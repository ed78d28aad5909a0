"""What each pod holds, decided per UID, and which pods hold what on each node.

:class:`PodHoldings` is owned by :class:`~hami_scheduler.cache.view.SchedulerCache`.  What a
pod holds is decided per UID (:class:`PodRecord`) from three inputs:

* ``observed``: what its annotations say (from the watch);
* ``assumed``: a decision made here (by the filter, or by a bind deciding itself) whose
  Binding has not been seen yet — it counts at once, so two quick filters cannot hand out the
  same capacity, and is dropped by :meth:`PodHoldings.forget` when the bind fails or replaced
  by ``observed`` once the watch shows the pod bound with a decision (its own, or the one
  another replica bound it with).  Once its Binding succeeded (:meth:`PodHoldings.bound`) only
  the watch can confirm it — and a watch that was down while the pod was bound and deleted
  again never will: the re-list after it finds the pod in neither its store nor the list, so no
  event comes.  :meth:`PodHoldings.forget_unlisted` settles that after each re-list;
* ``released``: observed allocations the scheduler has given up: they stop counting although
  the pod still carries their annotations.

What counts (``effective``) is kept per node too, for the rebuilds and reads that need a node's
pods — among them the preempt verb, which reads each pod's priority and start time
(:meth:`PodHoldings.residents`); a pod known only by a decision assumed here has neither
yet.  Every change of what counts is handed to ``on_move`` — the cache moves the node's usage,
the namespace's quota ledger and the NICs with it — and costs O(devices of the pod).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field

from hami_scheduler.cache.pods import AllocationKey, Holding, PodFacts

__all__ = ["BoundDecision", "Move", "PodHoldings", "PodProblem", "PodRecord", "Resident"]

PodProblem = Callable[[str, str, str], None]
"""``(namespace/name, uid, problem)`` — a pod's device list could not be decoded."""

Move = Callable[[str, Holding | None, Holding | None], None]
"""``(uid, new, old)`` — what the pod holds changed from ``old`` to ``new`` (``None``: nothing)."""


@dataclass(slots=True)
class PodRecord:
    """One pod's holdings (see the module docstring)."""

    namespace: str
    name: str
    observed: Holding | None = None
    assumed: Holding | None = None
    released: frozenset[AllocationKey] = frozenset()
    effective: Holding | None = None
    problems: tuple[str, ...] = ()
    priority: int | None = None
    """``spec.priority`` once the pod was seen (``None``: known only by an assumed decision)."""
    started: float | None = None
    terminating: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BoundDecision:
    """An assumption whose Binding succeeded and that the pod watch has not confirmed yet."""

    key: AllocationKey
    namespace: str
    name: str

    @property
    def pod(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Resident:
    """A pod held on a node, as the preempt verb ranks it."""

    uid: str
    namespace: str
    name: str
    holding: Holding
    priority: int | None
    """``None``: the pod was never seen, only assumed here; it cannot be ranked."""
    started: float | None
    terminating: bool = False
    """Being deleted: it holds its devices until it is gone."""
    labels: Mapping[str, str] = field(default_factory=dict)


class PodHoldings:
    """Pod records by UID, and per node what its pods hold (see the module docstring)."""

    def __init__(self, on_move: Move, *, on_problem: PodProblem | None = None) -> None:
        self._on_move = on_move
        self._on_problem = on_problem
        self._by_node: dict[str, dict[str, Holding]] = {}
        self._pods: dict[str, PodRecord] = {}
        # uid → the assumption whose Binding succeeded, until the watch confirms (or it goes).
        self._bound: dict[str, BoundDecision] = {}

    @property
    def count(self) -> int:
        return len(self._pods)

    def assumed_count(self) -> int:
        return sum(1 for record in self._pods.values() if record.assumed is not None)

    def on_node(self, node: str) -> Mapping[str, Holding]:
        """UID → what counts for each pod held on ``node``."""
        return self._by_node.get(node, {})

    def residents(self, node: str) -> list[Resident]:
        """The pods held on ``node``, with what ranks them; O(pods on the node)."""
        found: list[Resident] = []
        for uid, holding in self._by_node.get(node, {}).items():
            record = self._pods.get(uid)
            if record is not None:
                found.append(
                    Resident(
                        uid,
                        record.namespace,
                        record.name,
                        holding,
                        record.priority,
                        record.started,
                        record.terminating,
                        record.labels,
                    )
                )
        return found

    def holders_of(self, node: str, words: Collection[str]) -> list[tuple[str, str]]:
        """``(namespace, name)`` of the pods held on ``node`` that were given devices of any of
        the vendors ``words``."""
        found: list[tuple[str, str]] = []
        for uid, holding in self._by_node.get(node, {}).items():
            record = self._pods.get(uid)
            if record is not None and not set(holding.key[1::2]).isdisjoint(words):
                found.append((record.namespace, record.name))
        return found

    def observe(self, facts: PodFacts) -> None:
        """What a Pod object (added or changed) says it holds."""
        if not facts.uid:
            return
        record = self._pods.get(facts.uid)
        if record is None:
            if facts.holding is None:
                return
            record = self._pods[facts.uid] = PodRecord(facts.namespace, facts.name)
        self._note_problems(facts.uid, record, facts.problems)
        record.observed = facts.holding
        record.priority, record.started = facts.priority, facts.started
        record.terminating, record.labels = facts.terminating, facts.labels
        assumed = record.assumed
        if facts.terminal:
            record.assumed, record.released = None, frozenset()
        elif assumed is not None and facts.holding is not None:
            # The watch shows bound pods only, each with the decision its Binding carried:
            # whatever it carries is what it holds (the same decision, or another replica's).
            record.assumed = None
            record.released = record.released - {assumed.key}
        self._settle(facts.uid, record)

    def drop(self, uid: str) -> None:
        """The pod is gone: whatever it held is released."""
        record = self._pods.pop(uid, None)
        self._bound.pop(uid, None)
        if record is not None:
            self._hold(uid, None, record.effective)

    def _note_problems(self, uid: str, record: PodRecord, problems: tuple[str, ...]) -> None:
        if problems == record.problems:
            return
        fresh = [problem for problem in problems if problem not in record.problems]
        record.problems = problems
        if self._on_problem is not None:
            for problem in fresh:
                self._on_problem(f"{record.namespace}/{record.name}", uid, problem)

    def assume(self, uid: str, name: str, holding: Holding) -> None:
        """Count a decision at once, before its annotations are written."""
        record = self._pods.get(uid)
        if record is None:
            record = self._pods[uid] = PodRecord(holding.namespace, name)
        observed = record.observed
        if observed is not None and observed.key == holding.key:
            # The pod already carries exactly this allocation (decided again, same devices):
            # nothing is pending, and the rewrite may not even produce a watch event.
            record.assumed = None
            record.released = record.released - {holding.key}
        else:
            record.assumed = holding
        self._settle(uid, record)

    def forget(self, uid: str, key: AllocationKey) -> None:
        """Drop the assumption ``key`` (its bind failed)."""
        record = self._pods.get(uid)
        if record is not None and record.assumed is not None and record.assumed.key == key:
            record.assumed = None
            self._settle(uid, record)

    def bound(self, uid: str, key: AllocationKey) -> None:
        """The Binding carrying the assumption ``key`` succeeded: only the pod watch (or
        :meth:`forget_unlisted`) settles it now.  Nothing when the watch was quicker."""
        record = self._pods.get(uid)
        if record is not None and record.assumed is not None and record.assumed.key == key:
            self._bound[uid] = BoundDecision(key, record.namespace, record.name)

    def bound_unconfirmed(self) -> dict[str, BoundDecision]:
        """uid → each assumption bound and not yet confirmed by the watch (a copy)."""
        return dict(self._bound)

    def unconfirmed(self, uid: str) -> BoundDecision | None:
        """The pod's assumption, when it is bound and not yet confirmed by the watch."""
        return self._bound.get(uid)

    def forget_unlisted(
        self, before: Mapping[str, BoundDecision], listed: Collection[str]
    ) -> list[tuple[str, str]]:
        """After a list of the bound pods: forget each assumption of ``before`` (what
        :meth:`bound_unconfirmed` said as the list began) still unconfirmed whose pod the list
        (``listed``: UIDs) lacks.  Its Binding happened before the list's snapshot, so the pod
        was bound then: absent, it has been deleted, and the watch — which goes on from the
        list — will never tell.  A decision assumed but not bound yet (the filter's, or a bind
        whose Binding was still on the wire) is not in ``before`` and stays.  Returns ``(uid,
        namespace/name)`` of each one forgotten; O(entries of ``before``)."""
        gone: list[tuple[str, str]] = []
        for uid, decision in before.items():
            if uid in listed or self._bound.get(uid) != decision:
                continue
            gone.append((uid, decision.pod))
            self.forget(uid, decision.key)
        return gone

    def release(self, uid: str) -> None:
        """Stop counting what the pod holds or was assumed to hold (filtered again, or its
        bind failed); a later, different allocation counts again.

        Only an observed allocation is remembered as released: an assumed one was never
        written before its Binding, so a later event carrying it means the Binding did
        happen (e.g. it answered with an error after all), and then it counts."""
        record = self._pods.get(uid)
        if record is None:
            return
        if record.observed is not None:
            record.released = record.released | {record.observed.key}
        record.assumed = None
        self._settle(uid, record)

    def holding(self, uid: str) -> Holding | None:
        record = self._pods.get(uid)
        return None if record is None else record.effective

    def holdings(self) -> Iterator[tuple[str, str, Holding]]:
        """``(uid, pod name, holding)`` for every pod holding devices."""
        for uid, record in list(self._pods.items()):
            if record.effective is not None:
                yield uid, record.name, record.effective

    def _settle(self, uid: str, record: PodRecord) -> None:
        observed = record.observed
        new = record.assumed
        if new is None and observed is not None and observed.key not in record.released:
            new = observed
        old = record.effective
        record.effective = new
        if old is not new:
            self._hold(uid, new, old)
        bound = self._bound.get(uid)
        if bound is not None and (record.assumed is None or record.assumed.key != bound.key):
            del self._bound[uid]  # confirmed, replaced or forgotten
        if record.observed is None and record.assumed is None and not record.released:
            # Released keys must outlive the holding: a late event may still carry them.
            del self._pods[uid]

    def _hold(self, uid: str, new: Holding | None, old: Holding | None) -> None:
        if (
            old is not None
            and new is not None
            and (old.node, old.namespace, old.usage, old.nics, old.mig)
            == (new.node, new.namespace, new.usage, new.nics, new.mig)
        ):
            return
        if old is not None:
            held = self._by_node.get(old.node)
            if held is not None:
                held.pop(uid, None)
                if not held:
                    del self._by_node[old.node]
        if new is not None:
            self._by_node.setdefault(new.node, {})[uid] = new
        self._on_move(uid, new, old)
