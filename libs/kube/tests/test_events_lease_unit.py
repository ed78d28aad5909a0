"""Pure parts of the event recorder and the leader elector."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hami_kube.events import EventType, ObjectReference, build_event
from hami_kube.leaderelection import LeaderElectionConfig, LeaseRecord

NOW = datetime(2026, 7, 24, 10, 15, 30, 999999, tzinfo=UTC)


def test_reference_from_object() -> None:
    pod = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7"},
    }
    ref = ObjectReference.from_object(pod)
    assert ref == ObjectReference("Pod", "p", "ns", "u1", "v1", "7")
    assert ref.to_json() == {
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "apiVersion": "v1",
        "resourceVersion": "7",
    }


def test_event_for_a_pod() -> None:
    event = build_event(
        ObjectReference("Pod", "p", "ns", "u1"),
        event_type=EventType.WARNING,
        reason="FilteringFailed",
        message="no node fits",
        component="hami-scheduler",
        host="node-a",
        now=NOW,
        name_suffix=0xABC,
    )
    assert event["metadata"] == {"name": "p.abc", "namespace": "ns"}
    assert event["involvedObject"] == {
        "kind": "Pod",
        "name": "p",
        "namespace": "ns",
        "uid": "u1",
        "apiVersion": "v1",
    }
    assert event["type"] == "Warning"
    assert event["source"] == {"component": "hami-scheduler", "host": "node-a"}
    assert event["count"] == 1
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-07-24T10:15:30Z"


def test_event_for_a_node_lands_in_default() -> None:
    event = build_event(
        ObjectReference("Node", "n1"),
        event_type="Normal",
        reason="R",
        message="m",
        component="c",
        host="",
        now=NOW,
        name_suffix=1,
    )
    assert event["metadata"]["namespace"] == "default"
    assert "namespace" not in event["involvedObject"]
    assert event["source"] == {"component": "c"}


def test_lease_record_round_trip() -> None:
    acquired, renewed = "2026-07-24T10:15:30.000001Z", "2026-07-24T10:15:31.000001Z"
    spec = {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": acquired,
        "renewTime": renewed,
        "leaseTransitions": 3,
    }
    record = LeaseRecord.from_lease({"spec": spec})
    assert record == LeaseRecord("a", 15, acquired, renewed, 3)
    assert record.to_spec() == spec


def test_lease_record_tolerates_an_empty_or_odd_spec() -> None:
    assert LeaseRecord.from_lease({}) == LeaseRecord()
    odd = {"spec": {"holderIdentity": 5, "leaseDurationSeconds": True, "acquireTime": None}}
    assert LeaseRecord.from_lease(odd) == LeaseRecord()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"identity": ""}, "identity"),
        ({"name": ""}, "Lease name"),
        ({"lease_duration_s": 10.0, "renew_deadline_s": 10.0}, "lease_duration_s"),
        ({"renew_deadline_s": 2.0, "retry_period_s": 2.0}, "renew_deadline_s"),
    ],
)
def test_config_validation(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"namespace": "ns", "name": "l", "identity": "me"}
    with pytest.raises(ValueError, match=match):
        LeaderElectionConfig(**(base | kwargs))  # type: ignore[arg-type]


def test_lease_duration_seconds_is_a_positive_int() -> None:
    config = LeaderElectionConfig(
        namespace="ns",
        name="l",
        identity="me",
        lease_duration_s=1.4,
        renew_deadline_s=1.0,
        retry_period_s=0.2,
    )
    assert config.lease_duration_seconds == 1
