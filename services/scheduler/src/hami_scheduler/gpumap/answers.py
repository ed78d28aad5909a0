"""Answers of the map and pending views shared for a few seconds between everyone who asks.

A browser tab polling the map, a wall screen and ``kubectl hami`` all ask the same few URLs; each
answer costs a whole page's build and render on the event loop the extender's ``/filter``
shares.  :class:`SharedAnswers` keeps each distinct request's answer (its path and query, minus
the page-only ``refresh``) for ``max_age_s`` (``--gpumap-max-age``), and requests arriving while
one is being built wait for that one instead of building their own.  Every document says when it
was made (``generatedAt``), so a shared answer is never passed off as newer than it is.

Bounded: at most :data:`MAX_ENTRIES` answers, none over :data:`MAX_BODY` bytes (a bigger one is
answered, not kept); the oldest goes first.  ``max_age_s`` 0 shares nothing.  The fit probe is
never shared (it answers one person's question), nor is an error.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_BODY", "MAX_ENTRIES", "Answer", "SharedAnswers", "answer_key"]

MAX_ENTRIES: Final = 32
MAX_BODY: Final = 8 * 1024 * 1024
_PAGE_ONLY: Final = frozenset({"refresh"})


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str


def answer_key(path: str, query: Mapping[str, str]) -> str:
    """The request, as far as its answer depends on it (parameters sorted, empty ones and the
    page's own ``refresh`` left out)."""
    kept = sorted((k, v) for k, v in query.items() if v and k not in _PAGE_ONLY)
    return path + "?" + "&".join(f"{k}={v}" for k, v in kept)


class SharedAnswers:
    """See the module docstring."""

    def __init__(self, max_age_s: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_age_s = max_age_s
        self._clock = clock
        self._kept: OrderedDict[str, tuple[float, Answer]] = OrderedDict()
        self._building: dict[str, asyncio.Future[Answer]] = {}

    def __len__(self) -> int:
        return len(self._kept)

    async def get(self, key: str, build: Callable[[], Awaitable[Answer]]) -> Answer:
        """The answer for ``key``: a kept one younger than ``max_age_s``, the one being built,
        or a new one from ``build``."""
        if self.max_age_s <= 0:
            return await build()
        now = self._clock()
        kept = self._kept.get(key)
        if kept is not None and now - kept[0] < self.max_age_s:
            return kept[1]
        pending = self._building.get(key)
        if pending is not None:
            await asyncio.wait([pending])
            if not pending.cancelled():
                return pending.result()
            # The request building it went away: build it here instead.
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._building[key] = future
        try:
            answer = await build()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here: waiters re-raise it, nobody else must
            raise
        finally:
            self._building.pop(key, None)
        future.set_result(answer)
        if answer.status == 200 and len(answer.body) <= MAX_BODY:
            self._kept[key] = (now, answer)
            self._kept.move_to_end(key)
            while len(self._kept) > MAX_ENTRIES:
                self._kept.popitem(last=False)
        return answer
