"""Long documents built in steps, so that the extender's event loop is never held for long.

The GPU map is served by the process that answers ``/filter``, on the same event loop.  A map
page at 5,000 nodes and 100,000 pods costs tens of milliseconds of pure Python (the cluster
totals over every node, the page's nodes with their holders, the HTML or JSON text); run in one
go, a ``/filter`` that arrives meanwhile waits for all of it, and a page polled once a second
moves the filter's p99 (``bench/gpumap.py`` measured 24 → 59 ms).  So the map's builders are
generators (:data:`Steps`) that yield ``None`` between small pieces of work — a few hundred
nodes' summaries, one node's cards — and return their result:

* :func:`drain` runs one to its end at once (the pure callers: tests, ``render_page``);
* the server (:func:`hami_scheduler.gpumap.server.sliced`) runs one on the event loop, handing
  the loop back whenever a slice has run for a quarter millisecond, and leaving it to others
  for a millisecond: a ``/filter`` arriving meanwhile waits for about one slice, not for the
  page.

Not a worker thread: the builders are pure Python, so under the GIL a thread would take the
interpreter from the filter for a switch interval (5 ms) at a time, and it would read the
cache's dictionaries while the loop changes them.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any, TypeVar, cast

__all__ = ["Steps", "drain", "json_steps", "step"]

_T = TypeVar("_T")
Steps = Generator[None, None, _T]
"""A computation that yields ``None`` where it may be paused, and returns its result."""


def step(steps: Steps[_T]) -> tuple[bool, _T | None]:
    """Run one step: ``(True, result)`` once ``steps`` has ended, else ``(False, None)``."""
    try:
        next(steps)
    except StopIteration as done:
        return True, done.value
    return False, None


def drain(steps: Steps[_T]) -> _T:
    """Run ``steps`` to its end at once; its result."""
    while True:
        ended, result = step(steps)
        if ended:
            return cast("_T", result)


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
