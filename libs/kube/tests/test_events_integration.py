"""EventRecorder against the emulated API server."""

from __future__ import annotations

import asyncio
import contextlib

from hami_kube.events import EventRecorder, EventType, ObjectReference
from hami_kube.resources import PODS
from hami_kube.rest import KubeClient
from hami_kubesim.testing import RunningApiServer

from .helpers import pod


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_repeats_are_aggregated(sim: RunningApiServer, kube: KubeClient) -> None:
    created = await kube.create(PODS, pod("a"))
    clock = FakeClock()
    recorder = EventRecorder(kube, component="hami-scheduler", host="h1", window_s=60, clock=clock)
    for _ in range(3):
        await recorder.record(created, EventType.WARNING, "FilteringFailed", "no node fits")
    await recorder.record(created, EventType.NORMAL, "Scheduled", "bound to n1")
    events = sim.server.list("events", namespace="default")
    by_reason = {e["reason"]: e for e in events}
    assert len(events) == 2
    warning = by_reason["FilteringFailed"]
    assert warning["count"] == 3
    assert warning["type"] == "Warning"
    assert warning["source"] == {"component": "hami-scheduler", "host": "h1"}
    assert warning["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert warning["involvedObject"]["kind"] == "Pod"
    assert by_reason["Scheduled"]["count"] == 1

    clock.now = 61.0  # past the window: a fresh Event
    await recorder.record(created, EventType.WARNING, "FilteringFailed", "no node fits")
    assert len(sim.server.list("events", namespace="default")) == 3


async def test_deleted_event_is_recreated(sim: RunningApiServer, kube: KubeClient) -> None:
    recorder = EventRecorder(kube, component="c")
    ref = ObjectReference("Node", "n1")
    await recorder.record(ref, EventType.NORMAL, "R", "m")
    [event] = sim.server.list("events", namespace="default")
    await sim.server.delete("events", event["metadata"]["name"], namespace="default")
    await recorder.record(ref, EventType.NORMAL, "R", "m")
    [again] = sim.server.list("events", namespace="default")
    assert again["count"] == 1
    assert again["involvedObject"] == {"kind": "Node", "name": "n1", "apiVersion": "v1"}


async def test_failures_never_reach_the_caller(sim: RunningApiServer, kube: KubeClient) -> None:
    sim.server.inject_error("create", "events", code=500)
    recorder = EventRecorder(kube, component="c")
    await recorder.record(ObjectReference("Node", "n1"), EventType.WARNING, "R", "m")
    assert sim.server.list("events") == []
    sim.server.clear_faults()
    await recorder.record(ObjectReference("Node", "n1"), EventType.WARNING, "R", "m")
    assert len(sim.server.list("events")) == 1


async def test_emit_queues_and_run_writes(sim: RunningApiServer, kube: KubeClient) -> None:
    recorder = EventRecorder(kube, component="c", queue_size=2)
    ref = ObjectReference("Node", "n1")
    recorder.emit(ref, EventType.NORMAL, "A", "m")
    recorder.emit(ref, EventType.NORMAL, "B", "m")
    recorder.emit(ref, EventType.NORMAL, "C", "m")  # queue full: dropped, not raised
    assert recorder.dropped == 1
    task = asyncio.create_task(recorder.run(), name="event-recorder")
    try:
        async with asyncio.timeout(10):
            await recorder.flush()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    reasons = sorted(e["reason"] for e in sim.server.list("events"))
    assert reasons == ["A", "B"]
