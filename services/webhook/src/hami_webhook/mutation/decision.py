"""What the admission decision answers for one pod: :class:`Decision` and its constructors, pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from hami_webhook.dra.claims import ClaimTemplate
from hami_webhook.mutation.patch import PatchOp

__all__ = ["Decision", "Outcome", "allowed", "denied", "error"]

Outcome = Literal["allowed", "mutated", "denied", "error"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The answer for one pod.  ``patch`` is empty unless ``outcome`` is ``mutated``."""

    outcome: Outcome
    patch: tuple[PatchOp, ...] = ()
    message: str = ""
    code: int = 200
    """HTTP-style status code carried in ``response.status`` when not allowed."""
    reason: str = ""
    """``Forbidden`` (denied), ``BadRequest`` / ``InternalError`` (error)."""
    detail: Mapping[str, object] = field(default_factory=dict)
    """The offending values, for the one log line a refusal gets."""
    pod: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    """The pod as admitted (the patch applied) when the mutation pass ran; else ``None``."""
    templates: tuple[ClaimTemplate, ...] = ()
    """ResourceClaimTemplates the patched pod references (DRA conversion, rule 4b): they must
    exist before the reply goes out (except on a dry run)."""
    warnings: tuple[str, ...] = ()
    """Admission warnings for the client (``kubectl`` prints them)."""

    @property
    def allowed(self) -> bool:
        return self.outcome in ("allowed", "mutated")


def allowed(message: str = "") -> Decision:
    """Allowed unchanged, with why."""
    return Decision("allowed", message=message)


def denied(message: str, **detail: object) -> Decision:
    """Denied, code 403 ``Forbidden``."""
    return Decision("denied", message=message, code=403, reason="Forbidden", detail=detail)


def error(code: int, message: str, **detail: object) -> Decision:
    """An error answer: ``BadRequest`` for code 400, else ``InternalError``."""
    reason = "BadRequest" if code == 400 else "InternalError"
    return Decision("error", message=message, code=code, reason=reason, detail=detail)
