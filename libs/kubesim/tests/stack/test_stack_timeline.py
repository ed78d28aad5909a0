"""The timeline recorder follows node locks and pod states as the API server commits them, and
objects restored into the store keep their status and creation time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.stack.chaos.timeline import TimelineRecorder
from hami_kubesim.stack.state import LockMoment, PodMoment
from hami_protocol import keys

T0 = datetime(2026, 7, 1, 12, 0, 0, tzinfo=UTC)


class Ticks:
    """A clock that moves one second per reading."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


async def test_locks_and_pod_states_are_recorded_in_commit_order() -> None:
    api = ApiServer()
    await api.create("nodes", {"metadata": {"name": "n1", "annotations": {keys.NODE_LOCK: "x"}}})
    await api.create("pods", _pod("before"))
    clock = Ticks()
    with TimelineRecorder(api, clock=clock) as recorder:
        lock = {"metadata": {"annotations": {keys.NODE_LOCK: "y"}}}
        await api.patch("nodes", "n1", lock, patch_type="merge")
        await api.patch("nodes", "n1", {"metadata": {"labels": {"a": "b"}}}, patch_type="merge")
        await api.create("pods", _pod("p"))
        await api.bind("default", "p", "n1", annotations={keys.BIND_PHASE: "allocating"})
        await api.patch(
            "pods",
            "p",
            {"metadata": {"annotations": {keys.BIND_PHASE: "success"}}},
            namespace="default",
            patch_type="merge",
        )
        await api.delete("pods", "p", namespace="default")
        timeline = recorder.timeline()
    await api.create("pods", _pod("after"))  # no longer recorded
    start = T0 + timedelta(seconds=1)
    assert timeline.since == start
    assert timeline.locks == (
        LockMoment(start, "n1", "x"),
        LockMoment(start + timedelta(seconds=1), "n1", "y"),  # the label change is not one
    )
    assert [(m.key, m.exists, m.node, m.phase, m.bind_phase) for m in timeline.pods] == [
        ("default/before", True, "", "Pending", ""),
        ("default/p", True, "", "Pending", ""),
        ("default/p", True, "n1", "Pending", "allocating"),
        ("default/p", True, "n1", "Pending", "success"),
        ("default/p", False, "", "", ""),
    ]
    bound_at = timeline.pods[2].at
    assert timeline.pod_at("default/p", bound_at) == timeline.pods[2]
    assert timeline.pod_at("default/p", start) is None
    assert timeline.lock_at("n1", start) == "x"
    assert timeline.lock_at("n1", bound_at) == "y"
    assert timeline.changes(bound_at, bound_at) == [bound_at]
    assert isinstance(timeline.pods[-1], PodMoment)


async def test_a_restored_object_keeps_its_status_and_creation_time_and_skips_admission() -> None:
    async def refuse(*_: Any, **__: Any) -> dict[str, Any]:
        raise AssertionError("admission must not run for a restored pod")

    api = ApiServer(admission=refuse)
    seen: list[tuple[str, str]] = []
    stop = api.observe(lambda resource, kind, obj: seen.append((resource, kind)))
    pod = _pod("old")
    pod["metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
    pod["spec"]["nodeName"] = "n1"
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.9"}
    stored = api.restore("pods", pod)
    assert stored["metadata"]["creationTimestamp"] == "2020-01-01T00:00:00Z"
    assert stored["metadata"]["uid"]
    assert stored["status"]["phase"] == "Running"
    assert stored["status"]["podIP"] == "10.0.0.9"
    assert seen == [("pods", "ADDED")]
    stop()
    api.restore("pods", _pod("fresh"))
    assert seen == [("pods", "ADDED")]
    fresh = api.get("pods", "fresh", namespace="default")
    assert fresh["status"]["phase"] == "Pending"  # defaulted like any new pod
