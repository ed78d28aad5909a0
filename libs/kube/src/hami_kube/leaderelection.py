"""Lease-based leader election (coordination.k8s.io/v1), following client-go's algorithm.

Every ``retry_period`` (jittered by up to 1.2x while not leading) a candidate runs
``try_acquire_or_renew``:

1. a leader whose lease is still valid first tries a fast renew: PUT from its cached Lease;
2. otherwise GET the Lease; if it does not exist, CREATE it with itself as holder -> leader;
3. if the Lease differs from the last one seen, remember it and the *local* monotonic time it was
   seen (expiry is judged by this clock, never by comparing ``renewTime`` with the local clock);
4. if someone else holds it and ``observed_at + leaseDurationSeconds`` is in the future, give up;
5. else PUT (with the resourceVersion just read) itself as holder with ``renewTime = now``,
   keeping ``acquireTime``/``leaseTransitions`` when it already held the lease, else
   ``acquireTime = now`` and ``leaseTransitions + 1``. A 409 means someone else won.

A leader that cannot renew within ``renew_deadline`` stops leading and becomes a candidate again.
On cancellation a leader releases the Lease (``holderIdentity: ""``, ``leaseDurationSeconds: 1``,
transitions unchanged) before the cancellation propagates. Times are written as MicroTime.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog

from hami_kube.errors import KubeError, NotFoundError
from hami_kube.resources import LEASES, JsonObject
from hami_kube.rest import KubeClient
from hami_kube.timefmt import format_microtime, utc_now

log = structlog.get_logger(__name__)

JITTER_FACTOR = 1.2

Callback = Callable[[], Awaitable[None] | None]
NewLeaderCallback = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """One candidate's settings. client-go requires
    ``lease_duration > renew_deadline > JITTER_FACTOR * retry_period``."""

    namespace: str
    name: str
    identity: str
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    release_on_cancel: bool = True

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("leader election identity must not be empty")
        if not self.name or not self.namespace:
            raise ValueError("leader election needs the Lease name and namespace")
        if self.lease_duration_s <= self.renew_deadline_s:
            raise ValueError("lease_duration_s must be greater than renew_deadline_s")
        if self.renew_deadline_s <= JITTER_FACTOR * self.retry_period_s:
            raise ValueError("renew_deadline_s must be greater than 1.2 * retry_period_s")
        if self.retry_period_s <= 0:
            raise ValueError("retry_period_s must be positive")

    @property
    def lease_duration_seconds(self) -> int:
        """``spec.leaseDurationSeconds`` (int32 on the wire; at least 1)."""
        return max(1, round(self.lease_duration_s))


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease ``spec`` fields the election uses."""

    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    lease_transitions: int = 0

    @classmethod
    def from_lease(cls, lease: JsonObject) -> LeaseRecord:
        spec = lease.get("spec")
        if not isinstance(spec, dict):
            spec = {}

        def text(key: str) -> str | None:
            value = spec.get(key)
            return value if isinstance(value, str) else None

        def number(key: str) -> int:
            value = spec.get(key)
            return value if isinstance(value, int) and not isinstance(value, bool) else 0

        return cls(
            holder_identity=text("holderIdentity") or "",
            lease_duration_seconds=number("leaseDurationSeconds"),
            acquire_time=text("acquireTime"),
            renew_time=text("renewTime"),
            lease_transitions=number("leaseTransitions"),
        )

    def to_spec(self) -> JsonObject:
        return {
            "holderIdentity": self.holder_identity,
            "leaseDurationSeconds": self.lease_duration_seconds,
            "acquireTime": self.acquire_time,
            "renewTime": self.renew_time,
            "leaseTransitions": self.lease_transitions,
        }


