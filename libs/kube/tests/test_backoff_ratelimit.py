"""Backoff policy and token bucket."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube.backoff import Backoff, BackoffPolicy
from hami_kube.ratelimit import TokenBucket


def test_base_delays_grow_and_cap() -> None:
    policy = BackoffPolicy(initial=0.1, factor=2.0, cap=1.0, jitter=0.0)
    assert [policy.base_delay(n) for n in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.base_delay(10_000) == 1.0


@given(
    st.integers(min_value=0, max_value=200),
    st.floats(min_value=0.0, max_value=1.0),
    st.integers(min_value=0, max_value=2**32),
)
def test_jittered_delay_stays_within_bounds(attempt: int, jitter: float, seed: int) -> None:
    policy = BackoffPolicy(initial=0.05, factor=3.0, cap=7.0, jitter=jitter)
    delay = policy.delay(attempt, random.Random(seed))
    base = policy.base_delay(attempt)
    assert base * (1 - jitter) - 1e-12 <= delay <= base + 1e-12
    assert delay <= policy.cap


def test_backoff_counts_and_resets() -> None:
    backoff = Backoff(BackoffPolicy(initial=1.0, factor=2.0, cap=8.0, jitter=0.0))
    assert [backoff.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert backoff.attempt == 5
    backoff.reset()
    assert backoff.next_delay() == 1.0


@pytest.mark.parametrize(
    "kwargs", [{"initial": -1.0}, {"factor": 0.5}, {"jitter": 1.5}, {"cap": -2.0}]
)
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="backoff"):
        BackoffPolicy(**kwargs)


def test_token_bucket_allows_burst_then_paces() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=2.0, burst=3, clock=lambda: now[0])
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.5)
    assert bucket.reserve() == pytest.approx(1.0)
    now[0] = 10.0  # long idle: refills up to burst only
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.5)


def test_token_bucket_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps=0, burst=1)
