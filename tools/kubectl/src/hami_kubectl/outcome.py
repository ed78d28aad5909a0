"""Exit statuses and the failures a command reports (pure)."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The process's exit status: scripts branch on it (``kubectl hami fit`` in CI)."""

    OK = 0
    """Done; for ``fit``: the request fits somewhere now."""
    NO_FIT = 1
    """``fit`` only: it fits nowhere now."""
    USAGE = 2
    """Bad flags, an unreadable manifest, or a request the scheduler refused as malformed."""
    FORBIDDEN = 3
    """The API server refused the user (401/403): RBAC or credentials."""
    UNAVAILABLE = 4
    """The scheduler's GPU map could not be reached (no such Service, no endpoints, transport)."""
    BAD_ANSWER = 5
    """Something answered, but not with the GPU map API this plugin reads."""


class CommandError(Exception):
    """A failure to report on stderr with its exit status."""

    def __init__(self, status: Exit, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
