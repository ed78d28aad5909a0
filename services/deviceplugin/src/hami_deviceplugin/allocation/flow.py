"""The Allocate path every plugin of this daemon shares: find the pod, decide, commit, unlock.

One allocation at a time (HAMi holds a process-wide mutex for the whole call; the GPU and RDMA
plugins of one daemon share one lock), each under its own deadline (default 3 s).  Steps:

1. read the node (its lock names the pod) and the pod (:mod:`hami_deviceplugin.allocation.lookup`);
2. the plugin decides every container's answer (:meth:`PodAllocationFlow._decide`, pure apart
   from host preparation) and which pod annotations that consumes;
3. one merge patch on the pod commits the decision: the rewritten ``-devices-to-allocate`` and,
   when no list of any vendor waits any more, ``bind-phase: success``, guarded by the pod's
   resourceVersion (a concurrent change, e.g. the other plugin's commit, makes us re-read and
   decide again, so the last consumer always sees every list);
4. when the pod is done the node lock is released (resourceVersion-guarded, only if the lock is
   this pod's or a legacy one).

Any failure before the commit (bad annotations, no pod, API errors, the deadline) writes
``bind-phase: failed`` on the pod, releases the lock, records a Warning Event (``AllocateFailed``)
on the pod (on the node when no pod is known) and raises
:class:`~hami_deviceplugin.errors.AllocateError` for the gRPC layer.  Because the commit is a
single patch, a failure never leaves a list half consumed.  A lock that cannot be released after a
successful commit is logged; the scheduler's lock expiry is the backstop.

An Allocate cut off by a shutdown (the gRPC server cancels calls still running after its grace)
still cleans up, in a task of its own; :meth:`PodAllocationFlow.drain` lets those finish, within
their budget, before the daemon ends.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import structlog

from hami_deviceplugin.allocation.entries import AllocatingPod, ListPlan, allocating_pod
from hami_deviceplugin.allocation.lookup import find_pod, lock_owner
from hami_deviceplugin.errors import AllocateError, FailureKind, VanishedLockOwnerError
from hami_kube.errors import ConflictError, KubeError, NotFoundError
from hami_kube.events import EventRecorder, EventType, ObjectReference
from hami_kube.objects import NodeView, PodView
from hami_kube.patch import patch_metadata
from hami_kube.resources import NODES, PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol.keys import BIND_PHASE, BIND_PHASE_FAILED, BIND_PHASE_SUCCESS, NODE_LOCK
from hami_protocol.node.lock import ReleaseAction, decide_release

__all__ = [
    "EVENT_REASON",
    "AllocationDecision",
    "FlowConfig",
    "Observe",
    "PodAllocationFlow",
    "list_decision",
]

log = structlog.get_logger(__name__)

EVENT_REASON = "AllocateFailed"

R = TypeVar("R")
P = TypeVar("P")
G = TypeVar("G", bound="_Grant")

Observe = Callable[..., None]
"""``observe(ok=, seconds=, reason=)``: the plugin's allocate metrics."""


@dataclass(frozen=True, slots=True)
class FlowConfig:
    node_name: str
    timeout_s: float = 3.0
    failure_timeout_s: float = 3.0
    """Budget for writing bind-phase failed, unlocking and queueing the Event after a failure."""
    conflict_attempts: int = 5


@dataclass(frozen=True, slots=True)
class AllocationDecision(Generic[R]):
    """What one plugin decided for one pod: the answer and the annotations it consumes."""

    result: R
    writes: Mapping[str, str]
    done: bool
    summary: Mapping[str, object] = field(default_factory=dict)
    """Log fields describing the answer."""


class _Grant(Protocol):
    @property
    def container_name(self) -> str: ...


def list_decision(
    plan: ListPlan[G], *, key: str, **summary: object
) -> AllocationDecision[tuple[G, ...]]:
    """The decision of a plugin that serves containers from the pod's ``key`` list: answer with
    ``plan``'s grants, write the rest of the list; ``summary`` adds log fields to the containers'
    names."""
    return AllocationDecision(
        result=plan.grants,
        writes={key: plan.remaining},
        done=plan.done,
        summary={"containers": [grant.container_name for grant in plan.grants], **summary},
    )


