"""The Allocate path every plugin of this daemon shares: identify the pod, decide, commit, unlock.

One allocation at a time (the GPU and RDMA plugins of one daemon share one lock), each under its
own deadline (default 3 s).  Steps:

1. **identify** the pod (:func:`~hami_deviceplugin.allocation.sources.find_pod` applying the
   pure rule of :mod:`hami_deviceplugin.allocation.identity`) from the kubelet's pod-resources
   listing and the node's pods as the watch has them
   (:class:`~hami_deviceplugin.allocation.node_pods.NodePods`); a listed pod the watch lacks costs
   one GET, the rule without a listing one LIST;
2. check that the pod's next entries name what the kubelet allocated, and let the plugin decide
   every container's answer (:meth:`PodAllocationFlow._decide`, pure apart from host
   preparation: an :class:`~hami_deviceplugin.allocation.decision.AllocationDecision`) and which
   annotations that consumes;
3. **commit** with one merge patch on the pod, guarded by the resourceVersion it was decided on:
   the rewritten ``-devices-to-allocate`` and, when no list of any vendor waits any more,
   ``bind-phase: success`` and the ``hami.io/vgpu-node`` label (HAMi's tools select by it).  A
   409 (the other plugin committed, the watch was behind) re-reads the pod (one GET) and goes
   back to 2, so the last consumer always sees every list;
4. when the pod is done, **release the node lock** if (and only if) it names that pod
   (:func:`~hami_deviceplugin.allocation.node_lock.release_node_lock`); the lock plays no part
   in 1.

API cost of a served call: 1 write (2 for the pod that completes: the lock release), 0 reads
when the watch holds the pod.

A failed call first undoes what it made outside the API (:meth:`PodAllocationFlow._abandon`: the
MIG instances it created), still holding the lock, so no later call can be handed them.
A refusal or failure gives the kubelet a gRPC error with the reason
(:class:`~hami_deviceplugin.errors.AllocateError`) and records a Warning Event
(``AllocateFailed``) on the pod when it is known, else on the node.  A pod placed by us that was
identified is marked ``bind-phase: failed`` (one merge patch) and its lock released; a pod not
placed by us is left as it is; when no pod could be identified nothing is written.  Because the
commit is a single patch, a failure never leaves a list half consumed.  A lock that cannot be
released after a successful commit is logged; the scheduler frees a finished owner's lock.

Device ids answered to a pod are remembered while it allocates: the kubelet hands an init
container's devices on to the next container, and those ids match any entry of the same pod.

An Allocate cut off by a shutdown (the gRPC server cancels calls still running after its grace)
still cleans up, in a task of its own; :meth:`PodAllocationFlow.drain` lets those finish, within
their budget, before the daemon ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

import structlog

from hami_deviceplugin.allocation.decision import AllocationDecision
from hami_deviceplugin.allocation.entries import AllocatingPod, allocating_pod
from hami_deviceplugin.allocation.identity import (
    DeviceList,
    Identified,
    Refusal,
    check_entries,
    next_entries,
    placed_by_us,
)
from hami_deviceplugin.allocation.node_lock import release_node_lock
from hami_deviceplugin.allocation.sources import AllocationSources, find_pod
from hami_deviceplugin.errors import AllocateError, FailureKind
from hami_kube.errors import ConflictError, KubeError, NotFoundError
from hami_kube.events import EventRecorder, EventType, ObjectReference
from hami_kube.patch import patch_metadata
from hami_kube.resources import PODS, JsonObject
from hami_kube.rest import KubeClient
from hami_protocol.keys import BIND_PHASE, BIND_PHASE_FAILED, BIND_PHASE_SUCCESS, VGPU_NODE
from hami_protocol.pod.devices import ContainerDevices

__all__ = ["EVENT_REASON", "FlowConfig", "Observe", "PodAllocationFlow"]

log = structlog.get_logger(__name__)

EVENT_REASON: Final = "AllocateFailed"
_ANSWERED_PODS: Final = 256
"""Pods whose answered device ids are remembered at most (oldest forgotten first)."""

R = TypeVar("R")
P = TypeVar("P")

Observe = Callable[..., None]
"""``observe(ok=, seconds=, reason=)``: the plugin's allocate metrics."""


@dataclass(frozen=True, slots=True)
class FlowConfig:
    node_name: str
    timeout_s: float = 3.0
    failure_timeout_s: float = 3.0
    """Budget for writing bind-phase failed, unlocking and queueing the Event after a failure."""
    conflict_attempts: int = 5


@dataclass(slots=True)
class _Attempt:
    pod: AllocatingPod | None = None
    """The pod identified (or refused by name)."""
    via: str = ""
    committed: bool = False


def _reference(pod: AllocatingPod) -> ObjectReference:
    return ObjectReference(kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid)


