"""The handshake loop: judge node health every ``--handshake-interval``; the leader writes.

Per node × vendor with a handshake key (HAMi's ``CheckHealth``, via
:func:`~hami_protocol.node.handshake.check_handshake` with expiry ``--handshake-timeout``):

* a value that is not ``Requesting_<ts>`` (absent, ``Reported ...``): healthy, and the leader
  writes ``Requesting_<now>``, which a live device plugin answers with ``Reported <now>``;
* ``Requesting`` younger than the timeout, or the node still advertising the vendor's count
  resource: healthy;
* otherwise the vendor is marked unavailable on that node and leaves the cache (its devices
  take no new pods) until it reports again — a ``Reported`` answer, a changed register
  annotation, or the count resource back — which the cache notices on the node's next event.

Every replica judges (followers keep the same view for when they take over); only the leader
writes.  Nodes are judged in slices, yielding to the event loop between them, so a large
cluster never stalls a filter.  The leader also runs a pass as soon as it starts leading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Final

import structlog

from hami_kube.errors import KubeError
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES
from hami_kube.rest import KubeClient
from hami_kube.timefmt import utc_now
from hami_protocol.node.handshake import format_requesting
from hami_scheduler.cache.health import HandshakeWrite
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.leader import LeaderView

__all__ = ["HandshakeLoop"]

log = structlog.get_logger("hami_scheduler")

_SLICE: Final = 250
_PARALLEL_WRITES: Final = 8


class HandshakeLoop:
    """Runs until cancelled; setting ``due`` (or ``wake()``) starts a pass at once — e.g. on
    becoming leader, from the leadership's change callback, which exists before this loop."""

    def __init__(
        self,
        cache: SchedulerCache,
        *,
        client: KubeClient | None,
        leadership: LeaderView,
        due: asyncio.Event | None = None,
        interval_s: float = 15.0,
        now: Callable[[], datetime] = utc_now,
        on_api_error: Callable[[str], None] | None = None,
    ) -> None:
        self._cache = cache
        self._client = client
        self._leadership = leadership
        self._interval = interval_s
        self._now = now
        self._on_api_error = on_api_error
        self._wake = due if due is not None else asyncio.Event()
        self.passes = 0

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.run_pass()
            except Exception:
                # One bad pass must not end health tracking for good.
                log.exception("handshake_pass_failed")
            try:
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def run_pass(self) -> None:
        """Judge every node once; write the requests when leading."""
        names = self._cache.node_names()
        writes: list[HandshakeWrite] = []
        for start in range(0, len(names), _SLICE):
            writes += self._cache.check_handshakes(names[start : start + _SLICE], self._now())
            await asyncio.sleep(0)
        if writes and self._client is not None and self._leadership.is_leader:
            await self._write_all(writes)
        self.passes += 1

    async def _write_all(self, writes: list[HandshakeWrite]) -> None:
        gate = asyncio.Semaphore(_PARALLEL_WRITES)
        value = format_requesting(self._now())

        async def write(item: HandshakeWrite) -> None:
            async with gate:
                if not self._leadership.is_leader or self._client is None:
                    return
                try:
                    await patch_metadata(
                        self._client, NODES, item.node, annotations={item.key: value}
                    )
                except KubeError as exc:
                    if self._on_api_error is not None:
                        self._on_api_error("handshake")
                    log.warning(
                        "handshake_write_failed", node=item.node, key=item.key, error=str(exc)
                    )

        async with asyncio.TaskGroup() as group:
            for item in writes:
                group.create_task(write(item), name=f"handshake-{item.node}")
