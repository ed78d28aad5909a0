"""The GPU map's view of DRA-managed GPUs: this driver's ResourceSlices and the ResourceClaims
allocated from it, mirrored by two reflectors (the machinery of :mod:`.watch`) and joined into
per-node cards on demand (:func:`~hami_scheduler.gpumap.dra.join.join`, remembered until the
next event).

Only the map reads it; ``/filter`` never does (kube-scheduler's allocator places claims), so it
is kept apart from the cache's :class:`~.watch.CacheWatcher` and never holds readiness back.
Each object is read into frozen facts on arrival and the stored copy cut down to its metadata
(a slice or a claim is kilobytes; the facts are a few fields).

Degrading: before it lists, :meth:`DraWatch.run` asks for one object of each kind.  An API server
that does not serve ``resource.k8s.io/v1`` (404) or RBAC that forbids it (403) is logged once
per distinct reason (``gpumap_dra_not_watched``) and shown in the map's ``dra.reason``; the map
goes on without DRA cards and the question is asked again every ``recheck_s`` (the API turned
on, the ClusterRole fixed).  Any other failure is the reflectors' to retry, as for every watch.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Final, TypeVar

import structlog

from hami_kube.errors import ForbiddenError, KubeError, NotFoundError
from hami_kube.objects import object_key
from hami_kube.reflector import EventHandlers, Reflector, ReflectorConfig, upserting
from hami_kube.resources import RESOURCE_CLAIMS, RESOURCE_SLICES, JsonObject, Resource
from hami_kube.rest import KubeClient
from hami_protocol.dra_driver import DRIVER, RESOURCE_API_VERSION
from hami_scheduler.gpumap.dra.join import DraNode, DraView, join
from hami_scheduler.gpumap.dra.read import (
    ClaimFacts,
    SliceFacts,
    allocated_here,
    read_claim,
    read_slice,
)

__all__ = ["LISTING", "RECHECK_S", "DraWatch"]

RECHECK_S: Final = 300.0
"""How often a refused resource API is asked again."""
LISTING: Final = "listing ResourceSlices and ResourceClaims"
"""``dra.reason`` until both kinds are listed."""

log = structlog.get_logger("hami_scheduler")
_Facts = TypeVar("_Facts", SliceFacts, ClaimFacts)


def _ours(obj: JsonObject) -> bool:
    spec = obj.get("spec")
    return isinstance(spec, dict) and spec.get("driver") == DRIVER


def _slim(obj: JsonObject) -> None:
    """Cut the stored copy down to what the reflector compares (identity and version)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    obj.clear()
    obj.update({"metadata": kept, "kind": kind, "apiVersion": api_version})


def _refusal(resource: Resource, exc: KubeError) -> str | None:
    """Why ``resource`` will not be watched, or None when a retry may cure it."""
    kind = f"{resource.plural}.{resource.group}"
    if isinstance(exc, NotFoundError):
        return f"the API server does not serve {RESOURCE_API_VERSION} {resource.plural} (404)"
    if isinstance(exc, ForbiddenError):
        return (
            f"forbidden to list {kind} (403; the scheduler's ClusterRole needs get/list/watch "
            f"on resourceslices and resourceclaims): {exc.message}"
        )
    return None


class DraWatch:
    """This driver's slices and allocated claims, for :meth:`view`; :meth:`run` until
    cancelled."""

    def __init__(
        self,
        client: KubeClient,
        config: ReflectorConfig | None = None,
        *,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self._client = client
        self._recheck_s = recheck_s
        self._slices: dict[str, SliceFacts] = {}
        self._claims: dict[str, ClaimFacts] = {}
        self._joined: dict[str, DraNode] | None = None
        self.refused: str | None = None
        """Why the resource API is not watched (404, 403); None: watched or being listed."""
        base = dataclasses.replace(
            config or ReflectorConfig(), label_selector=None, field_selector=None
        )
        self.slices = Reflector(
            client,
            RESOURCE_SLICES,
            config=dataclasses.replace(base, keep=_ours),
            handlers=[self._mirror(self._slices, read_slice)],
            name="scheduler-dra-slices",
        )
        self.claims = Reflector(
            client,
            RESOURCE_CLAIMS,
            config=dataclasses.replace(base, keep=allocated_here),
            handlers=[self._mirror(self._claims, read_claim)],
            name="scheduler-dra-claims",
        )

    @property
    def listed(self) -> bool:
        return self.slices.has_synced and self.claims.has_synced

    def view(self) -> DraView:
        """The map's view now (joined once per change)."""
        if self.refused is not None:
            return DraView(False, self.refused)
        if not self.listed:
            return DraView(False, LISTING)
        if self._joined is None:
            self._joined = join(self._slices.values(), self._claims.values())
        return DraView(True, None, self._joined)

    async def run(self) -> None:
        while (refused := await self._refused()) is not None:
            if refused != self.refused:
                log.warning("gpumap_dra_not_watched", reason=refused, retry_in_s=self._recheck_s)
            self.refused = refused
            await asyncio.sleep(self._recheck_s)
        if self.refused is not None:
            log.info("gpumap_dra_watched", previously=self.refused)
        self.refused = None
        async with asyncio.TaskGroup() as group:
            group.create_task(self.slices.run(), name="reflector-scheduler-dra-slices")
            group.create_task(self.claims.run(), name="reflector-scheduler-dra-claims")

    async def _refused(self) -> str | None:
        for resource in (RESOURCE_SLICES, RESOURCE_CLAIMS):
            try:
                await self._client.list(resource, limit=1)
            except KubeError as exc:
                refused = _refusal(resource, exc)
                if refused is not None:
                    return refused
        return None

    def _mirror(
        self, facts: dict[str, _Facts], read: Callable[[JsonObject], _Facts | None]
    ) -> EventHandlers:
        """Handlers keeping ``facts`` (by object key) equal to what ``read`` finds in the
        watched objects; any change drops the remembered join."""

        def upsert(obj: JsonObject) -> None:
            found, key = read(obj), object_key(obj)
            _slim(obj)
            if found is None:
                facts.pop(key, None)
            else:
                facts[key] = found
            self._joined = None

        def remove(obj: JsonObject) -> None:
            facts.pop(object_key(obj), None)
            self._joined = None

        return upserting(upsert, remove)
