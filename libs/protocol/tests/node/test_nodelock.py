"""Node lock codec and the acquire/release decisions (HAMi's nodelock behaviours)."""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.errors import DecodeError, ValidationError
from hami_protocol.node.lock import (
    DEFAULT_LOCK_TIMEOUT,
    LockAction,
    NodeLock,
    OwnerState,
    ReleaseAction,
    decide_acquire,
    decide_release,
    decode_node_lock,
    encode_node_lock,
    is_expired,
    is_overdue,
    owner_state,
    owner_to_check,
)
from hami_protocol.node.lock_keys import (
    CAMBRICON_LOCK,
    MUTEX_LOCK,
    decode_cambricon_lock,
    encode_cambricon_lock,
    lock_rule,
)

T0 = datetime(2024, 5, 14, 7, 7, 33, tzinfo=UTC)
TIMEOUT = DEFAULT_LOCK_TIMEOUT


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2024-05-14T07:07:33Z,default,train-0", NodeLock(T0, "default", "train-0")),
        ("2024-05-14T07:07:33Z", NodeLock(T0)),
        ("2024-05-14T15:07:33+08:00,ns,p", NodeLock(T0, "ns", "p")),
        ("2024-05-14T07:07:33.123456789Z", NodeLock(T0.replace(microsecond=123456))),
        (" 2024-05-14T07:07:33Z , ns , p ", NodeLock(T0, "ns", "p")),
        ("2024-05-14T07:07:33Z,,", NodeLock(T0)),
    ],
)
def test_decode_examples(value: str, expected: NodeLock) -> None:
    assert decode_node_lock(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "2024-05-14T07:07:33Z,ns",
        "2024-05-14T07:07:33Z,ns,p,extra",
        "2024-05-14 07:07:33Z,ns,p",
        "2024-05-14T07:07:33,ns,p",
        "2024-13-14T07:07:33Z",
        "2024-05-14T07:07:33+24:00",
        "1715670453",
    ],
)
def test_decode_errors_name_the_key(value: str) -> None:
    with pytest.raises(DecodeError, match=re.escape("hami.io/mutex.lock")):
        decode_node_lock(value)


def test_encode_is_rfc3339_utc_whole_seconds() -> None:
    local = datetime(2024, 5, 14, 15, 7, 33, 999, tzinfo=timezone(timedelta(hours=8)))
    assert encode_node_lock(NodeLock(local, "default", "train-0")) == (
        "2024-05-14T07:07:33Z,default,train-0"
    )
    assert encode_node_lock(NodeLock(T0)) == "2024-05-14T07:07:33Z"
    assert NodeLock(T0.replace(tzinfo=None)) == NodeLock(T0)


@pytest.mark.parametrize(
    "lock", [NodeLock(T0, "ns", ""), NodeLock(T0, "", "p"), NodeLock(T0, "a,b", "p")]
)
def test_encode_rejects_partial_or_ambiguous_owners(lock: NodeLock) -> None:
    with pytest.raises(ValidationError):
        encode_node_lock(lock)


def test_is_expired_is_strictly_after_timeout() -> None:
    lock = NodeLock(T0)
    assert not is_expired(lock, T0 + TIMEOUT, TIMEOUT)
    assert is_expired(lock, T0 + TIMEOUT + timedelta(seconds=1), TIMEOUT)


OWNED = "2024-05-14T07:07:33Z,default,train-0"
LEGACY = "2024-05-14T07:07:33Z"
SOON = T0 + timedelta(minutes=1)
LATER = T0 + timedelta(minutes=6)


W, G, T, E, F, B, U = (
    OwnerState.WAITING,
    OwnerState.GONE,
    OwnerState.TERMINAL,
    OwnerState.ELSEWHERE,
    OwnerState.FINISHED,
    OwnerState.BINDING,
    OwnerState.UNKNOWN,
)


