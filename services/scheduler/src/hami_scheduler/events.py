"""The Events the scheduler records, with HAMi's reasons and message formats.

On the pod: ``FilteringSucceed`` (``find fit node(<n>), <k> nodes not fit, <m> nodes
fit(<n1>:<score>,...)``), ``FilteringFailed`` (``no available node, <N> nodes do not meet``
followed by ``<count> nodes <Reason>(<nodes>)`` per reason, or the error), ``BindingSucceed``
(``Successfully binding node [<node>] to <ns>/<name>``) and ``BindingFailed`` (the error).  On a
node: ``InvalidDeviceAnnotation`` (Warning) when a device annotation cannot be read, and
``NodeLockOverdue`` (Warning) when a pod holds the node lock past ``--node-lock-timeout`` while
still waiting for its Allocate (:mod:`hami_scheduler.bind.upkeep`).  After a preemption
(:mod:`hami_scheduler.preempt_events`): ``PreemptedForGPU`` on each victim and
``PreemptingForGPU`` on the preemptor.

Events are queued (:meth:`~hami_kube.events.EventRecorder.emit`), never awaited on the request
path; messages are built only up to the API's length limit, so a 5,000-node answer does not
cost a 5,000-entry string.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from hami_kube.events import MAX_MESSAGE_LENGTH, EventRecorder, EventType, ObjectReference
from hami_kube.objects import PodView
from hami_scheduler.core.reasons import reason_words

__all__ = [
    "BINDING_FAILED",
    "BINDING_SUCCEED",
    "FILTERING_FAILED",
    "FILTERING_SUCCEED",
    "INVALID_DEVICE_ANNOTATION",
    "NODE_LOCK_OVERDUE",
    "PREEMPTED_FOR_GPU",
    "PREEMPTING_FOR_GPU",
    "SchedulerEvents",
    "filter_failed_message",
    "filter_succeeded_message",
    "reason_words",
]

FILTERING_SUCCEED: Final = "FilteringSucceed"
FILTERING_FAILED: Final = "FilteringFailed"
BINDING_SUCCEED: Final = "BindingSucceed"
BINDING_FAILED: Final = "BindingFailed"
INVALID_DEVICE_ANNOTATION: Final = "InvalidDeviceAnnotation"
NODE_LOCK_OVERDUE: Final = "NodeLockOverdue"
PREEMPTED_FOR_GPU: Final = "PreemptedForGPU"
PREEMPTING_FOR_GPU: Final = "PreemptingForGPU"


def _joined(items: Iterable[str], budget: int) -> str:
    parts: list[str] = []
    used = 0
    for item in items:
        used += len(item) + 1
        if used > budget:
            parts.append("...")
            break
        parts.append(item)
    return ",".join(parts)


def filter_succeeded_message(node: str, fitting: Mapping[str, float], not_fit: int) -> str:
    budget = MAX_MESSAGE_LENGTH - len(node) - 64
    scores = _joined((f"{n}:{s:.2f}" for n, s in fitting.items()), budget)
    return f"find fit node({node}), {not_fit} nodes not fit, {len(fitting)} nodes fit({scores})"


def filter_failed_message(failed: Mapping[str, str]) -> str:
    by_reason: dict[str, list[str]] = {}
    for node, reason in failed.items():
        for word in reason_words(reason):
            by_reason.setdefault(word, []).append(node)
    parts = [f"no available node, {len(failed)} nodes do not meet"]
    budget = MAX_MESSAGE_LENGTH - len(parts[0])
    for word in sorted(by_reason):
        nodes = by_reason[word]
        head = f"{len(nodes)} nodes {word}("
        listed = _joined(sorted(nodes), max(budget - len(head) - 4, 0))
        part = f"{head}{listed})"
        budget -= len(part) + 2
        parts.append(part)
        if budget <= 0:
            break
    return "; ".join(parts)


def _pod_ref(pod: PodView) -> ObjectReference:
    return ObjectReference(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid)


class SchedulerEvents:
    """Queues the scheduler's Events; with no recorder (tests, the bench) it records nothing."""

    def __init__(self, recorder: EventRecorder | None) -> None:
        self._recorder = recorder

    def _emit(self, ref: ObjectReference, kind: EventType, reason: str, message: str) -> None:
        if self._recorder is not None and ref.name:
            self._recorder.emit(ref, kind, reason, message[:MAX_MESSAGE_LENGTH])

    def filtering_succeeded(
        self, pod: PodView, node: str, fitting: Mapping[str, float], not_fit: int
    ) -> None:
        if self._recorder is None:
            return
        message = filter_succeeded_message(node, fitting, not_fit)
        self._emit(_pod_ref(pod), EventType.NORMAL, FILTERING_SUCCEED, message)

    def filtering_failed(self, pod: PodView, failed: Mapping[str, str]) -> None:
        if self._recorder is None:
            return
        message = filter_failed_message(failed)
        self._emit(_pod_ref(pod), EventType.WARNING, FILTERING_FAILED, message)

    def filter_error(self, pod: PodView, error: str) -> None:
        self._emit(_pod_ref(pod), EventType.WARNING, FILTERING_FAILED, error)

    def binding_succeeded(self, pod: PodView, node: str) -> None:
        message = f"Successfully binding node [{node}] to {pod.namespace}/{pod.name}"
        self._emit(_pod_ref(pod), EventType.NORMAL, BINDING_SUCCEED, message)

    def binding_failed(self, pod: PodView, error: str) -> None:
        self._emit(_pod_ref(pod), EventType.WARNING, BINDING_FAILED, error)

    def bad_node_annotation(self, node: str, key: str, problem: str) -> None:
        ref = ObjectReference(kind="Node", name=node)
        self._emit(ref, EventType.WARNING, INVALID_DEVICE_ANNOTATION, f"{problem} ({key})")

    def node_lock_overdue(self, node: str, message: str) -> None:
        ref = ObjectReference(kind="Node", name=node)
        self._emit(ref, EventType.WARNING, NODE_LOCK_OVERDUE, message)

    def preempted_for_gpu(self, namespace: str, name: str, uid: str, message: str) -> None:
        ref = ObjectReference(kind="Pod", name=name, namespace=namespace, uid=uid)
        self._emit(ref, EventType.NORMAL, PREEMPTED_FOR_GPU, message)

    def preempting_for_gpu(self, namespace: str, name: str, uid: str, message: str) -> None:
        ref = ObjectReference(kind="Pod", name=name, namespace=namespace, uid=uid)
        self._emit(ref, EventType.NORMAL, PREEMPTING_FOR_GPU, message)
