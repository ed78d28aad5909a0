"""Capped exponential backoff with jitter, as a pure policy plus a small stateful helper."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """``delay(n) = min(cap, initial * factor**n)``, then spread by ``jitter``.

    With ``jitter = 0.5`` a delay ``d`` becomes a uniform value in ``[d * 0.5, d]``, so many
    clients that failed together do not retry together, and no delay exceeds ``cap``.
    """

    initial: float = 0.2
    factor: float = 2.0
    cap: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.initial < 0 or self.cap < 0:
            raise ValueError("backoff delays must not be negative")
        if self.factor < 1:
            raise ValueError("backoff factor must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("backoff jitter must be within [0, 1]")

    def base_delay(self, attempt: int) -> float:
        """The un-jittered delay before retry number ``attempt`` (0-based), capped."""
        if self.initial == 0:
            return 0.0
        delay = self.initial
        for _ in range(attempt):
            delay *= self.factor
            if delay >= self.cap:
                return self.cap
        return min(delay, self.cap)

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Jittered delay before retry ``attempt``: within ``[base * (1 - jitter), base]``."""
        base = self.base_delay(attempt)
        draw = (rng or random).random()
        return base * (1 - self.jitter * draw)


class Backoff:
    """Counts consecutive failures against a policy; ``reset()`` after a success."""

    __slots__ = ("_attempt", "_rng", "policy")

    def __init__(self, policy: BackoffPolicy, *, rng: random.Random | None = None) -> None:
        self.policy = policy
        self._rng = rng
        self._attempt = 0

    @property
    def attempt(self) -> int:
        return self._attempt

    def next_delay(self) -> float:
        """The delay before the next retry; each call counts one more failure."""
        delay = self.policy.delay(self._attempt, self._rng)
        self._attempt += 1
        return delay

    def reset(self) -> None:
        self._attempt = 0


__all__ = [
    "Backoff",
    "BackoffPolicy",
]
