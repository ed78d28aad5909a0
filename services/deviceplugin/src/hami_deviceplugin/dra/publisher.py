"""Keeps this node's ResourceSlice for ``gpu.hami.io`` equal to the GPU inventory.

A pass lists the driver's slices of this node (field selectors ``spec.nodeName`` and
``spec.driver``, checked again here), keeps one (the one named ``<node>-gpu-hami-io`` if there
is one), deletes the others (with a UID precondition), and creates or replaces the kept one
when :func:`~.slices.desired_slice` says it differs (a replacement bumps ``pool.generation``).
Passes run at once when the inventory changes (health included), every ``interval`` otherwise
(the kubelet deletes a node's slices when it starts and 30 s after the last driver instance went
away, so a driver must notice and publish again), and ``retry_interval`` after an error.  The
slice is left in place on shutdown: a restarting plugin keeps its devices schedulable, and the
kubelet removes the slices of a driver that stays away.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

import structlog

from hami_deviceplugin.dra.slices import SliceOptions, desired_slice, slice_devices, slice_name
from hami_deviceplugin.gpu.inventory import Inventory
from hami_kube.errors import AlreadyExistsError, ConflictError, KubeError, NotFoundError
from hami_kube.resources import NODES, RESOURCE_SLICES
from hami_kube.rest import KubeClient
from hami_protocol.dra_driver import DRIVER

__all__ = ["SlicePublisher"]

log = structlog.get_logger(__name__)


def _spec(item: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = item.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _meta(item: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = item.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class SlicePublisher:
    def __init__(
        self,
        *,
        client: KubeClient,
        inventory: Inventory,
        options: SliceOptions,
        interval: float = 10.0,
        retry_interval: float = 2.0,
    ) -> None:
        self._client = client
        self._inventory = inventory
        self._options = options
        self._interval = interval
        self._retry = retry_interval
        self._node_uid: str | None = None
        self.passes = 0
        self.writes = 0

    @property
    def node_name(self) -> str:
        return self._options.node_name

    async def _owner_uid(self) -> str:
        if self._node_uid is None:
            try:
                node = await self._client.get(NODES, self.node_name)
            except NotFoundError:
                return ""  # no owner yet; the next create after the node exists gets one
            uid = _meta(node).get("uid")
            self._node_uid = uid if isinstance(uid, str) else ""
        return self._node_uid

    async def _ours(self) -> list[Mapping[str, Any]]:
        listing = await self._client.list(
            RESOURCE_SLICES, field_selector=f"spec.nodeName={self.node_name},spec.driver={DRIVER}"
        )
        items = listing.get("items") or []
        return [
            item
            for item in items
            if isinstance(item, Mapping)
            and _spec(item).get("nodeName") == self.node_name
            and _spec(item).get("driver") == DRIVER
        ]

    async def publish(self) -> bool:
        """One pass; True when it wrote (created, replaced or deleted) something."""
        self.passes += 1
        items = await self._ours()
        name = slice_name(self.node_name)
        keep = next((i for i in items if _meta(i).get("name") == name), None)
        if keep is None and items:
            keep = items[0]
        wrote = False
        for extra in items:
            if extra is keep:
                continue
            with contextlib.suppress(NotFoundError, ConflictError):
                await self._client.delete(
                    RESOURCE_SLICES, str(_meta(extra).get("name")), uid=_meta(extra).get("uid")
                )
                wrote = True
        wanted = desired_slice(
            keep,
            slice_devices(self._inventory.gpus, self._options),
            node_name=self.node_name,
            node_uid=await self._owner_uid(),
        )
        if wanted is None:
            return wrote
        if keep is None:
            await self._client.create(RESOURCE_SLICES, wanted)
        else:
            await self._client.replace(RESOURCE_SLICES, wanted)
        self.writes += 1
        log.info(
            "ResourceSlice published",
            slice=_meta(wanted).get("name"),
            generation=wanted["spec"]["pool"]["generation"],
            devices=[d["name"] for d in wanted["spec"]["devices"]],
        )
        return True

    async def run(self) -> None:
        """Publish until cancelled (see the module docstring)."""
        while True:
            changed = self._inventory.changed
            wait = self._interval
            try:
                await self.publish()
            except (AlreadyExistsError, ConflictError) as exc:
                log.info("ResourceSlice changed meanwhile; publishing again", error=str(exc))
                wait = self._retry / 10
            except KubeError as exc:
                log.warning("ResourceSlice not published", error=str(exc))
                wait = self._retry
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await changed.wait()
