"""The seam between the API server and the admission stand-in.

The API server calls a ``MutatingAdmission`` on every pod CREATE before storing the object, exactly
where the real API server runs its mutating admission chain.  The admission stand-in implements it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class AdmissionDenied(Exception):  # noqa: N818 - mirrors the API server's wording
    """Admission refused the request; the API server answers ``code`` with ``message``."""

    def __init__(self, code: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason


MutatingAdmission = Callable[[str, str, dict[str, Any], str | None], Awaitable[dict[str, Any]]]
"""``(operation, resource, obj, namespace) -> obj``: returns the (possibly mutated) object or
raises :class:`AdmissionDenied`.  ``operation`` is ``"CREATE"``, ``resource`` e.g. ``"pods"``."""
