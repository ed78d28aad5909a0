"""Bad input met while reading regions: every reason the monitor counts, and the log that counts
each occurrence once and writes its line once.

A *subject* is the path of a file or directory.  :meth:`ProblemLog.report` counts a reason when
the subject did not already have it (so a file that stays truncated is counted once, not at every
pass), and logs it the first time that subject meets that reason; :meth:`ProblemLog.resolve`
clears a subject that reads well again (so a later fault counts anew), and
:meth:`ProblemLog.retain` forgets subjects that are gone.  Discovery runs in worker threads and
the scrape in others, hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection
from enum import StrEnum
from typing import Final

import structlog

from hami_deviceplugin.monitor.discovery import DirReason
from hami_protocol.region.codec import RegionFault

__all__ = ["REASONS", "FileReason", "PodReason", "ProblemLog"]

log = structlog.get_logger("hami_deviceplugin.monitor")


class FileReason(StrEnum):
    UNREADABLE = "unreadable"
    """The file cannot be opened or mapped (permissions, not a regular file)."""
    VANISHED = "vanished"
    """The file disappeared while its container's directory stayed."""


class PodReason(StrEnum):
    UNKNOWN_POD = "unknown_pod"
    """No pod with the directory's UID is on this node (and none was deleted lately)."""
    UNKNOWN_CONTAINER = "unknown_container"
    """The pod has no (non-init) container of the directory's name."""


REASONS: Final[tuple[str, ...]] = (
    *(str(r) for r in RegionFault),
    *(str(r) for r in FileReason),
    *(str(r) for r in DirReason),
    *(str(r) for r in PodReason),
)
"""Every ``reason`` of ``hami_vgpu_monitor_region_errors_total``."""


class ProblemLog:
    """The current problem of each subject; ``count(reason)`` is called once per occurrence."""

    def __init__(self, count: Callable[[str], None]) -> None:
        self._count = count
        self._lock = threading.Lock()
        self._current: dict[str, str] = {}
        self._logged: set[tuple[str, str]] = set()

    def report(self, subject: str, reason: str, detail: str = "") -> None:
        with self._lock:
            if self._current.get(subject) == reason:
                return
            self._current[subject] = reason
            first = (subject, reason) not in self._logged
            self._logged.add((subject, reason))
        self._count(reason)
        if first:
            log.warning("region skipped", path=subject, reason=reason, detail=detail)

    def resolve(self, subject: str) -> None:
        with self._lock:
            self._current.pop(subject, None)

    def retain(self, subjects: Collection[str]) -> None:
        """Forget every subject not in ``subjects``."""
        with self._lock:
            self._current = {s: r for s, r in self._current.items() if s in subjects}
            self._logged = {(s, r) for s, r in self._logged if s in subjects}

    def current(self) -> dict[str, str]:
        """Subject → its problem now."""
        with self._lock:
            return dict(self._current)
