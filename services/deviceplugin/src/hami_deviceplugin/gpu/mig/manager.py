"""The shell around MIG: every layout change of the node, serialised with Allocate.

* :meth:`MigManager.start` (once, before the plugin serves; again from the reconciler while it
  has not succeeded): busy GPUs = GPUs named by live pods' reservations ∪ GPUs running processes;
  idle GPUs get MIG mode (a GPU that needs a reset for it is reported unhealthy, the plugin keeps
  running) and lose every instance; instances on busy GPUs that live reservations reference are
  adopted, nothing else on them is touched.  A pod listing that fails makes every GPU busy.
* :meth:`MigManager.realise` (inside Allocate, under its lock): adopt or create the instances of
  the reservations being served (:func:`~.decide.reservation_steps`); every instance created is
  appended to the caller's list at once, even when the call is cancelled meanwhile, so the
  caller can destroy exactly what its call made (:meth:`MigManager.undo`).
* :meth:`MigManager.run`: every ``interval`` seconds destroy the instances no live pod's
  reservation references (:func:`~.decide.reconcile_destroys`), only once the pod watch has
  synced, and on no GPU some pod's unreadable annotation might name.

While the layout changes the lock file (HAMi's ``/tmp/hami/hami-mig-apply.lock``) exists: the
vGPU monitor pauses its feedback then.  GPUs whose MIG mode cannot be entered are reported
unhealthy through :meth:`MigManager.apply`, which every GPU list from the backend goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, MutableSequence, Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from hami_deviceplugin.allocation.entries import AllocatingPod, allocating_pod
from hami_deviceplugin.allocation.node_pods import NodePods
from hami_deviceplugin.errors import AllocateError, FailureKind, MigError
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.mig.control import MigControl
from hami_deviceplugin.gpu.mig.decide import (
    Adopt,
    Clear,
    Create,
    InstanceKey,
    LiveReservations,
    live_reservations,
    reconcile_destroys,
    reservation_steps,
    startup_plan,
)
from hami_deviceplugin.gpu.mig.model import MigCapability, MigInstance, MigState
from hami_deviceplugin.node.register import mig_profiles_of
from hami_kube.errors import KubeError
from hami_protocol.config.device import MigProfileAllow
from hami_protocol.pod.mig import MigReservation, MigRuntimeIds, ReservationKey

__all__ = ["MigManager"]

log = structlog.get_logger(__name__)

PENDING_REASON = "MIG mode is pending: the GPU needs a reset before MIG instances can be made"


class MigManager:
    def __init__(
        self,
        *,
        control: MigControl,
        inventory: Inventory,
        allowlist: Sequence[MigProfileAllow],
        pods: NodePods,
        lock: asyncio.Lock,
        lock_file: Path,
        interval: float = 5.0,
    ) -> None:
        """``lock`` is the Allocate lock (every layout change holds it)."""
        self._control = control
        self._inventory = inventory
        self._allowlist = tuple(allowlist)
        self._pods = pods
        self._lock = lock
        self._lock_file = lock_file
        self._interval = interval
        self._raw: tuple[Gpu, ...] = inventory.gpus
        self._problems: dict[str, str] = {}
        self._owned: frozenset[str] = frozenset()
        self._managed: set[InstanceKey] = set()
        self.started = False
        self.destroyed = 0
        """Instances the reconciler destroyed (for tests and logs)."""

    # --- what the node offers -----------------------------------------------------------------
    def capabilities(self) -> dict[str, MigCapability]:
        """This node's MIG GPUs with the profiles they register (allowed and offered)."""
        result: dict[str, MigCapability] = {}
        for gpu in self._inventory.gpus:
            allowed = {p.name for p in mig_profiles_of(gpu, self._allowlist)}
            if gpu.mig is None or not allowed:
                continue
            result[gpu.uuid] = replace(
                gpu.mig, profiles=tuple(p for p in gpu.mig.profiles if p.name in allowed)
            )
        return result

    def apply(self, gpus: Iterable[Gpu]) -> bool:
        """Put the backend's GPU list into the inventory, GPUs that cannot enter MIG mode marked
        unhealthy; True when the inventory changed."""
        self._raw = tuple(gpus)
        marked = tuple(
            replace(g, healthy=False, reason=self._problems[g.uuid])
            if g.uuid in self._problems
            else g
            for g in self._raw
        )
        return self._inventory.replace(marked)

    async def _states(self, gpus: Iterable[str]) -> dict[str, MigState]:
        return {gpu: await self._control.state(gpu) for gpu in sorted(set(gpus))}

    def _live(self, pods: Iterable[AllocatingPod]) -> LiveReservations:
        return live_reservations(pods, self.capabilities())

    @contextlib.asynccontextmanager
    async def _changing(self) -> AsyncIterator[None]:
        """The lock file exists for the block."""
        await asyncio.to_thread(_create_lock_file, self._lock_file)
        try:
            yield
        finally:
            await asyncio.to_thread(self._lock_file.unlink, missing_ok=True)

    # --- start-up -----------------------------------------------------------------------------
    async def start(self) -> None:
        """The start-up pass (see the module docstring), with the pods listed afresh."""
        async with self._lock:
            try:
                pods = [allocating_pod(raw) for raw in (await self._pods.relist()).values()]
            except KubeError as exc:
                log.error(
                    "MIG start-up: pods not listed, every MIG GPU left as it is", error=str(exc)
                )
                await self._start(None)
                return
            await self._start(self._live(pods))

    async def _start(self, live: LiveReservations | None) -> None:
        capabilities = self.capabilities()
        try:
            states = await self._states(capabilities)
            processes = frozenset([gpu for gpu in capabilities if await self._control.busy(gpu)])
        except MigError as exc:
            log.error("MIG start-up: GPUs unreadable, nothing changed", error=str(exc))
            return
        plan = startup_plan(states, live=live, processes=processes)
        problems = dict(self._problems)
        async with self._changing():
            for gpu in plan.enable:
                try:
                    mode = await self._control.enable(gpu)
                except MigError as exc:
                    problems[gpu] = f"MIG mode cannot be enabled: {exc}"
                    continue
                if mode != "enabled":
                    problems[gpu] = PENDING_REASON
            for gpu in plan.pending:
                problems[gpu] = PENDING_REASON
            await self._destroy_each(plan.destroy, "MIG start-up: instance not destroyed")
        self._managed.update(plan.adopt)
        self._owned = plan.owned - set(problems)
        self.started = live is not None
        log.info(
            "MIG start-up",
            busy=sorted(plan.busy),
            enabled=list(plan.enable),
            destroyed=len(plan.destroy),
            adopted=sorted(plan.adopt),
            unhealthy=sorted(problems),
            pods_known=live is not None,
        )
        if problems != self._problems:
            self._problems = problems
            self.apply(self._raw)

    # --- Allocate -----------------------------------------------------------------------------
    async def realise(
        self,
        pod: AllocatingPod,
        reservations: Sequence[MigReservation],
        *,
        pod_reservations: Sequence[MigReservation],
        created: MutableSequence[MigInstance],
    ) -> dict[ReservationKey, MigRuntimeIds]:
        """Adopt or create the instances of ``reservations`` (of ``pod``, whose reservations
        are ``pod_reservations``); the caller holds the Allocate lock.  Every instance made is
        appended to ``created``.  Raises :class:`AllocateError`."""
        capabilities = self.capabilities()
        snapshot = [allocating_pod(raw) for raw in self._pods.snapshot().values()]
        live = self._live(p for p in snapshot if p.uid != pod.uid)
        live = LiveReservations(
            by_pod={**live.by_pod, pod.uid: tuple(pod_reservations)}, doubtful=live.doubtful
        )
        try:
            states = await self._states(
                r.gpu_uuid for r in reservations if r.gpu_uuid in capabilities
            )
        except MigError as exc:
            raise AllocateError(FailureKind.MIG, f"MIG state unreadable: {exc}") from None
        steps = reservation_steps(
            reservations,
            pod_uid=pod.uid,
            capabilities=capabilities,
            states=states,
            live=live,
            pods_known=self._pods.reflector.has_synced,
        )
        runtime: dict[ReservationKey, MigRuntimeIds] = {}
        changes = any(not isinstance(step, Adopt) for step in steps)
        async with contextlib.AsyncExitStack() as stack:
            if changes:
                await stack.enter_async_context(self._changing())
            for step in steps:
                try:
                    if isinstance(step, Clear):
                        await self._control.destroy(step.instance.gpu_uuid, step.instance.gi_id)
                        self._managed.discard((step.instance.gpu_uuid, step.instance.gi_id))
                        continue
                    if isinstance(step, Adopt):
                        instance = step.instance
                    else:
                        instance = await self._create(step, created)
                except MigError as exc:
                    raise AllocateError(FailureKind.MIG, f"{_describe(step)}: {exc}") from None
                self._managed.add((instance.gpu_uuid, instance.gi_id))
                runtime[step.reservation.key] = MigRuntimeIds(
                    mig_uuid=instance.mig_uuid,
                    gpu_instance_id=instance.gi_id,
                    compute_instance_id=instance.ci_id,
                )
        return runtime

    async def _create(self, step: Create, created: MutableSequence[MigInstance]) -> MigInstance:
        reservation = step.reservation
        task = asyncio.ensure_future(
            self._control.create(reservation.gpu_uuid, step.profile, reservation.placement)
        )
        try:
            instance = await asyncio.shield(task)
        except asyncio.CancelledError:
            # The worker thread finishes what it started: record what it made for the undo.
            with contextlib.suppress(Exception):
                created.append(await task)
            raise
        created.append(instance)
        return instance

    async def undo(self, created: Sequence[MigInstance]) -> None:
        """Destroy what an Allocate call created (newest first); failures are logged, the
        reconciler retries them (the pod is marked failed, so nothing references them)."""
        if not created:
            return
        async with self._changing():
            await self._destroy_each(
                reversed(created), "MIG instance of a failed Allocate not destroyed"
            )
        log.info(
            "MIG instances of a failed Allocate destroyed",
            instances=[(i.gpu_uuid, i.gi_id) for i in created],
        )

    async def _destroy_each(
        self, instances: Iterable[MigInstance], failure: str
    ) -> list[MigInstance]:
        """Destroy ``instances`` in order (inside :meth:`_changing`); one that fails is logged
        with ``failure`` and left for the reconciler.  The ones destroyed."""
        gone: list[MigInstance] = []
        for instance in instances:
            try:
                await self._control.destroy(instance.gpu_uuid, instance.gi_id)
            except MigError as exc:
                log.error(
                    failure, gpu=instance.gpu_uuid, gpu_instance=instance.gi_id, error=str(exc)
                )
                continue
            self._managed.discard((instance.gpu_uuid, instance.gi_id))
            gone.append(instance)
        return gone

    # --- the reconciler -----------------------------------------------------------------------
    async def reconcile(self) -> tuple[MigInstance, ...]:
        """One pass (under the Allocate lock): the instances destroyed."""
        async with self._lock:
            if not self._pods.reflector.has_synced:
                return ()
            pods = [allocating_pod(raw) for raw in self._pods.snapshot().values()]
            live = self._live(pods)
            if not self.started:
                await self._start(live)
                return ()
            try:
                states = await self._states(self.capabilities())
            except MigError as exc:
                log.warning("MIG reconcile: GPUs unreadable, nothing destroyed", error=str(exc))
                return ()
            doomed = reconcile_destroys(
                states, owned=self._owned, managed=frozenset(self._managed), live=live
            )
            if not doomed:
                return ()
            async with self._changing():
                gone = await self._destroy_each(doomed, "MIG reconcile: instance not destroyed")
            self.destroyed += len(gone)
            log.info(
                "MIG instances no pod references destroyed",
                instances=[(i.gpu_uuid, i.gi_id, i.profile) for i in gone],
            )
            return tuple(gone)

    async def run(self) -> None:
        """The reconciler, until cancelled."""
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.reconcile()
            except (MigError, KubeError) as exc:
                log.warning("MIG reconcile failed", error=str(exc))


def _describe(step: Clear | Adopt | Create) -> str:
    if isinstance(step, Clear):
        i = step.instance
        return f"clearing MIG instance {i.gi_id} ({i.profile}) on {i.gpu_uuid}"
    r = step.reservation
    return f"MIG {r.profile} at slices {r.placement.start}+{r.placement.size} on {r.gpu_uuid}"


def _create_lock_file(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