class PodAllocationFlow(ABC, Generic[R, P]):
    """Subclasses say which list they serve and how to decide; this class identifies the pod,
    commits, unlocks, fails."""

    def __init__(
        self,
        *,
        client: KubeClient,
        flow: FlowConfig,
        sources: AllocationSources,
        observe: Observe,
        recorder: EventRecorder | None = None,
        lock: asyncio.Lock | None = None,
    ) -> None:
        self._client = client
        self._flow = flow
        self._sources = sources
        self._observe = observe
        self._recorder = recorder
        self._lock = lock or asyncio.Lock()
        self._background: set[asyncio.Task[None]] = set()
        self._answered: OrderedDict[str, frozenset[str]] = OrderedDict()

    # --- what a plugin provides ---------------------------------------------------------------
    @abstractmethod
    def _devices(self) -> DeviceList:
        """The plugin's resource and list, as the identity rule reads them (now)."""

    @abstractmethod
    async def _prepare(self, requests: Sequence[Sequence[str]]) -> P:
        """Once per call, after the pod is identified (host layout, fresh names, ...)."""

    def _begin(self) -> None:
        """A call starts (under the lock): forget what the previous call made."""
        return

    async def _abandon(self) -> None:
        """Undo what this call made outside the API (MIG instances) after it failed, before the
        pod is marked failed; bounded by ``failure_timeout_s``.  Default: nothing to undo."""
        return

    async def _abandon_bounded(self) -> None:
        try:
            async with asyncio.timeout(self._flow.failure_timeout_s):
                await self._abandon()
        except Exception:
            log.exception("undoing a failed allocation failed")

    @abstractmethod
    async def _decide(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], prepared: P
    ) -> AllocationDecision[R]:
        """The answer for ``pod`` as just read; called again after a write conflict."""

    # --- identity -----------------------------------------------------------------------------
    async def _find(
        self, requests: tuple[tuple[str, ...], ...], *, reads: bool = True
    ) -> tuple[Identified | Refusal, Mapping[str, JsonObject]]:
        """The pod the kubelet is admitting, and the pods it was found among (``reads``: see
        :func:`~hami_deviceplugin.allocation.sources.find_pod`)."""
        return await find_pod(
            self._sources,
            node_name=self._flow.node_name,
            devices=self._devices(),
            requests=requests,
            answered=self._answered,
            reads=reads,
        )

    async def preferred_entries(self, requests: int) -> tuple[ContainerDevices, ...]:
        """For a ``GetPreferredAllocation`` of ``requests`` containers: the next entries of the
        pod it is for, found in the watch cache, else as Allocate finds it (a GET or a LIST);
        () when no single pod is known for sure (the plugin then prefers nothing).

        The kubelet asks this as soon as it admits the pod, sometimes before this plugin's
        watch has shown the pod's Binding; preferring nothing then would let the kubelet pick
        other GPUs, and the Allocate that follows must refuse the pod.  A watch that is up to
        date costs no read (the preference is checked by the Allocate anyway)."""
        async with self._lock:
            try:
                async with asyncio.timeout(self._flow.timeout_s):
                    asked = tuple(() for _ in range(requests))
                    outcome, _ = await self._find(asked, reads=False)
                    if not isinstance(outcome, Identified):
                        outcome, _ = await self._find(asked)
                    if isinstance(outcome, Identified):
                        return next_entries(outcome.pod, self._devices(), requests)
                    log.info("no preference", reason=outcome.message)
            except (AllocateError, KubeError, TimeoutError) as exc:
                log.info("no preference: the pod cannot be read", error=str(exc))
            return ()

    # --- Allocate -----------------------------------------------------------------------------
    async def allocate(self, requests: Sequence[Sequence[str]]) -> R:
        """Answer one Allocate call (one list of device IDs per container)."""
        async with self._lock:
            self._begin()
            started = time.perf_counter()
            attempt = _Attempt()
            try:
                async with asyncio.timeout(self._flow.timeout_s):
                    decision = await self._allocate(requests, attempt)
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
                    # The undo runs to its end still holding the lock, so no later call can be
                    # handed what this one is taking back.
                    undo = self._spawn(self._abandon_bounded(), "deviceplugin-allocate-undo")
                    with contextlib.suppress(asyncio.CancelledError):
                        await asyncio.shield(undo)
                    cancelled = AllocateError(FailureKind.TIMEOUT, "Allocate was cancelled")
                    self._spawn(self._fail(cancelled, attempt), "deviceplugin-allocate-cleanup")
                raise
            except Exception as exc:
                # A bug must still leave the pod failed and the node unlocked.
                log.exception("allocation crashed")
                failure = AllocateError(FailureKind.INTERNAL, f"internal error: {exc!r}")
            else:
                assert attempt.pod is not None
                self._remember_answer(attempt.pod, requests, done=decision.done)
                if decision.done:
                    expected = attempt.via == "sole-admissible"
                    await self._unlock_after_success(attempt.pod, expected=expected)
                self._observe(ok=True, seconds=time.perf_counter() - started)
                return decision.result
            await self._abandon_bounded()
            await self._fail(failure, attempt)
            self._observe(
                ok=False, seconds=time.perf_counter() - started, reason=failure.kind.value
            )
            raise failure

    async def _allocate(
        self, requests: Sequence[Sequence[str]], attempt: _Attempt
    ) -> AllocationDecision[R]:
        asked = tuple(tuple(ids) for ids in requests)
        outcome, pods = await self._find(asked)
        attempt.pod = outcome.pod
        if isinstance(outcome, Refusal):
            raise outcome.error()
        attempt.via = outcome.via
        raw: JsonObject | None = pods[outcome.pod.key]
        prepared = await self._prepare(requests)
        devices = self._devices()
        for _ in range(self._flow.conflict_attempts):
            if raw is None:
                raise AllocateError(
                    FailureKind.NO_POD, f"pod {outcome.pod.key} was deleted while it was allocated"
                )
            pod = allocating_pod(raw)
            attempt.pod = pod
            refused = check_entries(pod, devices, asked, self._answered)
            if refused is not None:
                raise refused.error()
            decision = await self._decide(pod, requests, prepared)
            writes = dict(decision.writes)
            labels = None
            if decision.done:
                writes[BIND_PHASE] = BIND_PHASE_SUCCESS
                labels = {VGPU_NODE: self._flow.node_name}
            try:
                raw = await patch_metadata(
                    self._client,
                    PODS,
                    pod.name,
                    namespace=pod.namespace,
                    annotations=writes,
                    labels=labels,
                    resource_version=pod.resource_version,
                )
            except ConflictError:
                raw = await self._sources.pods.fetch(pod.key)
                continue
            self._sources.pods.remember(raw)
            attempt.committed = True
            log.info(
                "allocated",
                pod=pod.key,
                via=attempt.via,
                done=decision.done,
                **decision.summary,
            )
            return decision
        raise AllocateError(FailureKind.API, "the pod kept changing while it was being allocated")

    def _remember_answer(
        self, pod: AllocatingPod, requests: Sequence[Sequence[str]], *, done: bool
    ) -> None:
        if done:
            self._answered.pop(pod.uid, None)
            return
        given = self._answered.pop(pod.uid, frozenset())
        self._answered[pod.uid] = given.union(*requests)
        while len(self._answered) > _ANSWERED_PODS:
            self._answered.popitem(last=False)

    # --- the node lock ------------------------------------------------------------------------
    async def _release_lock(self, pod: AllocatingPod, *, expected: bool = False) -> None:
        await release_node_lock(
            self._client,
            pod,
            node_name=self._flow.node_name,
            watched=self._sources.node(),
            conflict_attempts=self._flow.conflict_attempts,
            expected=expected,
        )

    async def _unlock_after_success(self, pod: AllocatingPod, *, expected: bool) -> None:
        try:
            async with asyncio.timeout(self._flow.failure_timeout_s):
                await self._release_lock(pod, expected=expected)
        except (KubeError, AllocateError, TimeoutError) as exc:
            log.error(
                "node lock not released after a successful allocation; the scheduler frees it",
                pod=pod.key,
                error=str(exc),
            )

    # --- failure ------------------------------------------------------------------------------
    async def _fail(self, failure: AllocateError, attempt: _Attempt) -> None:
        pod = attempt.pod
        placed = pod is not None and placed_by_us(pod)
        log.warning(
            "allocation failed",
            reason=failure.kind.value,
            error=failure.message,
            pod=None if pod is None else pod.key,
        )
        if pod is not None and placed:
            self._answered.pop(pod.uid, None)
            try:
                async with asyncio.timeout(self._flow.failure_timeout_s):
                    await self._mark_failed(pod)
                    await self._release_lock(pod)
            except (KubeError, AllocateError, TimeoutError) as exc:
                log.error("cleanup after a failed allocation incomplete", error=str(exc))
        if self._recorder is not None:
            involved = (
                ObjectReference(kind="Node", name=self._flow.node_name)
                if pod is None
                else _reference(pod)
            )
            self._recorder.emit(involved, EventType.WARNING, EVENT_REASON, failure.message)

    async def _mark_failed(self, pod: AllocatingPod) -> None:
        try:
            raw = await patch_metadata(
                self._client,
                PODS,
                pod.name,
                namespace=pod.namespace,
                annotations={BIND_PHASE: BIND_PHASE_FAILED},
            )
        except NotFoundError:
            return
        except KubeError as exc:
            log.error("cannot mark the pod failed", pod=pod.key, error=str(exc))
            return
        self._sources.pods.remember(raw)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

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
