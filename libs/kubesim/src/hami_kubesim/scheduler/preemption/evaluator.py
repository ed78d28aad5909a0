"""``DefaultPreemption.PostFilter``: run after a scheduling cycle found no node (a ``FitError``).

From ``pkg/scheduler/framework/preemption/preemption.go`` (``Evaluator.Preempt``,
``findCandidates``, ``callExtenders``, ``SelectCandidate``, ``prepareCandidate``) and
``pkg/scheduler/extender.go`` (``ProcessPreemption``, ``convertToVictims``,
``convertPodUIDToPod``), synchronous (``prepareCandidate``, not the async variant):

1. the preemptor is read again from the cache; ``PodEligibleToPreemptOthers`` may refuse;
2. the dry run over the Unschedulable nodes (:mod:`.candidates`, :mod:`.selection`);
   no candidate → preemption's own ``FitError`` and the nomination is cleared; errors and no
   candidate → the error, the nomination kept;
3. each preempt-capable extender interested in the pod gets the candidates (``preempt`` verb) and
   its reply replaces them; an error ends the preemption unless the extender is ignorable;
4. the pick, then each victim gets ``DisruptionTarget`` and a graceful DELETE
   (:func:`~hami_kubesim.scheduler.victims.preempt_victim`), and lower-priority pods nominated to
   that node lose their nomination;
5. the result nominates the node; the cycle writes ``status.nominatedNodeName``.

The message of a failed preemption is prefixed ``preemption: `` and ends the ``FailedScheduling``
text (``FitError.Error``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from hami_kube.errors import KubeError
from hami_kube.events import EventRecorder
from hami_kube.objects import PodView
from hami_kube.rest import KubeClient
from hami_kube.store import Store
from hami_kube.timefmt import utc_now
from hami_kubesim.scheduler.config import Profile, SchedulerConfig
from hami_kubesim.scheduler.extender import HttpExtender
from hami_kubesim.scheduler.extender_wire import ExtenderError, MetaVictims
from hami_kubesim.scheduler.nominator import Nominator
from hami_kubesim.scheduler.preemption.candidates import (
    Candidate,
    ZeroVictims,
    aggregate_errors,
    checked_extender_victims,
    dry_run_preemption,
    offset_and_num_candidates,
    pick_one_node,
)
from hami_kubesim.scheduler.preemption.record import PreemptionLog, PreemptionRecord
from hami_kubesim.scheduler.preemption.selection import (
    PlacedPod,
    Victims,
    ineligible_reason,
    select_victims_on_node,
)
from hami_kubesim.scheduler.statuses import (
    PREEMPTION_NOT_HELPFUL,
    Code,
    NodeStatus,
    fit_error_message,
)
from hami_kubesim.scheduler.victims import clear_nomination, preempt_victim

__all__ = ["NodeSnapshot", "PostFilterResult", "Preemption"]

log = structlog.get_logger(__name__)

_NO_CANDIDATE: Final = "no candidate node for preemption"


@dataclass(frozen=True, slots=True)
class NodeSnapshot:
    """The cycle's view of the cluster: node names in order, the pods on each, and the
    preemptor's in-tree filters on a node holding exactly the given pods."""

    nodes: tuple[str, ...]
    pods: Mapping[str, tuple[PlacedPod, ...]]
    check: Callable[[str, Sequence[PlacedPod]], NodeStatus | None]


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """``message``: ``preemption: ...`` (empty on success); ``nominate``: the node to nominate,
    ``""`` to clear the nomination, ``None`` to leave it."""

    message: str = ""
    nominate: str | None = None


class _Abort(Exception):  # noqa: N818 - internal control flow
    pass