@pytest.mark.parametrize(
    ("value", "pod", "now", "owner", "expected"),
    [
        pytest.param(None, "train-1", SOON, None, LockAction.ACQUIRE, id="free"),
        pytest.param(OWNED, "train-0", SOON, None, LockAction.REENTER, id="same-pod-reentrant"),
        pytest.param(OWNED, "train-0", LATER, None, LockAction.TAKEOVER_EXPIRED, id="own-expired"),
        pytest.param(OWNED, "train-1", SOON, G, LockAction.TAKEOVER_DANGLING, id="owner-gone"),
        pytest.param(OWNED, "train-1", SOON, T, LockAction.TAKEOVER_FINISHED, id="owner-ended"),
        pytest.param(OWNED, "train-1", SOON, E, LockAction.TAKEOVER_FINISHED, id="owner-elsewhere"),
        pytest.param(OWNED, "train-1", SOON, F, LockAction.TAKEOVER_FINISHED, id="owner-allocated"),
        pytest.param(OWNED, "train-1", SOON, W, LockAction.CONTENDED, id="owner-waiting"),
        # HAMi #3096: age alone never takes a lock from an owner that still waits for Allocate.
        pytest.param(OWNED, "train-1", LATER, W, LockAction.CONTENDED, id="owner-waiting-overdue"),
        pytest.param(OWNED, "train-1", SOON, B, LockAction.CONTENDED, id="owner-binding"),
        pytest.param(OWNED, "train-1", LATER, B, LockAction.TAKEOVER_EXPIRED, id="bind-died"),
        pytest.param(OWNED, "train-1", LATER, U, LockAction.CONTENDED, id="owner-unreadable"),
        pytest.param(OWNED, "train-1", LATER, None, LockAction.CONTENDED, id="owner-unchecked"),
        pytest.param(LEGACY, "train-1", SOON, None, LockAction.CONTENDED, id="legacy-live"),
        pytest.param(LEGACY, "train-1", LATER, None, LockAction.TAKEOVER_EXPIRED, id="legacy-old"),
        pytest.param("garbage", "train-1", SOON, None, LockAction.TAKEOVER_EXPIRED, id="corrupt"),
    ],
)
def test_decide_acquire(
    value: str | None, pod: str, now: datetime, owner: OwnerState | None, expected: LockAction
) -> None:
    action = decide_acquire(
        value, namespace="default", pod=pod, now=now, timeout=TIMEOUT, owner=owner
    )
    assert action is expected


@given(st.sampled_from(list(OwnerState)), st.integers(min_value=0, max_value=10**7))
def test_a_waiting_owner_keeps_its_lock_at_any_age(owner: OwnerState, seconds: int) -> None:
    now = T0 + timedelta(seconds=seconds)
    action = decide_acquire(
        OWNED, namespace="default", pod="train-1", now=now, timeout=TIMEOUT, owner=owner
    )
    if owner in (OwnerState.WAITING, OwnerState.UNKNOWN):
        assert action is LockAction.CONTENDED
    if action is not LockAction.CONTENDED:
        assert owner is not OwnerState.WAITING
    assert is_overdue(OWNED, now=now, timeout=TIMEOUT, owner=owner) == (
        owner is OwnerState.WAITING and seconds > TIMEOUT.total_seconds()
    )


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"exists": False}, OwnerState.GONE),
        ({"exists": True, "bound_to": "n1", "phase": "Succeeded"}, OwnerState.TERMINAL),
        ({"exists": True, "bound_to": "n1", "deleting": True}, OwnerState.TERMINAL),
        ({"exists": True}, OwnerState.BINDING),
        ({"exists": True, "bound_to": "n2"}, OwnerState.ELSEWHERE),
        ({"exists": True, "bound_to": "n1", "bind_phase": "success"}, OwnerState.FINISHED),
        ({"exists": True, "bound_to": "n1", "bind_phase": "failed"}, OwnerState.FINISHED),
        ({"exists": True, "bound_to": "n1", "bind_phase": "allocating"}, OwnerState.WAITING),
        ({"exists": True, "bound_to": "n1", "phase": "Pending"}, OwnerState.WAITING),
        ({"exists": True, "bound_to": "n1", "phase": "Running"}, OwnerState.WAITING),
    ],
)
def test_owner_state(kwargs: dict[str, object], expected: OwnerState) -> None:
    assert owner_state(node="n1", **kwargs) is expected  # type: ignore[arg-type]


def test_is_overdue_only_for_a_waiting_owner_past_the_timeout() -> None:
    assert is_overdue(OWNED, now=LATER, timeout=TIMEOUT, owner=OwnerState.WAITING)
    assert not is_overdue(OWNED, now=SOON, timeout=TIMEOUT, owner=OwnerState.WAITING)
    assert not is_overdue(OWNED, now=LATER, timeout=TIMEOUT, owner=OwnerState.BINDING)
    assert not is_overdue(LEGACY, now=LATER, timeout=TIMEOUT, owner=OwnerState.WAITING)
    assert not is_overdue(None, now=LATER, timeout=TIMEOUT, owner=OwnerState.WAITING)


@pytest.mark.parametrize(
    ("value", "pod", "now", "expected"),
    [
        (OWNED, "train-1", SOON, ("default", "train-0")),
        (OWNED, "train-0", SOON, None),
        (OWNED, "train-1", LATER, ("default", "train-0")),
        (LEGACY, "train-1", SOON, None),
        (None, "train-1", SOON, None),
        ("garbage", "train-1", SOON, None),
    ],
)
def test_owner_to_check(
    value: str | None, pod: str, now: datetime, expected: tuple[str, str] | None
) -> None:
    assert owner_to_check(value, namespace="default", pod=pod, now=now, timeout=TIMEOUT) == expected


