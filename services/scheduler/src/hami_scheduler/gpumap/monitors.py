"""Reading the vGPU monitors for the map, lazily and at a bounded cost.

Nothing runs until the map is asked for: :meth:`UsageCollector.readings` is called by the map's
handler with the nodes of the page it answers (at most ``perPage``, 500), and only those nodes'
monitors are scraped — each at most once per :data:`MAX_AGE_S` (the answer, or the failure, is
remembered that long), at most :data:`CONCURRENCY` at a time, each within ``timeout_s``.  The
handler waits for the page's scrapes at most ``timeout_s`` in all: a monitor still answering
after that shows ``error`` ("not answered yet") now and its figures on a later view, never a
failed page.  Remembered readings of nodes not viewed for :data:`FORGET_S` are dropped.

A response is read up to :data:`MAX_BYTES`; only the lines of the families
:func:`~.usage.read_figures` reads are handed to ``prometheus_client``'s text parser, in a
worker thread (a node with 2,000 containers exports about 16,000 samples: parsing them on the
event loop would delay ``/filter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Final, Self

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from hami_scheduler.gpumap.locate import Locator
from hami_scheduler.gpumap.usage import WANTED, MonitorFigures, NodeReading, Sample, read_figures

__all__ = [
    "CONCURRENCY",
    "DEFAULT_TIMEOUT_S",
    "FORGET_S",
    "MAX_AGE_S",
    "MAX_BYTES",
    "UsageCollector",
    "parse_exposition",
]

MAX_AGE_S: Final = 15.0
"""How long a monitor's answer (or failure) is used before it is asked again."""
FORGET_S: Final = 300.0
"""A node's remembered reading is dropped once its node has not been viewed for this long."""
CONCURRENCY: Final = 16
"""Scrapes in flight at once, over all requests."""
DEFAULT_TIMEOUT_S: Final = 2.0
MAX_BYTES: Final = 64 << 20
"""The most of one monitor's response read (a node of 2,000 containers sends a few MiB)."""


def _wanted_lines(text: str) -> Iterator[str]:
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if 0 <= at < end:
                end = at
        if line[:end] in WANTED:
            yield line


def parse_exposition(text: str) -> MonitorFigures:
    """The figures of a monitor's ``/metrics`` text; ``ValueError`` when it is not Prometheus
    text.  Other families' lines are dropped before parsing (a quick string test)."""
    kept = "\n".join(_wanted_lines(text))

    def samples() -> Iterator[Sample]:
        for family in text_string_to_metric_families(kept + "\n" if kept else ""):
            for sample in family.samples:
                yield sample.name, sample.labels, float(sample.value)

    return read_figures(samples())


@dataclass(frozen=True, slots=True)
class _Kept:
    reading: NodeReading
    read_at: float
    """Monotonic time of the answer (or failure)."""


class UsageCollector:
    """The monitors' figures for the nodes a map page shows (see the module doc).

    Use as an async context manager: it owns its HTTP session and the scrapes in flight.
    """

    def __init__(
        self,
        locator: Locator,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_age_s: float = MAX_AGE_S,
        concurrency: int = CONCURRENCY,
        max_bytes: int = MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._locator = locator
        self.timeout_s = timeout_s
        self.max_age_s = max_age_s
        self._max_bytes = max_bytes
        self._clock = clock
        self._now = now
        self._limit = asyncio.Semaphore(concurrency)
        self._kept: dict[str, _Kept] = {}
        self._viewed: dict[str, float] = {}
        self._inflight: dict[str, asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self.scrapes = 0
        """Scrapes started (for tests and the benchmark: the cost made visible)."""

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._session is not None:
            await self._session.close()

    async def readings(self, nodes: Sequence[str]) -> dict[str, NodeReading]:
        """Each node's monitor reading: remembered while fresh, else asked now (waiting at most
        ``timeout_s`` for all of them together)."""
        started = self._clock()
        self._forget(started, nodes)
        try:
            async with asyncio.timeout(self.timeout_s):
                located = await self._locator.locate(nodes)
        except TimeoutError:
            why = f"could not find the monitors within {self.timeout_s:g}s"
            return {node: NodeReading(None, error=why) for node in nodes}
        waiting: list[asyncio.Task[None]] = []
        for node in nodes:
            url, _ = located.get(node, (None, None))
            kept = self._kept.get(node)
            fresh = kept is not None and started - kept.read_at < self.max_age_s
            if url is None or (fresh and kept is not None and kept.reading.url == url):
                continue
            waiting.append(self._asking(node, url))
        if waiting:
            left = max(self.timeout_s - (self._clock() - started), 0.0)
            await asyncio.wait(waiting, timeout=left)
        found: dict[str, NodeReading] = {}
        for node in nodes:
            url, missing = located.get(node, (None, "not located"))
            kept = self._kept.get(node)
            if url is None:
                found[node] = NodeReading(None, error=missing)
            elif kept is not None and kept.reading.url == url:
                found[node] = kept.reading
            else:
                found[node] = NodeReading(
                    url,
                    error=f"the monitor has not answered yet (asked; at most {self.timeout_s:g}s "
                    "a try): reload to see its figures",
                )
        return found

    def _asking(self, node: str, url: str) -> asyncio.Task[None]:
        """The scrape of ``node``'s monitor in flight, started now if none is."""
        task = self._inflight.get(node)
        if task is None:
            task = asyncio.create_task(self._scrape(node, url), name=f"gpumap-monitor-{node}")
            self._inflight[node] = task

            def done(_: asyncio.Task[None]) -> None:
                self._inflight.pop(node, None)

            task.add_done_callback(done)
        return task

    def _forget(self, now: float, viewed: Sequence[str]) -> None:
        for node in viewed:
            self._viewed[node] = now
        if len(self._viewed) > len(viewed):
            stale = [node for node, at in self._viewed.items() if now - at > FORGET_S]
            for node in stale:
                del self._viewed[node]
                self._kept.pop(node, None)

    async def _scrape(self, node: str, url: str) -> None:
        session = self._session
        assert session is not None, "used inside its context"
        self.scrapes += 1
        reading: NodeReading
        try:
            async with self._limit:
                timeout = aiohttp.ClientTimeout(total=self.timeout_s)
                async with session.get(url, timeout=timeout) as response:
                    if response.status != 200:
                        raise _RefusedError(f"the monitor answered HTTP {response.status}")
                    body = await self._body(response)
            figures = await asyncio.to_thread(_parse, body)
            reading = NodeReading(url, at=self._now(), figures=figures)
        except TimeoutError:
            reading = NodeReading(url, error=f"no answer within {self.timeout_s:g}s")
        except (aiohttp.ClientError, OSError) as exc:
            reading = NodeReading(url, error=f"unreachable: {type(exc).__name__}: {exc}"[:300])
        except (_RefusedError, ValueError) as exc:
            reading = NodeReading(url, error=str(exc)[:300])
        self._kept[node] = _Kept(reading, self._clock())

    async def _body(self, response: aiohttp.ClientResponse) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(1 << 16):
            size += len(chunk)
            if size > self._max_bytes:
                raise _RefusedError(f"the monitor sent more than {self._max_bytes >> 20} MiB")
            chunks.append(chunk)
        return b"".join(chunks)


class _RefusedError(Exception):
    """The monitor answered, but not with figures (the message says why)."""


def _parse(body: bytes) -> MonitorFigures:
    try:
        return parse_exposition(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not Prometheus text: {str(exc)[:200]}") from None
