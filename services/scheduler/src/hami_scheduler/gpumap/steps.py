"""Long documents built in steps, so that the extender's event loop is never held for long.

The GPU map is served by the process that answers ``/filter``, on the same event loop.  A map
page at 5,000 nodes and 100,000 pods costs tens of milliseconds of pure Python (the cluster
totals over every node, the page's nodes with their holders, the HTML or JSON text); run in one
go, a ``/filter`` that arrives meanwhile waits for all of it, and a page polled once a second
moves the filter's p99 (``bench/gpumap.py`` measured 24 → 59 ms).  So the map's builders are
generators (:data:`Steps`) that yield ``None`` between small pieces of work — a few hundred
nodes' summaries, one node's cards — and return their result:

* :func:`drain` runs one to its end at once (the pure callers: tests, ``render_page``);
* :func:`sliced` runs one on the event loop, handing the loop back whenever a slice has run for
  :data:`SLICE_S`: a ``/filter`` arriving meanwhile waits for about one slice, not the page.

Not a worker thread: the builders are pure Python, so under the GIL a thread would take the
interpreter from the filter for a switch interval (5 ms) at a time, and it would read the
cache's dictionaries while the loop changes them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Generator, Mapping
from typing import Any, Final, TypeVar

__all__ = ["SLICE_S", "Steps", "drain", "json_steps", "sliced"]

_T = TypeVar("_T")
Steps = Generator[None, None, _T]
"""A computation that yields ``None`` where it may be paused, and returns its result."""

SLICE_S: Final = 0.001
"""How long :func:`sliced` runs before handing the event loop back (seconds)."""


def drain(steps: Steps[_T]) -> _T:
    """Run ``steps`` to its end at once; its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result


async def sliced(steps: Steps[_T], budget: float = SLICE_S) -> _T:
    """Run ``steps`` on the event loop, yielding to it after every ``budget`` seconds of work."""
    clock = time.perf_counter
    deadline = clock() + budget
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: _T = done.value
            return result
        if clock() >= deadline:
            await asyncio.sleep(0)
            deadline = clock() + budget


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


def json_steps(doc: Mapping[str, Any]) -> Steps[bytes]:
    """``doc`` as compact JSON (exactly ``json.dumps(doc, separators=(",", ":"),
    default=str)``), one step per element of its top-level lists (a map's nodes)."""
    pieces: list[str] = []
    for key, value in doc.items():
        if not isinstance(key, str) or not isinstance(value, list):
            pieces.append(_dumps({key: value})[1:-1])
            continue
        items: list[str] = []
        for item in value:
            items.append(_dumps(item))
            yield
        pieces.append(f"{_dumps(key)}:[{','.join(items)}]")
    return ("{" + ",".join(pieces) + "}").encode()
