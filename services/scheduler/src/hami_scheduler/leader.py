"""Who may decide: leadership on a Lease, in one of three ways.

* :class:`AlwaysLeader` — no ``--leader-elect``: this replica always leads (HAMi's dummy).
* :class:`LeaseFollower` — ``--leader-elect-mode follow`` (HAMi's way): kube-scheduler, in the
  same pod, campaigns on the Lease and calls the extender at ``127.0.0.1``; this replica leads
  while the holder is itself — exactly its identity, or ``<identity>_<suffix>`` as
  kube-scheduler writes it (HAMi tests a bare prefix, which also matches ``sched-10`` for
  ``sched-1``) — and the Lease keeps being renewed.  Expiry is judged like client-go's
  candidates do: from the *local* time the Lease was last seen to change, plus its
  ``leaseDurationSeconds``, never by comparing ``renewTime`` with the local clock.
* :class:`LeaseCampaign` — ``--leader-elect-mode campaign``: this replica campaigns itself
  through :class:`~hami_kube.leaderelection.LeaderElector`.

All three expose ``is_leader``, ``leader`` (the holder's identity) and ``run()``, and call
``on_change(is_leader)`` on every transition.

:func:`not_leader_message` is what the filter and the bind answer on a replica that does not
lead.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import structlog

from hami_kube.leaderelection import LeaderElectionConfig, LeaderElector, LeaseRecord
from hami_kube.reflector import EventHandlers, Reflector, ReflectorConfig
from hami_kube.resources import LEASES, JsonObject
from hami_kube.rest import KubeClient
from hami_scheduler.settings import LeaderElectSettings

__all__ = [
    "AlwaysLeader",
    "ChangeCallback",
    "LeaderView",
    "Leadership",
    "LeaseCampaign",
    "LeaseFollower",
    "holder_is",
    "not_leader_message",
]

log = structlog.get_logger("hami_scheduler")

ChangeCallback = Callable[[bool], Awaitable[None] | None]


class LeaderView(Protocol):
    """Who may decide: what the request paths and the handshake writer ask."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def leader(self) -> str:
        """The holder's identity (``""``: unknown)."""
        ...


def not_leader_message(leader: str) -> str:
    """What a request path answers when this replica does not lead (``leader``: the holder)."""
    return f"not the leader; leader is {leader or 'unknown'}"


class Leadership(LeaderView, Protocol):
    """A :class:`LeaderView` that keeps itself current while :meth:`run` runs."""

    async def run(self) -> None: ...


def holder_is(holder: str, identity: str) -> bool:
    """Whether a Lease holder names this replica: ``identity`` or ``identity_<suffix>``."""
    return bool(identity) and (holder == identity or holder.startswith(identity + "_"))


async def _notify(callback: ChangeCallback | None, leading: bool) -> None:
    if callback is None:
        return
    try:
        result = callback(leading)
        if inspect.isawaitable(result):
            await result
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("leadership_callback_failed", leading=leading)


class AlwaysLeader:
    """No election: leads from the start."""

    def __init__(self, identity: str = "", *, on_change: ChangeCallback | None = None) -> None:
        self._identity = identity
        self._on_change = on_change

    @property
    def is_leader(self) -> bool:
        return True

    @property
    def leader(self) -> str:
        return self._identity

    async def run(self) -> None:
        await _notify(self._on_change, True)
        await asyncio.Event().wait()


class LeaseFollower:
    """Leads while the watched Lease names this replica and is renewed (see the module doc)."""

    def __init__(
        self,
        client: KubeClient,
        settings: LeaderElectSettings,
        *,
        on_change: ChangeCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        reflector_config: ReflectorConfig | None = None,
    ) -> None:
        self._settings = settings
        self._on_change = on_change
        self._clock = clock
        self._record: LeaseRecord | None = None
        self._raw: Any = None
        self._seen_at = 0.0
        self._leading = False
        self._changed = asyncio.Event()
        base = reflector_config or ReflectorConfig()
        config = ReflectorConfig(
            namespace=settings.namespace,
            field_selector=f"metadata.name={settings.name}",
            watch_timeout_s=base.watch_timeout_s,
            backoff=base.backoff,
        )
        self._reflector = Reflector(
            client,
            LEASES,
            config=config,
            handlers=[
                EventHandlers(
                    on_add=self._observe,
                    on_update=lambda _old, new: self._observe(new),
                    on_delete=self._deleted,
                )
            ],
            name="scheduler-lease",
        )

    @property
    def is_leader(self) -> bool:
        return self._leading

    @property
    def leader(self) -> str:
        return self._record.holder_identity if self._record is not None else ""

    def _observe(self, lease: JsonObject) -> None:
        raw = lease.get("spec")
        if raw != self._raw:
            self._raw = raw
            self._record = LeaseRecord.from_lease(lease)
            self._seen_at = self._clock()
        self._changed.set()

    def _deleted(self, _lease: JsonObject) -> None:
        self._raw, self._record = None, None
        self._changed.set()

    def _should_lead(self) -> bool:
        record = self._record
        if record is None or not holder_is(record.holder_identity, self._settings.identity):
            return False
        duration = record.lease_duration_seconds or self._settings.lease_duration_s
        return self._clock() < self._seen_at + duration

    async def run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._reflector.run(), name="reflector-scheduler-lease")
            while True:
                leading = self._should_lead()
                if leading != self._leading:
                    self._leading = leading
                    log.info(
                        "leadership_changed", leading=leading, leader=self.leader, mode="follow"
                    )
                    await _notify(self._on_change, leading)
                self._changed.clear()
                # Re-judge at least once a second: expiry is a matter of time passing.
                try:
                    async with asyncio.timeout(1.0):
                        await self._changed.wait()
                except TimeoutError:
                    pass


class LeaseCampaign:
    """Campaigns on the Lease with client-go's algorithm."""

    def __init__(
        self,
        client: KubeClient,
        settings: LeaderElectSettings,
        *,
        on_change: ChangeCallback | None = None,
    ) -> None:
        self._on_change = on_change
        identity = f"{settings.identity}_{uuid.uuid4()}"
        self._elector = LeaderElector(
            client,
            LeaderElectionConfig(
                namespace=settings.namespace,
                name=settings.name,
                identity=identity,
                lease_duration_s=settings.lease_duration_s,
                renew_deadline_s=settings.renew_deadline_s,
                retry_period_s=settings.retry_period_s,
            ),
            on_started_leading=lambda: self._changed(True),
            on_stopped_leading=lambda: self._changed(False),
        )

    async def _changed(self, leading: bool) -> None:
        log.info("leadership_changed", leading=leading, leader=self.leader, mode="campaign")
        await _notify(self._on_change, leading)

    @property
    def is_leader(self) -> bool:
        return self._elector.is_leader

    @property
    def leader(self) -> str:
        return self._elector.leader

    @property
    def identity(self) -> str:
        return self._elector.config.identity

    async def run(self) -> None:
        await self._elector.run()