@pytest.mark.parametrize(
    ("value", "namespace", "pod", "force", "expected"),
    [
        pytest.param(None, "default", "train-0", False, ReleaseAction.NOOP, id="absent"),
        pytest.param(OWNED, "default", "train-0", False, ReleaseAction.RELEASE, id="owner"),
        pytest.param(OWNED, "default", "train-1", False, ReleaseAction.NOOP, id="non-owner"),
        pytest.param(OWNED, "other", "train-0", False, ReleaseAction.NOOP, id="other-namespace"),
        pytest.param(OWNED, "default", "train-1", True, ReleaseAction.RELEASE, id="forced"),
        pytest.param(LEGACY, "any", "pod", False, ReleaseAction.RELEASE, id="legacy-anyone"),
        pytest.param("bad,default,train-0", "default", "train-0", False, ReleaseAction.RELEASE),
        pytest.param("bad,default,train-0", "default", "train-1", False, ReleaseAction.NOOP),
    ],
)
def test_decide_release(
    value: str | None, namespace: str, pod: str, force: bool, expected: ReleaseAction
) -> None:
    assert decide_release(value, namespace=namespace, pod=pod, force=force) is expected


NAMES = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
MOMENTS = st.datetimes(
    min_value=datetime(1000, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
).map(lambda moment: moment.replace(microsecond=0))


@given(MOMENTS, st.one_of(st.none(), st.tuples(NAMES, NAMES)))
def test_round_trip(moment: datetime, owner: tuple[str, str] | None) -> None:
    lock = NodeLock(moment, *owner) if owner else NodeLock(moment)
    encoded = encode_node_lock(lock)
    assert decode_node_lock(encoded) == lock
    assert encode_node_lock(decode_node_lock(encoded)) == encoded
    if owner:
        assert decide_release(encoded, namespace=owner[0], pod=owner[1]) is ReleaseAction.RELEASE
        assert (
            decide_acquire(encoded, namespace=owner[0], pod=owner[1], now=moment, timeout=TIMEOUT)
            is LockAction.REENTER
        )


@given(st.text() | st.text().map(lambda tail: "2024-05-14T07:07:33Z," + tail))
def test_garbage_decodes_or_raises_decode_error_and_decisions_never_raise(value: str) -> None:
    with contextlib.suppress(DecodeError):
        decode_node_lock(value)
    action = decide_acquire(value, namespace="ns", pod="p", now=SOON, timeout=TIMEOUT)
    assert action in set(LockAction)
    assert decide_release(value, namespace="ns", pod="p") in set(ReleaseAction)


# -- the vendors' lock keys (hami_protocol.node.lock_keys) ------------------------------------


def test_cambricon_lock_is_a_bare_rfc3339_time_round_trip() -> None:
    value = encode_cambricon_lock(T0)
    assert value == "2024-05-14T07:07:33Z"
    assert decode_cambricon_lock(value) == NodeLock(T0)
    assert decode_cambricon_lock("2024-05-14T09:07:33+02:00").acquired == T0


@pytest.mark.parametrize("value", ["2024-05-14T07:07:33Z,default,p", "yesterday", ""])
def test_a_cambricon_lock_that_is_not_one_time_names_its_key(value: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_cambricon_lock(value)
    assert caught.value.key == keys.CAMBRICON_DSMLU_LOCK


def test_lock_rules_per_key() -> None:
    assert lock_rule(keys.NODE_LOCK) is MUTEX_LOCK
    assert lock_rule(keys.CAMBRICON_DSMLU_LOCK) is CAMBRICON_LOCK
    assert CAMBRICON_LOCK.timeout_or(TIMEOUT) == timedelta(minutes=2)
    assert MUTEX_LOCK.timeout_or(TIMEOUT) == TIMEOUT
    assert CAMBRICON_LOCK.encode(NodeLock(T0, "ns", "p")) == "2024-05-14T07:07:33Z"
    assert MUTEX_LOCK.encode(NodeLock(T0, "ns", "p")) == "2024-05-14T07:07:33Z,ns,p"
    assert CAMBRICON_LOCK.allocated({keys.CAMBRICON_DSMLU_ASSIGNED: "true"})
    assert not CAMBRICON_LOCK.allocated({keys.BIND_PHASE: "success"})
    assert MUTEX_LOCK.allocated({keys.BIND_PHASE: "failed"})
    with pytest.raises(ValidationError):
        lock_rule("example.com/other.lock")


def test_owner_state_takes_the_vendors_own_done_marker_when_given() -> None:
    bound = {"exists": True, "node": "n1", "bound_to": "n1", "bind_phase": "allocating"}
    assert owner_state(**bound, allocated=True) is OwnerState.FINISHED  # type: ignore[arg-type]
    success = {**bound, "bind_phase": "success"}
    assert owner_state(**success, allocated=False) is OwnerState.WAITING  # type: ignore[arg-type]
