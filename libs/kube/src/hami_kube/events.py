"""core/v1 Event recording with aggregation of repeats; failures are logged, never raised.

An event is identified by (involved object, type, reason, message, component). The first
occurrence creates an Event named ``<object name>.<hex nanoseconds>`` (as client-go does); a
repeat within ``window_s`` merge-patches that Event's ``count`` and ``lastTimestamp`` instead of
creating another. Events about cluster-scoped objects (nodes) go to namespace ``default``.

Two ways to record: ``await recorder.record(...)`` writes now; ``recorder.emit(...)`` only queues
(never blocks) and the ``run()`` task writes in the background, dropping events when the queue is
full rather than slowing the caller.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import structlog

from hami_kube.errors import KubeError, NotFoundError
from hami_kube.objects import ObjectView
from hami_kube.resources import EVENTS, JsonObject
from hami_kube.rest import KubeClient, PatchType
from hami_kube.timefmt import format_time, utc_now

log = structlog.get_logger(__name__)

MAX_MESSAGE_LENGTH = 1024
MAX_REASON_LENGTH = 128
CLUSTER_SCOPED_EVENT_NAMESPACE = "default"


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectReference:
    """The ``involvedObject`` of an Event."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"
    resource_version: str = ""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> ObjectReference:
        """Reference to a decoded object (kind/apiVersion default to v1 Pod when absent)."""
        view = ObjectView(obj)
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        return cls(
            kind=kind if isinstance(kind, str) and kind else "Pod",
            name=view.name,
            namespace=view.namespace,
            uid=view.uid,
            api_version=api_version if isinstance(api_version, str) and api_version else "v1",
            resource_version=view.resource_version,
        )

    def to_json(self) -> JsonObject:
        ref: JsonObject = {"kind": self.kind, "name": self.name, "apiVersion": self.api_version}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.uid:
            ref["uid"] = self.uid
        if self.resource_version:
            ref["resourceVersion"] = self.resource_version
        return ref


@dataclass(frozen=True, slots=True)
class _Key:
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str


@dataclass(slots=True)
class _Seen:
    namespace: str
    name: str
    count: int
    last: float


def build_event(
    involved: ObjectReference,
    *,
    event_type: str,
    reason: str,
    message: str,
    component: str,
    host: str,
    now: datetime,
    name_suffix: int,
) -> JsonObject:
    """The Event object for a first occurrence (pure)."""
    namespace = involved.namespace or CLUSTER_SCOPED_EVENT_NAMESPACE
    timestamp = format_time(now)
    source: JsonObject = {"component": component}
    if host:
        source["host"] = host
    event: JsonObject = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved.name}.{name_suffix:x}", "namespace": namespace},
        "involvedObject": involved.to_json(),
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": source,
        "count": 1,
        "firstTimestamp": timestamp,
        "lastTimestamp": timestamp,
        "reportingComponent": component,
        "reportingInstance": host,
    }
    return event


class EventRecorder:
    """Records Events for one component (e.g. ``hami-scheduler``) on one host."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        host: str = "",
        window_s: float = 600.0,
        max_cached: int = 4096,
        queue_size: int = 1024,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self._client = client
        self._component = component
        self._host = host
        self._window = window_s
        self._max_cached = max_cached
        self._clock = clock
        self._now = now
        self._seen: OrderedDict[_Key, _Seen] = OrderedDict()
        self._lock = asyncio.Lock()
        self._queue: asyncio.Queue[tuple[ObjectReference, str, str, str]] = asyncio.Queue(
            queue_size
        )
        self.dropped = 0

    async def record(
        self,
        involved: ObjectReference | Mapping[str, Any],
        event_type: EventType | str,
        reason: str,
        message: str,
    ) -> None:
        """Create the Event or bump the count of a recent identical one. Never raises (except
        cancellation); failures are logged."""
        ref = (
            involved
            if isinstance(involved, ObjectReference)
            else ObjectReference.from_object(involved)
        )
        kind = str(event_type)
        reason = reason[:MAX_REASON_LENGTH]
        message = message[:MAX_MESSAGE_LENGTH]
        key = _Key(ref.kind, ref.namespace, ref.name, ref.uid, kind, reason, message)
        try:
            async with self._lock:
                await self._write(key, ref, kind, reason, message)
        except KubeError as exc:
            log.warning(
                "cannot record event",
                reason=reason,
                object=f"{ref.kind}/{ref.namespace}/{ref.name}",
                error=str(exc),
            )
        except Exception:
            log.exception("cannot record event", reason=reason)

    def emit(
        self,
        involved: ObjectReference | Mapping[str, Any],
        event_type: EventType | str,
        reason: str,
        message: str,
    ) -> None:
        """Queue an Event for ``run()`` to write; never blocks or raises (drops when full)."""
        ref = (
            involved
            if isinstance(involved, ObjectReference)
            else ObjectReference.from_object(involved)
        )
        try:
            self._queue.put_nowait((ref, str(event_type), reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("event queue full, dropping event", reason=reason)

    async def run(self) -> None:
        """Write queued events until cancelled."""
        while True:
            ref, kind, reason, message = await self._queue.get()
            try:
                await self.record(ref, kind, reason, message)
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every queued event has been written (or has failed)."""
        await self._queue.join()

    async def _write(
        self, key: _Key, ref: ObjectReference, kind: str, reason: str, message: str
    ) -> None:
        now_mono = self._clock()
        seen = self._seen.get(key)
        if seen is not None and now_mono - seen.last <= self._window:
            patch = {"count": seen.count + 1, "lastTimestamp": format_time(self._now())}
            try:
                await self._client.patch(
                    EVENTS, seen.name, patch, namespace=seen.namespace, patch_type=PatchType.MERGE
                )
            except NotFoundError:
                # The Event expired or was deleted: start a new one below.
                del self._seen[key]
            else:
                seen.count += 1
                seen.last = now_mono
                self._seen.move_to_end(key)
                return
        event = build_event(
            ref,
            event_type=kind,
            reason=reason,
            message=message,
            component=self._component,
            host=self._host,
            now=self._now(),
            name_suffix=time.time_ns(),
        )
        created = await self._client.create(EVENTS, event)
        stored = ObjectView(created)
        self._seen[key] = _Seen(
            namespace=stored.namespace or str(event["metadata"]["namespace"]),
            name=stored.name or str(event["metadata"]["name"]),
            count=1,
            last=now_mono,
        )
        self._seen.move_to_end(key)
        while len(self._seen) > self._max_cached:
            self._seen.popitem(last=False)


__all__ = [
    "CLUSTER_SCOPED_EVENT_NAMESPACE",
    "MAX_MESSAGE_LENGTH",
    "MAX_REASON_LENGTH",
    "EventRecorder",
    "EventType",
    "ObjectReference",
    "build_event",
]
