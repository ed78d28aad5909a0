"""Wiring: the scheduler's parts assembled into one bounded lifecycle, and run.

- :mod:`.lifecycle` — :func:`run`: the order the parts start and stop in, and each step's share
  of the grace period (:data:`EXIT_SHARES`);
- :mod:`.embed` — :func:`serving`: the same, run inside the caller's event loop (tests, demo);
- :mod:`.parts` — the pieces :func:`run` builds that need a word of their own: the cache with
  its loggers, leadership and what a change of role sets off, the server certificate, the
  after-sync step, and :class:`RunningScheduler`, what a started service hands its caller;
- :mod:`.deciders` — what answers ``/filter``, ``/bind`` and ``/preempt`` and what looks after
  them (node locks, the upkeep).

Split so that the lifecycle reads as the sequence of steps it is, apart from how each part is
put together.  Flags are parsed before any of this (:mod:`hami_scheduler.settings`).
"""

from __future__ import annotations

from hami_scheduler.app.embed import serving
from hami_scheduler.app.lifecycle import EXIT_SHARES, run
from hami_scheduler.app.parts import RunningScheduler

__all__ = ["EXIT_SHARES", "RunningScheduler", "run", "serving"]