class Preemption:
    """One scheduling loop's ``DefaultPreemption`` (see the module doc)."""

    def __init__(
        self,
        config: SchedulerConfig,
        *,
        client: KubeClient,
        events: EventRecorder,
        extenders: Sequence[HttpExtender],
        pods: Store,
        budgets: Store | None,
        nominator: Nominator,
        rng: random.Random | None,
        nodes: Store | None = None,
        record: PreemptionLog | None = None,
    ) -> None:
        self._config = config
        self._client = client
        self._events = events
        self._extenders = list(extenders)
        self._pods = pods
        self._budgets = budgets
        self._nominator = nominator
        self._rng = rng
        self._nodes = nodes
        self._record = record

    async def post_filter(
        self,
        pod: PodView,
        profile: Profile,
        statuses: Mapping[str, NodeStatus],
        snapshot: NodeSnapshot,
    ) -> PostFilterResult:
        """``DefaultPreemption.PostFilter`` after ``statuses`` rejected every node."""
        try:
            raw = self._pods.get(pod.key)
            if raw is None:
                raise _Abort(f'pod "{pod.name}" not found')
            pod = PodView(raw)
            nominated = pod.nominated_node_name or self._nominator.node_of(pod.key)
            absent = NodeStatus(Code.UNRESOLVABLE, ())
            refused = ineligible_reason(
                pod,
                nominated,
                statuses.get(nominated, absent).code,
                [placed.pod for placed in snapshot.pods.get(nominated, ())],
            )
            if refused:
                raise _Abort(refused)
            candidates, dry_statuses = self._find_candidates(pod, profile, statuses, snapshot)
            if not candidates:
                fit_error = fit_error_message(
                    len(snapshot.nodes), dry_statuses, absent_reasons=(PREEMPTION_NOT_HELPFUL,)
                )
                return PostFilterResult(f"preemption: {fit_error}", nominate="")
            victims = await self._call_extenders(pod, candidates, snapshot)
            if self._config.preemption_behaviour != "1.37":
                victims = {node: v for node, v in victims.items() if v.pods}
            if not victims:
                raise _Abort(_NO_CANDIDATE)
            node = next(iter(victims)) if len(victims) == 1 else pick_one_node(victims, utc_now())
            await self._prepare(pod, node, victims[node])
            log.info(
                "preempting",
                pod=pod.key,
                node=node,
                victims=[v.key for v in victims[node].pods],
                terminating=[v.key for v in victims[node].pods if v.deleting],
                nominated=nominated,
                nominated_code=statuses.get(nominated, absent).code.name if nominated else "",
            )
            self._remember(pod, node, victims[node], snapshot)
            return PostFilterResult(nominate=node)
        except _Abort as abort:
            return PostFilterResult(f"preemption: {abort}")

    def _find_candidates(
        self,
        pod: PodView,
        profile: Profile,
        statuses: Mapping[str, NodeStatus],
        snapshot: NodeSnapshot,
    ) -> tuple[tuple[Candidate, ...], dict[str, NodeStatus]]:
        """``findCandidates``: the dry run over the Unschedulable nodes (none: no candidate and
        no status)."""
        potential = [
            node
            for node in snapshot.nodes
            if node in statuses and statuses[node].code is Code.UNSCHEDULABLE
        ]
        if not potential:
            return (), {}
        offset, wanted = offset_and_num_candidates(
            len(potential),
            percentage=profile.min_candidate_nodes_percentage,
            absolute=profile.min_candidate_nodes_absolute,
            rng=self._rng,
        )
        budgets = [] if self._budgets is None else list(self._budgets.objects())
        now = utc_now()
        dry = dry_run_preemption(
            potential,
            offset,
            wanted,
            lambda node: select_victims_on_node(
                pod,
                snapshot.pods.get(node, ()),
                lambda pods: snapshot.check(node, pods),
                budgets,
                now,
            ),
            zero_victims=self._zero_victims(pod),
        )
        if dry.errors and not dry.candidates:
            raise _Abort(aggregate_errors(dry.errors))
        return dry.candidates, dry.statuses

    def _zero_victims(self, pod: PodView) -> ZeroVictims:
        if self._config.preemption_behaviour == "1.37":
            return "error"
        if any(e.supports_preemption and e.is_interested(pod.raw) for e in self._extenders):
            return "keep"
        return "unresolvable"

    async def _call_extenders(
        self, pod: PodView, candidates: Sequence[Candidate], snapshot: NodeSnapshot
    ) -> dict[str, Victims]:
        victims = {c.node: c.victims for c in candidates}
        for extender in self._extenders:
            if not extender.supports_preemption or not extender.is_interested(pod.raw):
                continue
            sent = {
                node: ([p.raw for p in v.pods], v.num_pdb_violations) for node, v in victims.items()
            }
            try:
                reply = await extender.preempt(pod.raw, sent)
                returned = _resolve(reply, snapshot, extender.url)
            except ExtenderError as exc:
                if extender.config.ignorable:
                    log.warning(
                        "ignorable extender preempt failed", extender=extender.url, error=str(exc)
                    )
                    continue
                raise _Abort(str(exc)) from exc
            checked = checked_extender_victims(
                returned,
                victims,
                ignorable=extender.config.ignorable,
                keep_empty=self._config.preemption_behaviour != "1.37",
            )
            if isinstance(checked, str):
                raise _Abort(checked)
            victims = checked
            if not victims:
                break
        return victims

    async def _prepare(self, pod: PodView, node: str, victims: Victims) -> None:
        """``prepareCandidate``: the victims' writes, then lower-priority nominations cleared."""
        for victim in victims.pods:
            try:
                await preempt_victim(self._client, self._events, victim, preemptor=pod, node=node)
            except KubeError as exc:
                raise _Abort(str(exc)) from exc
        for nomination in self._nominator.for_node(node):
            if nomination.pod.priority >= pod.priority:
                continue
            self._nominator.delete(nomination.pod.key)
            try:
                await clear_nomination(self._client, nomination.pod)
            except KubeError as exc:  # not critical, as upstream
                log.warning(
                    "cannot clear nominatedNodeName", pod=nomination.pod.key, error=str(exc)
                )

    def _remember(self, pod: PodView, node: str, victims: Victims, snapshot: NodeSnapshot) -> None:
        """Keep what this preemption did, with the objects as the caches hold them now (the
        victims' allocation annotations are newer there than in the snapshot)."""
        if self._record is None:
            return

        def latest(view: PodView) -> Mapping[str, Any]:
            return self._pods.get(view.key) or view.raw

        self._record.add(
            PreemptionRecord(
                at=datetime.now(UTC),
                preemptor=pod.raw,
                node=node,
                node_object=None if self._nodes is None else self._nodes.get(node),
                victims=tuple(latest(v) for v in victims.pods),
                on_node=tuple(latest(p.pod) for p in snapshot.pods.get(node, ())),
                nominated=tuple(latest(n.pod) for n in self._nominator.reserving_for(pod, node)),
            )
        )


def _resolve(
    reply: Mapping[str, MetaVictims], snapshot: NodeSnapshot, url: str
) -> dict[str, Victims]:
    """``convertToVictims``: UIDs back to the pods of the snapshot's node."""
    resolved: dict[str, Victims] = {}
    for node, meta in reply.items():
        if node not in snapshot.nodes:
            raise ExtenderError(f'nodeinfo not found for node name "{node}"')
        by_uid = {placed.pod.uid: placed.pod for placed in snapshot.pods.get(node, ())}
        pods = []
        for uid in meta.uids:
            if uid not in by_uid:
                raise ExtenderError(
                    f"extender: {url} claims to preempt pod (UID: &{{{uid}}}) on node: {node}, "
                    "but the pod is not found on that node"
                )
            pods.append(by_uid[uid])
        resolved[node] = Victims(tuple(pods), meta.num_pdb_violations)
    return resolved
