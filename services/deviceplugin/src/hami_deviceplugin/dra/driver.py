"""The DRA driver's node side: Prepare and Unprepare of claims, serialised, checkpointed.

Per claim of a Prepare (each answered on its own; one failing claim fails only itself):

1. already in the checkpoint → the same answer again; the CDI spec file is rewritten if it is
   gone; nothing else is touched (the containers' caches stay);
2. the claim is read (``GET resourceclaims``) and planned (:func:`~.plan.plan_claim`: same UID,
   allocated, results from this node's pool, devices present and healthy, no exclusive clash);
3. the pod it is reserved for is read, for the container whose cache directory to use (a pod
   that cannot be found gives the claim's name in its place);
4. the grants' host directories are created as Allocate creates them
   (:class:`~hami_deviceplugin.gpu.hostdirs.HostDirs`), the CDI spec is written atomically, and
   the checkpoint saved; a failure after the spec was written removes it again.

An Unprepare removes the spec file and the checkpoint entry; an unknown claim is a success (a
stray spec file of that UID is removed too).  The cache directories stay: the vGPU monitor
removes a directory once its pod is gone, as on the device-plugin path.

One asyncio lock serialises the calls (the kubelet may call concurrently after a restart).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import structlog

from hami_deviceplugin.dra.cdi import spec_file_name
from hami_deviceplugin.dra.checkpoint import (
    CHECKPOINT_FILE,
    PreparedClaim,
    PreparedDevice,
    load_checkpoint,
    save_checkpoint,
)
from hami_deviceplugin.dra.claims import ClaimError, ClaimRef, reserved_pods
from hami_deviceplugin.dra.files import remove_file, write_json_atomically
from hami_deviceplugin.dra.plan import PlanInputs, plan_claim
from hami_deviceplugin.errors import AllocateError
from hami_deviceplugin.gpu.hostdirs import HostDirs
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.plan import AllocateOptions
from hami_kube.errors import KubeError, NotFoundError
from hami_kube.resources import PODS, RESOURCE_CLAIMS
from hami_kube.rest import KubeClient

__all__ = ["DraDriver", "DriverConfig", "PrepareOutcome"]

log = structlog.get_logger(__name__)

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class DriverConfig:
    node_name: str
    cdi_dir: Path
    state_dir: Path
    hook_path: str
    options: AllocateOptions
    memory_scaling: float = 1.0


@dataclass(frozen=True, slots=True)
class PrepareOutcome:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class DraDriver:
    def __init__(
        self,
        *,
        client: KubeClient,
        inventory: Inventory,
        host_dirs: HostDirs,
        config: DriverConfig,
        cache_name: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self._client = client
        self._inventory = inventory
        self._host = host_dirs
        self._config = config
        self._cache_name = cache_name
        self._lock = asyncio.Lock()
        self._claims: dict[str, PreparedClaim] = {}
        self._loaded = False

    @property
    def checkpoint_path(self) -> Path:
        return self._config.state_dir / CHECKPOINT_FILE

    @property
    def prepared(self) -> dict[str, PreparedClaim]:
        """The prepared claims by UID (a copy)."""
        return dict(self._claims)

    async def load(self) -> None:
        """Read the checkpoint (raises :class:`~.checkpoint.CheckpointError` when unusable)."""
        self._claims = await asyncio.to_thread(load_checkpoint, self.checkpoint_path)
        self._loaded = True
        log.info("DRA checkpoint loaded", claims=sorted(self._claims))

    # --- Prepare ------------------------------------------------------------------------------
    async def prepare(self, refs: Iterable[ClaimRef]) -> dict[str, PrepareOutcome]:
        """``{claim uid: outcome}`` for every claim."""

        async def one(ref: ClaimRef) -> PrepareOutcome:
            return PrepareOutcome(devices=await self._prepare_one(ref))

        return await self._each(refs, one, lambda error: PrepareOutcome(error=error), "prepared")

    async def _each(
        self,
        refs: Iterable[ClaimRef],
        one: Callable[[ClaimRef], Awaitable[R]],
        failed: Callable[[str], R],
        verb: str,
    ) -> dict[str, R]:
        """Handle the claims one by one under the lock; a :class:`ClaimError` fails its claim."""
        async with self._lock:
            if not self._loaded:
                await self.load()
            answers: dict[str, R] = {}
            for ref in refs:
                try:
                    answers[ref.uid] = await one(ref)
                except ClaimError as exc:
                    log.warning(f"claim not {verb}", claim=ref.key, uid=ref.uid, error=str(exc))
                    answers[ref.uid] = failed(str(exc))
            return answers

    def _spec_path(self, claim: PreparedClaim) -> Path:
        return self._config.cdi_dir / claim.spec_file

    async def _prepare_one(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        if not ref.uid or not ref.name or not ref.namespace:
            raise ClaimError("a claim needs namespace, uid and name")
        known = self._claims.get(ref.uid)
        if known is not None:
            if known.spec_file and not self._spec_path(known).exists():
                await self._write_spec(known)
            return known.devices
        claim = await self._read(RESOURCE_CLAIMS, ref.name, ref.namespace, what="claim")
        if claim is None:
            raise ClaimError(f"claim {ref.key} not found")
        pods = reserved_pods(claim)
        pod_uid = pods[0].uid if pods else ref.uid
        pod = await self._read(PODS, pods[0].name, ref.namespace, what="pod") if pods else None
        if pod is not None and (pod.get("metadata") or {}).get("uid") != pod_uid:
            pod = None  # a pod of that name, but not the reserved one
        node = PlanInputs(
            node_name=self._config.node_name,
            gpus=self._inventory.gpus,
            options=self._config.options,
            layout=await self._host_call(self._host.layout(self._config.hook_path)),
            memory_scaling=self._config.memory_scaling,
        )
        plan = plan_claim(
            ref,
            claim,
            pod,
            pod_uid=pod_uid,
            node=node,
            prepared=self._claims,
            cache_name=self._cache_name,
        )
        await self._host_call(self._host.prepare(plan.grants))
        prepared = plan.prepared
        if prepared.spec_file:
            await self._write_spec(prepared)
        self._claims[ref.uid] = prepared
        try:
            await self._save()
        except ClaimError:
            del self._claims[ref.uid]
            if prepared.spec_file:
                await asyncio.to_thread(remove_file, self._spec_path(prepared))
            raise
        log.info(
            "claim prepared",
            claim=ref.key,
            uid=ref.uid,
            devices=[d.device for d in prepared.devices],
            cdi=[i for d in prepared.devices for i in d.cdi_ids],
        )
        return prepared.devices

    async def _read(
        self, resource: Any, name: str, namespace: str, *, what: str
    ) -> dict[str, Any] | None:
        try:
            return await self._client.get(resource, name, namespace=namespace)
        except NotFoundError:
            return None
        except KubeError as exc:
            raise ClaimError(f"cannot read {what} {namespace}/{name}: {exc}") from exc

    async def _host_call(self, call: Any) -> Any:
        try:
            return await call
        except AllocateError as exc:
            raise ClaimError(str(exc)) from exc

    async def _write_spec(self, claim: PreparedClaim) -> None:
        try:
            await asyncio.to_thread(write_json_atomically, self._spec_path(claim), claim.spec)
        except OSError as exc:
            raise ClaimError(f"cannot write CDI spec {self._spec_path(claim)}: {exc}") from exc

    async def _save(self) -> None:
        try:
            await asyncio.to_thread(save_checkpoint, self.checkpoint_path, dict(self._claims))
        except OSError as exc:
            raise ClaimError(f"cannot save the checkpoint {self.checkpoint_path}: {exc}") from exc

    # --- Unprepare ----------------------------------------------------------------------------
    async def unprepare(self, refs: Iterable[ClaimRef]) -> dict[str, str]:
        """``{claim uid: error}`` ("" = done) for every claim."""

        async def one(ref: ClaimRef) -> str:
            await self._unprepare_one(ref)
            return ""

        return await self._each(refs, one, lambda error: error, "unprepared")

    async def _unprepare_one(self, ref: ClaimRef) -> None:
        if not ref.uid:
            raise ClaimError("a claim needs a uid")
        known = self._claims.get(ref.uid)
        spec = self._config.cdi_dir / spec_file_name(ref.uid)
        try:
            await asyncio.to_thread(remove_file, spec)
        except OSError as exc:
            raise ClaimError(f"cannot remove CDI spec {spec}: {exc}") from exc
        if known is None:
            return
        del self._claims[ref.uid]
        try:
            await self._save()
        except ClaimError:
            self._claims[ref.uid] = known
            raise
        log.info("claim unprepared", claim=ref.key, uid=ref.uid)
