"""Decisions between the filter and the bind: kept in memory, written only by the Binding.

The filter writes nothing (single mode): it assumes its decision in the cache and leaves a
:class:`PendingBind` here — the pod as kube-scheduler sent it and the
:class:`~hami_scheduler.selection.plan.DecisionRecord` (the annotations the Binding will
carry).  ``--filter-mode all`` leaves the pod without a decision (bind decides), so its bind
need not read the pod either.  Bind takes the entry; without one (the extender restarted
between filter and bind, or another replica filtered) it reads the pod and decides itself.

:class:`PendingBinds` keeps the entry and the cache's assumption together: :meth:`drop`
forgets both; an entry whose pod the watch shows bound (by another replica, say) simply goes
(:meth:`PendingBinds.pod_event`).  An entry whose bind never comes (the pod deleted while
unbound — the pod watch only sees bound pods — or kube-scheduler giving up after the filter)
would hold its devices for good, so :meth:`PendingBinds.sweep` (every ``--handshake-interval``,
from :mod:`hami_scheduler.bind.upkeep`, on every replica: a replica that lost the lead keeps what it
had) reads the pods whose entries are older than ``max_age_s``: gone or replaced → dropped;
bound → the entry goes, and the assumption too unless the pod carries the decision (the watch
confirms it then); still unbound → kept, looked at again a ``max_age_s`` later.  Cost: one GET
per stale entry per sweep, none in the nominal flow.

Past the Binding, the decision waits for the pod watch alone.  A pod bound and deleted while
that watch was down is settled by the watch's re-list
(:meth:`~hami_scheduler.cache.view.SchedulerCache.forget_unlisted`) when the Binding succeeded
before the list began; one whose answer came while the list was under way is left to the same
sweep: a decision bound and unconfirmed for ``max_age_s`` (counted from the first sweep that
sees it) costs one GET — gone, replaced, or not bound with it → forgotten; bound with it → the
watch is only late: looked at again a ``max_age_s`` later.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import structlog

from hami_kube.errors import KubeError, NotFoundError
from hami_kube.objects import PodView
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_scheduler.cache.holdings import BoundDecision
from hami_scheduler.cache.pods import read_pod
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.selection.plan import DecisionRecord

__all__ = ["DEFAULT_MAX_AGE_S", "PendingBind", "PendingBinds"]

log = structlog.get_logger("hami_scheduler")

DEFAULT_MAX_AGE_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class PendingBind:
    """A filtered pod waiting for its bind."""

    pod: PodView
    record: DecisionRecord | None
    """The decision assumed in the cache (single mode); ``None``: decided at bind."""
    since: float


class PendingBinds:
    """uid → :class:`PendingBind`, in step with the cache's assumptions."""

    def __init__(
        self,
        cache: SchedulerCache,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cache = cache
        self._max_age_s = max_age_s
        self._clock = clock
        self._entries: dict[str, PendingBind] = {}
        # uid → a bound, unconfirmed decision and when a sweep first saw it so.
        self._bound: dict[str, tuple[BoundDecision, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, pod: PodView, record: DecisionRecord | None) -> None:
        """Remember ``pod``'s decision (already assumed in the cache by the caller)."""
        self._entries[pod.uid] = PendingBind(pod, record, self._clock())

    def take(self, uid: str) -> PendingBind | None:
        """The entry for the bind of ``uid``; its assumption stays in the cache."""
        return self._entries.pop(uid, None)

    def pod_event(self, obj: JsonObject, *, deleted: bool) -> None:
        """The pod watch (bound pods only) shows this pod: its bind happened, here or on
        another replica; the cache takes what it carries from the watch."""
        if self._entries:
            self._entries.pop(PodView(obj).uid, None)

    def node_event(self, obj: JsonObject, *, deleted: bool) -> None:
        """Nodes do not concern pending binds."""

    def drop(self, uid: str) -> None:
        """Forget the entry and the assumption it stands for."""
        entry = self._entries.pop(uid, None)
        if entry is not None and entry.record is not None:
            self._cache.forget(uid, entry.record.holding.key)

    async def sweep(self, client: KubeClient) -> int:
        """Look at entries older than ``max_age_s`` (see the module docstring); returns how
        many were dropped (bound decisions forgotten included).  API errors keep the entry for
        the next sweep."""
        return await self._sweep_filtered(client) + await self._sweep_bound(client)

    async def _sweep_filtered(self, client: KubeClient) -> int:
        now = self._clock()
        stale = [e for e in self._entries.values() if now - e.since >= self._max_age_s]
        dropped = 0
        for entry in stale:
            uid = entry.pod.uid
            try:
                found = PodView(
                    await client.get(PODS, entry.pod.name, namespace=entry.pod.namespace)
                )
            except NotFoundError:
                found = None
            except KubeError as exc:
                log.info("pending_bind_check_failed", pod=entry.pod.key, error=str(exc))
                continue
            if self._entries.get(uid) is not entry:
                continue  # bound or filtered again meanwhile
            if found is not None and found.uid == uid and not found.node_name:
                self._entries[uid] = PendingBind(entry.pod, entry.record, self._clock())
                continue
            if found is not None and found.uid == uid and entry.record is not None:
                holding = read_pod(found.raw, self._cache.vendors).holding
                if holding is not None and holding.key == entry.record.holding.key:
                    del self._entries[uid]  # bound with it: the watch confirms the assumption
                    continue
            self.drop(uid)
            dropped += 1
            log.info("pending_bind_dropped", pod=entry.pod.key, uid=uid)
        return dropped

    async def _sweep_bound(self, client: KubeClient) -> int:
        now = self._clock()
        seen: dict[str, tuple[BoundDecision, float]] = {}
        for uid, decision in self._cache.bound_unconfirmed().items():
            known = self._bound.get(uid)
            seen[uid] = known if known is not None and known[0] == decision else (decision, now)
        self._bound = seen
        forgotten = 0
        for uid, (decision, since) in list(seen.items()):
            if now - since < self._max_age_s:
                continue
            try:
                found = PodView(await client.get(PODS, decision.name, namespace=decision.namespace))
            except NotFoundError:
                found = None
            except KubeError as exc:
                log.info("bound_decision_check_failed", pod=decision.pod, error=str(exc))
                continue
            if self._cache.unconfirmed(uid) != decision:
                continue  # confirmed or dropped meanwhile
            reason = self._unbound(found, uid, decision)
            if reason is None:
                self._bound[uid] = (decision, self._clock())  # bound with it: the watch is late
                continue
            self._cache.forget(uid, decision.key)
            self._bound.pop(uid, None)
            forgotten += 1
            log.info("assumption_forgotten", pod=decision.pod, uid=uid, reason=reason)
        return forgotten

    def _unbound(self, found: PodView | None, uid: str, decision: BoundDecision) -> str | None:
        """Why ``decision`` no longer stands for the pod read (``None``: bound with it)."""
        if found is None:
            return "gone"
        if found.uid != uid:
            return "replaced"
        holding = read_pod(found.raw, self._cache.vendors).holding
        if found.node_name and holding is not None and holding.key == decision.key:
            return None
        return "not bound with it"
