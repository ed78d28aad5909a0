"""The node registration loop: keep ``hami.io/node-nvidia-register``, the handshake,
``hami.io/node-rdma-register`` and (with topology scoring on) ``hami.io/node-nvidia-score``
current.

A pass reads the node (from the node watch once it has synced, else with a GET), asks
:func:`~hami_deviceplugin.node.register.annotations_to_write` what is missing and merge-patches
only that.  Passes run every ``interval`` (30 s) after success and
``retry_interval`` (5 s) after an error, and at once when the GPU or NIC inventory changes or
when the node watch shows something to answer: the scheduler rewrote the handshake to
``Requesting_<ts>``, or the register value differs from ours.  So a ``Requesting`` handshake is
answered within a watch round trip, not at the next tick.

With topology scoring on, every pass reads the backend's links afresh (a GPU reset can change
them) and recomputes the pair scores of the registered GPUs; a pair whose directions disagree
scores 0 and gets a node Warning Event ``AsymmetricGPUP2PLink``, at most once an hour per pair.

With capacity totals on (``capacity_totals``), a pass also merge-patches ``nodes/<node>/status``
so that ``status.capacity`` carries ``hami.io/nvidia-memory`` / ``hami.io/nvidia-cores`` as the
register value says (:func:`~hami_deviceplugin.node.register.capacity_to_write`); off, it removes
them where a previous run left them.  The kubelet copies capacity into allocatable at its next
status sync and zeroes every extended resource when the node object is re-created: the node watch
sees that, and the next pass (at once, or at the latest at the next tick) writes them again.

The node watch (:attr:`Registrar.node_watch`, this node only) is also where the Allocate path
reads the node lock (:meth:`Registrar.cached_node`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import structlog

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.metrics import PluginMetrics
from hami_deviceplugin.node.register import (
    annotations_to_write,
    capacity_to_write,
    pair_score_value,
    register_value,
)
from hami_deviceplugin.rdma.inventory import NicInventory
from hami_deviceplugin.rdma.nics import Nic, rdma_register_value
from hami_kube.errors import ForbiddenError, KubeError
from hami_kube.events import EventRecorder, EventType, ObjectReference
from hami_kube.objects import NodeView, key_for
from hami_kube.patch import patch_metadata
from hami_kube.reflector import EventHandlers, Reflector, ReflectorConfig
from hami_kube.resources import NODES, JsonObject
from hami_kube.rest import KubeClient, PatchType
from hami_kube.timefmt import utc_now
from hami_protocol.config.device import MigProfileAllow
from hami_protocol.config.node import NodeSettings
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import NODE_ALLOCATE_IDENTITY
from hami_protocol.topology.links import ASYMMETRIC_LINK_REASON, AsymmetricPair, LinkTable
from hami_protocol.totals import Totals, node_totals_from_register

__all__ = ["ASYMMETRY_WARNING_EVERY_S", "Registrar"]

log = structlog.get_logger(__name__)

ASYMMETRY_WARNING_EVERY_S: Final = 3600.0
"""How often one asymmetric GPU pair may be warned about (HAMi's one-hour dedup window)."""


class Registrar:
    def __init__(
        self,
        *,
        client: KubeClient,
        node_name: str,
        inventory: Inventory,
        node: NodeSettings,
        metrics: PluginMetrics,
        interval: float = 30.0,
        retry_interval: float = 5.0,
        now: Callable[[], datetime] = utc_now,
        nics: NicInventory | None = None,
        watch_timeout_s: int = 300,
        identity: Callable[[], Awaitable[str | None]] | None = None,
        links: Callable[[], Awaitable[LinkTable]] | None = None,
        recorder: EventRecorder | None = None,
        clock: Callable[[], float] = time.monotonic,
        mig_allowlist: Sequence[MigProfileAllow] = (),
        capacity_totals: bool = False,
    ) -> None:
        """``nics``: the RDMA plugin's NICs, registered; None: the node must have no RDMA
        register.  ``identity``: asked once a pass, the ``hami.io/node-allocate-identity`` value
        the node should carry (None: none).  ``links``: topology scoring on, read once a pass
        (None: off, the score annotation is left alone); ``recorder`` posts the asymmetric-pair
        warnings, timed by ``clock``.  ``mig_allowlist``: the MIG profiles a ``mig`` node may
        register."""
        self._client = client
        self._node_name = node_name
        self._inventory = inventory
        self._node = node
        self._metrics = metrics
        self._interval = interval
        self._retry = retry_interval
        self._now = now
        self._wake = asyncio.Event()
        self._mig_allowlist = tuple(mig_allowlist)
        self._capacity_totals = capacity_totals
        self._remove_stale = True
        """Mode off: still try to remove totals a previous run left (until refused)."""
        self._register = register_value(inventory.gpus, node, mig_allowlist=self._mig_allowlist)
        self._totals = self._totals_of(self._register)
        self._rdma_register: str | None = None
        self._probe_identity = identity
        self._identity: str | None = None
        self._read_links = links
        self._score: str | None = None
        self._asymmetric: tuple[AsymmetricPair, ...] = ()
        self._recorder = recorder
        self._clock = clock
        self._warned: dict[tuple[str, str], float] = {}
        self.passes = 0
        self.patches = 0
        inventory.subscribe(self._on_inventory)
        if nics is not None:
            nics.subscribe(self._on_nics)
        self.node_watch = self._node_reflector(watch_timeout_s)
        """A watch on this node only, feeding :meth:`observe_node`; run it with the loop."""

    @property
    def register(self) -> str:
        """The register value we want on the node."""
        return self._register

    @property
    def score(self) -> str | None:
        """The pair-score value we want on the node (None: scoring off, or not read yet)."""
        return self._score

    @property
    def rdma_register(self) -> str | None:
        """The RDMA register value we want on the node (None: no annotation)."""
        return self._rdma_register

    @property
    def totals(self) -> Totals | None:
        """The capacity totals we want in node status (None: the mode is off)."""
        return self._totals

    def _totals_of(self, register: str) -> Totals | None:
        return node_totals_from_register(register) if self._capacity_totals else None

    def _on_inventory(self, gpus: tuple[Gpu, ...]) -> None:
        self._register = register_value(gpus, self._node, mig_allowlist=self._mig_allowlist)
        self._totals = self._totals_of(self._register)
        self._wake.set()

    def _on_nics(self, nics: tuple[Nic, ...]) -> None:
        self._rdma_register = rdma_register_value(nics)
        self._wake.set()

    def _writes(self, node: Mapping[str, Any]) -> dict[str, str | None]:
        return annotations_to_write(
            NodeView(node).annotations,
            register=self._register,
            now=self._now(),
            rdma_register=self._rdma_register,
            identity=self._identity,
            score=self._score,
        )

    async def _read_scores(self) -> None:
        if self._read_links is None:
            return
        links = await self._read_links()
        self._score, self._asymmetric = pair_score_value(self._inventory.gpus, links)

    def _warn_asymmetric(self, node: Mapping[str, Any], pairs: Iterable[AsymmetricPair]) -> None:
        if self._recorder is None:
            return
        now = self._clock()
        involved = ObjectReference(kind="Node", name=self._node_name, uid=NodeView(node).uid)
        for pair in pairs:
            key = (pair.first, pair.second)
            last = self._warned.get(key)
            if last is not None and now - last < ASYMMETRY_WARNING_EVERY_S:
                continue
            self._warned[key] = now
            log.warning("asymmetric GPU link", node=self._node_name, pair=list(key))
            self._recorder.emit(involved, EventType.WARNING, ASYMMETRIC_LINK_REASON, pair.message())

    def wake(self) -> None:
        self._wake.set()

    def _capacity_writes(self, node: Mapping[str, Any]) -> dict[str, str | None]:
        if self._totals is None and not self._remove_stale:
            return {}
        return capacity_to_write(NodeView(node).capacity, self._totals)

    def observe_node(self, node: Mapping[str, Any]) -> None:
        """A node watch event: wake the loop when the node needs an answer."""
        if self._writes(node) or self._capacity_writes(node):
            self._wake.set()

    async def sync_once(self) -> bool:
        """One pass; True when the node is current (patched or already so)."""
        started = time.perf_counter()
        self.passes += 1
        try:
            if self._probe_identity is not None:
                self._identity = await self._probe_identity()
            await self._read_scores()
            node = self._current_node() or await self._client.get(NODES, self._node_name)
            self._warn_asymmetric(node, self._asymmetric)
            writes = self._writes(node)
            if writes:
                await patch_metadata(self._client, NODES, self._node_name, annotations=writes)
                self.patches += 1
                log.info("node annotations written", keys=sorted(writes))
            capacity = self._capacity_writes(node)
            if capacity:
                await self._write_capacity(capacity)
        except (KubeError, ProtocolError) as exc:
            self._metrics.register_syncs.labels(outcome="error").inc()
            log.warning("node registration failed", node=self._node_name, error=str(exc))
            return False
        finally:
            self._metrics.register_duration.observe(time.perf_counter() - started)
        patched = bool(writes or capacity)
        self._metrics.register_syncs.labels(outcome="patched" if patched else "unchanged").inc()
        return True

    async def _write_capacity(self, capacity: Mapping[str, str | None]) -> None:
        """Merge-patch the totals into node status.  With the mode off this only removes what a
        previous run left, and the chart grants ``nodes/status`` only with the mode on: a
        refusal is then logged once and the removal given up, not retried every pass."""
        try:
            await self._client.patch(
                NODES,
                self._node_name,
                {"status": {"capacity": dict(capacity)}},
                patch_type=PatchType.MERGE,
                subresource="status",
            )
        except ForbiddenError as exc:
            if self._totals is not None:
                raise
            log.warning(
                "stale capacity totals not removed: no right to patch nodes/status",
                node=self._node_name,
                error=str(exc),
            )
            self._remove_stale = False
            return
        self.patches += 1
        log.info("node capacity totals written", capacity=dict(capacity))

    async def withdraw_identity(self) -> None:
        """On a graceful exit: remove ``hami.io/node-allocate-identity`` if this plugin said it,
        so binds take the node lock at once rather than when its stamp goes stale (whatever
        plugin comes next may not tell pods apart)."""
        if self._identity is None:
            return
        try:
            await patch_metadata(
                self._client, NODES, self._node_name, annotations={NODE_ALLOCATE_IDENTITY: None}
            )
        except KubeError as exc:
            log.warning("allocate identity not withdrawn", node=self._node_name, error=str(exc))
        else:
            self._identity = None
            log.info("allocate identity withdrawn", node=self._node_name)

    async def run(self) -> None:
        """Register now, then keep the node current until cancelled."""
        while True:
            self._wake.clear()
            if not await self.sync_once():
                await asyncio.sleep(self._retry)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()

    def _current_node(self) -> JsonObject | None:
        """The node from the node watch once it has synced (None before: read it).  A pass
        decided on a watch copy that lags at worst writes what the node already has (merge
        patches of our own annotations, harmless to repeat), and the watch event that made it
        lag wakes another pass; reading the cache spares the API server a GET per pass, and a
        pass woken by a stale event reads nothing at all."""
        if not self.node_watch.has_synced:
            return None
        return self.cached_node()

    def cached_node(self) -> JsonObject | None:
        """The node as the node watch has it; None before the watch delivered it."""
        return self.node_watch.store.get(key_for(None, self._node_name))

    def _node_reflector(self, watch_timeout_s: int) -> Reflector:

        def updated(_: JsonObject, new: JsonObject) -> None:
            self.observe_node(new)

        return Reflector(
            self._client,
            NODES,
            config=ReflectorConfig(
                field_selector=f"metadata.name={self._node_name}",
                watch_timeout_s=watch_timeout_s,
            ),
            handlers=[EventHandlers(on_add=self.observe_node, on_update=updated)],
            name=f"node-{self._node_name}",
        )
