"""Timestamps, UIDs and generated names in the formats the API server uses."""

from __future__ import annotations

import random
import uuid
from datetime import UTC, datetime

_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def rfc3339(moment: datetime | None = None) -> str:
    """``metav1.Time``: seconds precision, UTC, ``Z`` suffix."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime | None = None) -> str:
    """``metav1.MicroTime``: six fractional digits."""
    return (moment or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_uid() -> str:
    return str(uuid.uuid4())


def generated_name(prefix: str, rng: random.Random) -> str:
    """``generateName`` + five characters, as the API server's name generator does."""
    base = prefix[: 63 - 5]
    return base + "".join(rng.choice(_NAME_ALPHABET) for _ in range(5))