class LeaderElector:
    """Runs the election for one identity. ``run()`` under a TaskGroup until cancelled.

    ``is_leader`` is true between acquiring and losing (or releasing) the lease; ``leading`` and
    ``not_leading`` are asyncio Events mirroring it. Callbacks (plain or async, keep them short)
    run on start/stop of leadership; ``on_new_leader`` (plain function) runs when a different
    holder is observed.
    """

    def __init__(
        self,
        client: KubeClient,
        config: LeaderElectionConfig,
        *,
        on_started_leading: Callback | None = None,
        on_stopped_leading: Callback | None = None,
        on_new_leader: NewLeaderCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utc_now,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._config = config
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._clock = clock
        self._now = now
        self._rng = rng or random.Random()
        self._lease: JsonObject | None = None
        self._observed: LeaseRecord | None = None
        self._observed_raw: Any = None
        self._observed_at = 0.0
        self._reported_leader = ""
        self.leading = asyncio.Event()
        self.not_leading = asyncio.Event()
        self.not_leading.set()
        self._log = log.bind(lease=f"{config.namespace}/{config.name}", identity=config.identity)

    @property
    def config(self) -> LeaderElectionConfig:
        return self._config

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    @property
    def leader(self) -> str:
        """The holder identity last observed ("" when free or unknown)."""
        return self._observed.holder_identity if self._observed else ""

    async def wait_leading(self) -> None:
        await self.leading.wait()

    # -- lifecycle ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Acquire, lead, renew; after losing the lease, compete again. Returns only by
        cancellation, releasing the lease first when leading and ``release_on_cancel``."""
        try:
            while True:
                await self._acquire()
                await self._set_leading(True)
                await self._renew_until_lost()
                await self._set_leading(False)
        except asyncio.CancelledError:
            if self.is_leader and self._config.release_on_cancel:
                await self._release_bounded()
            raise
        finally:
            await self._set_leading(False)

    async def _acquire(self) -> None:
        period = self._config.retry_period_s
        while True:
            if await self._attempt():
                self._log.info("acquired lease")
                return
            await asyncio.sleep(period * (1 + self._rng.random() * JITTER_FACTOR))

    async def _renew_until_lost(self) -> None:
        config = self._config
        last_renew = self._clock()
        while True:
            await asyncio.sleep(config.retry_period_s)
            remaining = config.renew_deadline_s - (self._clock() - last_renew)
            renewed = False
            if remaining > 0:
                try:
                    async with asyncio.timeout(remaining):
                        renewed = await self._attempt()
                except TimeoutError:
                    renewed = False
            if renewed:
                last_renew = self._clock()
            elif self.leader not in ("", config.identity):
                self._log.warning("lease taken by another holder", leader=self.leader)
                return
            elif self._clock() - last_renew >= config.renew_deadline_s:
                self._log.warning("failed to renew lease within the renew deadline")
                return

    async def _release_bounded(self) -> None:
        # Runs while the task is being cancelled: keep it short and never let it raise.
        try:
            async with asyncio.timeout(self._config.retry_period_s):
                await self.release()
        except TimeoutError:
            self._log.warning("lease release timed out")

    async def _set_leading(self, leading: bool) -> None:
        if leading == self.is_leader:
            return
        if leading:
            self.not_leading.clear()
            self.leading.set()
            await self._call("on_started_leading", self._on_started)
        else:
            self.leading.clear()
            self.not_leading.set()
            self._log.info("stopped leading")
            await self._call("on_stopped_leading", self._on_stopped)

    async def _call(self, which: str, callback: Callable[..., Any] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            result = callback(*args)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception("leader election callback failed", callback=which)

    # -- the algorithm -----------------------------------------------------------------------
    def _holds(self) -> bool:
        return self._observed is not None and (
            self._observed.holder_identity == self._config.identity
        )

    def _lease_valid(self) -> bool:
        if self._observed is None:
            return False
        duration = self._observed.lease_duration_seconds or self._config.lease_duration_seconds
        return self._observed_at + duration > self._clock()

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except KubeError as exc:
            self._log.info("lease attempt failed", error=str(exc))
            return False

    async def try_acquire_or_renew(self) -> bool:
        """One round of the algorithm in the module docstring; True when this identity holds the
        lease afterwards. Raises ``KubeError`` on API failures other than 404/409."""
        config = self._config
        now = format_microtime(self._now())
        desired = LeaseRecord(
            holder_identity=config.identity,
            lease_duration_seconds=config.lease_duration_seconds,
            acquire_time=now,
            renew_time=now,
            lease_transitions=0,
        )
        observed = self._observed
        if self._holds() and self._lease_valid() and self._lease is not None and observed:
            fast = LeaseRecord(
                holder_identity=desired.holder_identity,
                lease_duration_seconds=desired.lease_duration_seconds,
                acquire_time=observed.acquire_time,
                renew_time=now,
                lease_transitions=observed.lease_transitions,
            )
            try:
                await self._update(fast)
                return True
            except KubeError as exc:
                self._log.info("optimistic renew failed, re-reading the lease", error=str(exc))

        try:
            lease = await self._client.get(LEASES, config.name, namespace=config.namespace)
        except NotFoundError:
            return await self._create(desired)
        current = LeaseRecord.from_lease(lease)
        self._lease = lease
        raw = lease.get("spec")
        if raw != self._observed_raw:
            self._observe(current, raw)

        if current.holder_identity and self._lease_valid() and not self._holds():
            return False

        if self._holds():
            record = LeaseRecord(
                holder_identity=desired.holder_identity,
                lease_duration_seconds=desired.lease_duration_seconds,
                acquire_time=current.acquire_time,
                renew_time=now,
                lease_transitions=current.lease_transitions,
            )
        else:
            record = LeaseRecord(
                holder_identity=desired.holder_identity,
                lease_duration_seconds=desired.lease_duration_seconds,
                acquire_time=now,
                renew_time=now,
                lease_transitions=current.lease_transitions + 1,
            )
        try:
            await self._update(record)
        except KubeError as exc:
            self._log.debug("lease update failed", error=str(exc))
            return False
        return True

    async def release(self) -> bool:
        """Give the lease up if held: holder "", leaseDurationSeconds 1. True on success."""
        if not self._holds() or self._lease is None or self._observed is None:
            return False
        now = format_microtime(self._now())
        record = LeaseRecord(
            holder_identity="",
            lease_duration_seconds=1,
            acquire_time=now,
            renew_time=now,
            lease_transitions=self._observed.lease_transitions,
        )
        try:
            await self._update(record)
        except KubeError as exc:
            self._log.warning("lease release failed", error=str(exc))
            return False
        self._log.info("released lease")
        return True

    async def _create(self, record: LeaseRecord) -> bool:
        config = self._config
        body: JsonObject = {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {"name": config.name, "namespace": config.namespace},
            "spec": record.to_spec(),
        }
        try:
            created = await self._client.create(LEASES, body, namespace=config.namespace)
        except KubeError as exc:
            self._log.debug("lease create failed", error=str(exc))
            return False
        self._lease = created
        self._observe(record, created.get("spec"))
        return True

    async def _update(self, record: LeaseRecord) -> None:
        if self._lease is None:
            raise RuntimeError("no lease read yet")
        lease = dict(self._lease)
        lease["spec"] = {**(self._lease.get("spec") or {}), **record.to_spec()}
        # PUT carries the cached metadata, hence its resourceVersion: the server rejects the
        # write (409) if anyone changed the Lease since.
        updated = await self._client.replace(LEASES, lease)
        self._lease = updated
        self._observe(record, updated.get("spec"))

    def _observe(self, record: LeaseRecord, raw: Any) -> None:
        self._observed = record
        self._observed_raw = raw
        self._observed_at = self._clock()
        holder = record.holder_identity
        if holder and holder != self._reported_leader:
            self._reported_leader = holder
            self._log.info("new leader observed", leader=holder)
            if self._on_new_leader is not None:
                try:
                    self._on_new_leader(holder)
                except Exception:
                    self._log.exception("on_new_leader callback failed")


__all__ = [
    "JITTER_FACTOR",
    "Callback",
    "LeaderElectionConfig",
    "LeaderElector",
    "LeaseRecord",
    "NewLeaderCallback",
]