@dataclass(slots=True)
class _Attempt:
    node: JsonObject | None = None
    target: tuple[str, str] | None = None
    """``(namespace, name)`` of the pod, known from the lock even before the pod is read."""
    pod: JsonObject | None = None
    committed: bool = False


class PodAllocationFlow(ABC, Generic[R, P]):
    """Subclasses say how to decide; this class finds the pod, commits, unlocks, fails."""

    def __init__(
        self,
        *,
        client: KubeClient,
        flow: FlowConfig,
        observe: Observe,
        recorder: EventRecorder | None = None,
        lock: asyncio.Lock | None = None,
    ) -> None:
        self._client = client
        self._flow = flow
        self._observe = observe
        self._recorder = recorder
        self._lock = lock or asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()

    # --- what a plugin provides ---------------------------------------------------------------
    @abstractmethod
    async def _prepare(self, requests: Sequence[Sequence[str]]) -> P:
        """Once per call, after the pod is found (host layout, fresh names, ...)."""

    @abstractmethod
    async def _decide(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], prepared: P
    ) -> AllocationDecision[R]:
        """The answer for ``pod`` as just read; called again after a write conflict."""

    # --- Allocate -----------------------------------------------------------------------------
    async def allocate(self, requests: Sequence[Sequence[str]]) -> R:
        """Answer one Allocate call (one list of device IDs per container)."""
        async with self._lock:
            started = time.perf_counter()
            attempt = _Attempt()
            try:
                async with asyncio.timeout(self._flow.timeout_s):
                    decision = await self._commit(requests, attempt)
            except AllocateError as exc:
                failure = exc
            except TimeoutError:
                failure = AllocateError(
                    FailureKind.TIMEOUT,
                    f"allocation did not finish within {self._flow.timeout_s:g}s",
                )
            except KubeError as exc:
                failure = AllocateError(FailureKind.API, f"API server: {exc}")
            except asyncio.CancelledError:
                if not attempt.committed:
                    cancelled = AllocateError(FailureKind.TIMEOUT, "Allocate was cancelled")
                    self._spawn(self._fail(cancelled, attempt), "deviceplugin-allocate-cleanup")
                raise
            except Exception as exc:
                # A bug must still leave the pod failed and the node unlocked.
                log.exception("allocation crashed")
                failure = AllocateError(FailureKind.INTERNAL, f"internal error: {exc!r}")
            else:
                if decision.done and attempt.pod is not None:
                    await self._unlock_after_success(attempt)
                self._observe(ok=True, seconds=time.perf_counter() - started)
                return decision.result
            await self._fail(failure, attempt)
            self._observe(
                ok=False, seconds=time.perf_counter() - started, reason=failure.kind.value
            )
            raise failure

    async def _commit(
        self, requests: Sequence[Sequence[str]], attempt: _Attempt
    ) -> AllocationDecision[R]:
        node_name = self._flow.node_name
        attempt.node = await self._client.get(NODES, node_name)
        lock = lock_owner(NodeView(attempt.node).annotations)
        if lock is not None:
            attempt.target = (lock.namespace, lock.pod)
        found = await find_pod(self._client, node_name=node_name, node=attempt.node)
        attempt.pod = found.pod
        found_pod = PodView(found.pod)
        attempt.target = (found_pod.namespace, found_pod.name)
        prepared = await self._prepare(requests)
        for _ in range(self._flow.conflict_attempts):
            pod = PodView(attempt.pod)
            decision = await self._decide(allocating_pod(pod.raw), requests, prepared)
            writes = dict(decision.writes)
            if decision.done:
                writes[BIND_PHASE] = BIND_PHASE_SUCCESS
            namespace, name = pod.namespace, pod.name
            try:
                attempt.pod = await patch_metadata(
                    self._client,
                    PODS,
                    name,
                    namespace=namespace,
                    annotations=writes,
                    resource_version=pod.resource_version,
                )
            except ConflictError:
                attempt.pod = await self._client.get(PODS, name, namespace=namespace)
                continue
            attempt.committed = True
            log.info(
                "allocated",
                pod=f"{namespace}/{name}",
                via=found.via,
                done=decision.done,
                **decision.summary,
            )
            return decision
        raise AllocateError(FailureKind.API, "the pod kept changing while it was being allocated")

    # --- the node lock ------------------------------------------------------------------------
    async def _release_lock(
        self, namespace: str, name: str, node: JsonObject | None = None
    ) -> None:
        """Release the node lock if it is ``namespace/name``'s (or a legacy one)."""
        for _ in range(self._flow.conflict_attempts):
            if node is None:
                node = await self._client.get(NODES, self._flow.node_name)
            view = NodeView(node)
            value = view.annotations.get(NODE_LOCK)
            if decide_release(value, namespace=namespace, pod=name) is ReleaseAction.NOOP:
                return
            try:
                await patch_metadata(
                    self._client,
                    NODES,
                    self._flow.node_name,
                    annotations={NODE_LOCK: None},
                    resource_version=view.resource_version,
                )
            except ConflictError:
                node = None
                continue
            return
        raise AllocateError(FailureKind.API, "the node kept changing while its lock was released")

    async def _unlock_after_success(self, attempt: _Attempt) -> None:
        assert attempt.pod is not None
        pod = PodView(attempt.pod)
        namespace, name = pod.namespace, pod.name
        try:
            async with asyncio.timeout(self._flow.failure_timeout_s):
                await self._release_lock(namespace, name, attempt.node)
        except (KubeError, AllocateError, TimeoutError) as exc:
            log.error(
                "node lock not released after a successful allocation; it expires on its own",
                pod=f"{namespace}/{name}",
                error=str(exc),
            )

    # --- failure ------------------------------------------------------------------------------
    async def _fail(self, failure: AllocateError, attempt: _Attempt) -> None:
        target = None if isinstance(failure, VanishedLockOwnerError) else attempt.target
        log.warning(
            "allocation failed",
            reason=failure.kind.value,
            error=failure.message,
            pod="/".join(target) if target is not None else None,
        )
        owner = (
            (failure.namespace, failure.name)
            if isinstance(failure, VanishedLockOwnerError)
            else target
        )
        try:
            async with asyncio.timeout(self._flow.failure_timeout_s):
                if target is not None:
                    await self._mark_failed(*target)
                if owner is not None:
                    await self._release_lock(*owner)
        except (KubeError, AllocateError, TimeoutError) as exc:
            log.error("cleanup after a failed allocation incomplete", error=str(exc))
        if self._recorder is not None:
            involved: ObjectReference | Mapping[str, Any]
            if attempt.pod is not None and target is not None:
                involved = attempt.pod
            elif target is not None:
                involved = ObjectReference(kind="Pod", namespace=target[0], name=target[1])
            else:
                involved = ObjectReference(kind="Node", name=self._flow.node_name)
            self._recorder.emit(involved, EventType.WARNING, EVENT_REASON, failure.message)

    async def _mark_failed(self, namespace: str, name: str) -> None:
        try:
            await patch_metadata(
                self._client,
                PODS,
                name,
                namespace=namespace,
                annotations={BIND_PHASE: BIND_PHASE_FAILED},
            )
        except NotFoundError:
            return
        except KubeError as exc:
            log.error("cannot mark the pod failed", pod=f"{namespace}/{name}", error=str(exc))

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Let the clean-ups of cancelled allocations finish (shutdown): each is bounded by
        ``failure_timeout_s``; any still running a second later, or when the drain itself is cut
        off, is cancelled."""
        pending = set(self._background)
        if not pending:
            return
        try:
            await asyncio.wait(pending, timeout=self._flow.failure_timeout_s + 1)
        finally:
            for task in pending:
                task.cancel()
