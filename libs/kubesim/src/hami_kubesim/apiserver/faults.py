"""Fault injection: error answers and added latency per verb and resource, drawn from a seeded
random generator so a failing test replays exactly."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from hami_kubesim.apiserver.errors import StatusError, reason_for

_MESSAGES = {
    429: "Too many requests, please try again later.",
    500: "Internal error occurred: injected fault",
    503: "The server is currently unable to handle the request (injected fault)",
    504: "Timeout: request did not complete within requested timeout - context deadline exceeded",
}


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """Answer matching requests with ``code`` (probability ``rate``; at most ``times`` times when
    set).  ``verb``/``resource`` are shell patterns: ``create``, ``*``, ``pods``, ``pods/*``,
    ``leases*``."""

    verb: str = "*"
    resource: str = "*"
    code: int = 500
    rate: float = 1.0
    times: int | None = None
    message: str = ""
    retry_after: int = 1


@dataclass(frozen=True, slots=True)
class LatencyRule:
    """Delay matching requests by ``seconds`` before they are served."""

    seconds: float
    verb: str = "*"
    resource: str = "*"


@dataclass(slots=True)
class _Armed:
    rule: ErrorRule
    left: int | None
    fired: int = 0


@dataclass
class Faults:
    """The active fault plan of one API server."""

    seed: int = 0
    _errors: list[_Armed] = field(default_factory=list)
    _latency: list[LatencyRule] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add_error(self, rule: ErrorRule) -> None:
        self._errors.append(_Armed(rule, rule.times))

    def add_latency(self, rule: LatencyRule) -> None:
        self._latency.append(rule)

    def clear(self) -> None:
        self._errors.clear()
        self._latency.clear()

    def clear_latency(self) -> None:
        """Drop the latency rules only (requests already delayed keep their delay)."""
        self._latency.clear()

    def reseed(self, seed: int) -> None:
        self.seed = seed
        self._rng = random.Random(seed)

    @staticmethod
    def _hit(pattern_verb: str, pattern_res: str, verb: str, resources: tuple[str, ...]) -> bool:
        return fnmatchcase(verb, pattern_verb) and any(
            fnmatchcase(r, pattern_res) for r in resources
        )

    def error_for(self, verb: str, resources: tuple[str, ...]) -> StatusError | None:
        """The injected error for this request, if a rule fires.  ``resources`` names the
        target in every accepted spelling, e.g. ``("leases", "leases.coordination.k8s.io")``."""
        for armed in self._errors:
            rule = armed.rule
            if armed.left == 0 or not self._hit(rule.verb, rule.resource, verb, resources):
                continue
            if rule.rate < 1.0 and self._rng.random() >= rule.rate:
                continue
            if armed.left is not None:
                armed.left -= 1
            armed.fired += 1
            message = rule.message or _MESSAGES.get(rule.code, "injected fault")
            retry = rule.retry_after if rule.code in (429, 503) else None
            details: dict[str, Any] | None = {"retryAfterSeconds": retry} if retry else None
            return StatusError(
                rule.code, message, reason=reason_for(rule.code), details=details, retry_after=retry
            )
        return None

    def latency_for(self, verb: str, resources: tuple[str, ...]) -> float:
        return sum(
            r.seconds for r in self._latency if self._hit(r.verb, r.resource, verb, resources)
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "errors": [{**asdict(a.rule), "fired": a.fired} for a in self._errors],
            "latency": [asdict(r) for r in self._latency],
        }

    def configure(self, spec: dict[str, Any]) -> None:
        """Replace the plan from its JSON form (see :meth:`to_dict`; ``fired`` is ignored)."""
        errors = [
            ErrorRule(**{k: v for k, v in e.items() if k != "fired"})
            for e in spec.get("errors") or []
        ]
        latency = [LatencyRule(**r) for r in spec.get("latency") or []]
        self.clear()
        if "seed" in spec:
            self.reseed(int(spec["seed"]))
        for rule in errors:
            self.add_error(rule)
        for lat in latency:
            self.add_latency(lat)
