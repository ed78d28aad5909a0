"""The kubelet's DRA manager (``pkg/kubelet/cm/dra/manager.go``) for the stand-in.

:meth:`DraManager.prepare` runs before a pod's containers start: every claim the pod uses is
read from the API server and checked (:mod:`.claims`: owner, ``reservedFor``, allocated), the
drivers of its allocation must be registered, then claims not yet prepared on the node get one
NodePrepareResources per driver (claims shared with a pod already running are not sent again).
Any failure is a :class:`PrepareError` whose text is the kubelet's; the pod's reference to the
claims stays in the cache, so a pod that never starts still gets its claims unprepared.

:meth:`DraManager.container_resources` gives each container the CDI devices of the claims it
lists (:func:`~.claims.devices_for_request`) and applies the CDI spec files found in the
node's spec directories (:mod:`.cdi`) as the runtime would: the result is one
:class:`~hami_kubesim.kubelet.status.ResourceAllocation` per ``resources.claims`` entry, named
``claim:<pod claim>[/<request>]``, with the env, mounts and device nodes of the edits — the same
record a device-plugin ``Allocate`` answer makes, so HAMi-core play and the checks read both.

:meth:`DraManager.release` drops a pod's references when it stops or is deleted; :meth:`run`
then calls NodeUnprepareResources (one call per driver) for every claim no pod on the node
references any more, retrying failures every ``retry_interval`` seconds. The claim cache is the
kubelet's checkpoint (``dra_manager_state``): it survives :meth:`KubeletStandIn.restart`. A new
stand-in learns running pods' claims by preparing them again (drivers must be idempotent).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog

from hami_kube.errors import ApiError, KubeError
from hami_kube.objects import PodView
from hami_kube.resources import RESOURCE_CLAIMS
from hami_kube.rest import KubeClient
from hami_kubesim.kubelet.dra.cdi import CdiError, CdiSpec, parse_spec_text, resolve
from hami_kubesim.kubelet.dra.claims import (
    ClaimError,
    PodClaim,
    PreparedDevice,
    claim_drivers,
    container_claims,
    devices_for_request,
    pod_claims,
)
from hami_kubesim.kubelet.dra.plugin import ClaimRef, DraCallError, DraPlugin
from hami_kubesim.kubelet.dra.watcher import NotRegisteredError, PluginWatcher
from hami_kubesim.kubelet.status import DeviceSpecRecord, MountRecord, ResourceAllocation

__all__ = [
    "RESOURCE_CLAIMS",
    "ClaimState",
    "DraManager",
    "InjectionError",
    "PrepareError",
    "load_specs",
]

log = structlog.get_logger(__name__)

_SPEC_SUFFIXES: Final = (".json", ".yaml", ".yml")
_TIMINGS_KEPT: Final = 10_000


class PrepareError(Exception):
    """The pod's claims could not be prepared; ``str()`` is the kubelet's error."""


class InjectionError(Exception):
    """A container's CDI devices could not be resolved (the runtime refuses to create it)."""

    def __init__(self, container: str, text: str) -> None:
        super().__init__(text)
        self.container = container


@dataclass(slots=True)
class ClaimState:
    """A claim in the node's cache: which pods use it, whether and how it was prepared."""

    ref: ClaimRef
    drivers: tuple[str, ...]
    pods: set[str] = field(default_factory=set)
    prepared: bool = False
    devices: dict[str, tuple[PreparedDevice, ...]] = field(default_factory=dict)
    """What each driver's NodePrepareResources answered."""

    def all_devices(self) -> tuple[PreparedDevice, ...]:
        return tuple(d for driver in self.drivers for d in self.devices.get(driver, ()))


def load_specs(directories: Iterable[Path]) -> tuple[list[CdiSpec], list[str]]:
    """Every spec file in ``directories`` (lowest priority first; files by name), and a
    ``<file>: <error>`` text per file that could not be loaded."""
    specs: list[CdiSpec] = []
    errors: list[str] = []
    for directory in directories:
        try:
            paths = sorted(p for p in directory.iterdir() if p.suffix in _SPEC_SUFFIXES)
        except FileNotFoundError:
            continue
        for path in paths:
            try:
                specs.append(parse_spec_text(path.read_text(), source=str(path)))
            except (OSError, CdiError) as error:
                errors.append(f"{path}: {error}")
    return specs, errors


def _fetch_error(name: str, error: KubeError) -> ClaimError:
    text = error.message if isinstance(error, ApiError) else str(error)
    return ClaimError(f"fetch ResourceClaim {name}: {text}")


class DraManager:
    """Claims of one node; see the module docstring."""

    def __init__(
        self,
        *,
        node: str,
        plugins: PluginWatcher,
        cdi_dirs: Sequence[Path],
        retry_interval: float = 10.0,
    ) -> None:
        self._node = node
        self._plugins = plugins
        self._cdi_dirs = tuple(cdi_dirs)
        self._retry = retry_interval
        self._claims: dict[tuple[str, str], ClaimState] = {}
        self._lock = asyncio.Lock()  # one Prepare/Unprepare at a time, as the driver helper
        self._wake = asyncio.Event()
        self.call_seconds: dict[str, deque[float]] = {
            "NodePrepareResources": deque(maxlen=_TIMINGS_KEPT),
            "NodeUnprepareResources": deque(maxlen=_TIMINGS_KEPT),
        }
        """How long each driver call took (the latest ones, answered or failed), by method:
        what a benchmark reads for the kubelet's view of Prepare latency."""

    @property
    def claims(self) -> Mapping[tuple[str, str], ClaimState]:
        """The cache, by ``(namespace, claim name)``."""
        return dict(self._claims)

    # ----- prepare -------------------------------------------------------------------------

    async def prepare(self, client: KubeClient, pod: PodView) -> None:
        """NodePrepareResources for the pod's claims not prepared yet; :class:`PrepareError`."""
        try:
            await self._prepare(client, pod)
        except (ClaimError, NotRegisteredError) as error:
            raise PrepareError(f"prepare dynamic resources: {error}") from error

    async def _prepare(self, client: KubeClient, pod: PodView) -> None:
        namespace = pod.namespace or "default"
        checked: list[tuple[PodClaim, ClaimRef, tuple[str, ...], dict[str, DraPlugin]]] = []
        for ref in pod_claims(pod):
            try:
                claim = await client.get(RESOURCE_CLAIMS, ref.claim, namespace=namespace)
            except KubeError as error:
                raise _fetch_error(ref.claim, error) from error
            drivers = claim_drivers(pod, ref, claim)
            uid = str(claim.get("metadata", {}).get("uid") or "")
            plugins = {driver: self._plugins.get(driver) for driver in drivers}
            checked.append((ref, ClaimRef(namespace, ref.claim, uid), drivers, plugins))
        async with self._lock:
            batches: dict[DraPlugin, list[ClaimRef]] = {}
            todo: list[ClaimState] = []
            for _, claim_ref, drivers, plugins in checked:
                state = self._claims.setdefault(
                    (namespace, claim_ref.name), ClaimState(claim_ref, drivers)
                )
                if state.ref.uid != claim_ref.uid:
                    raise ClaimError(
                        f"old ResourceClaim with same name {claim_ref.name} and different UID "
                        f"{state.ref.uid} still exists (previous pod force-deleted?!)"
                    )
                state.pods.add(pod.uid)
                if state.prepared or state in todo:
                    continue
                todo.append(state)
                for driver in drivers:
                    batches.setdefault(plugins[driver], []).append(claim_ref)
            for plugin, refs in batches.items():
                await self._prepare_batch(plugin, namespace, refs)
            for state in todo:
                state.prepared = True

    async def _prepare_batch(self, plugin: DraPlugin, namespace: str, refs: list[ClaimRef]) -> None:
        started = time.perf_counter()
        try:
            answer = await plugin.prepare(refs)
        except DraCallError as error:
            raise ClaimError(f"NodePrepareResources: {error}") from error
        finally:
            self.call_seconds["NodePrepareResources"].append(time.perf_counter() - started)
        by_uid = {ref.uid: ref for ref in refs}
        for uid, result in answer.items():
            ref = by_uid.get(uid)
            if ref is None:
                raise ClaimError(
                    f"NodePrepareResources returned result for unknown claim UID {uid}"
                )
            if result.error:
                raise ClaimError(
                    f"NodePrepareResources failed for ResourceClaim {ref.name}: {result.error}"
                )
            self._claims[(namespace, ref.name)].devices[plugin.name] = result.devices
        skipped = len(refs) - len(answer)
        if skipped:
            raise ClaimError(f"NodePrepareResources skipped {skipped} ResourceClaims")

    # ----- what the containers get -----------------------------------------------------------

    async def container_resources(self, pod: PodView) -> dict[str, tuple[ResourceAllocation, ...]]:
        """Per container, one record per ``resources.claims`` entry (see the module docstring);
        :class:`InjectionError` for the first container whose CDI devices cannot be resolved."""
        namespace = pod.namespace or "default"
        try:
            entries = container_claims(pod, pod_claims(pod))
        except ClaimError as error:  # the status changed since prepare: the kubelet's text
            first = pod.containers[0].name if pod.containers else ""
            raise InjectionError(first, str(error)) from error
        if not entries:
            return {}
        specs, errors = await asyncio.to_thread(load_specs, self._cdi_dirs)
        out: dict[str, list[ResourceAllocation]] = {}
        for entry in entries:
            state = self._claims.get((namespace, entry.claim))
            devices = devices_for_request(state.all_devices() if state else (), entry.request)
            ids = tuple(dict.fromkeys(i for d in devices for i in d.cdi_ids))
            try:
                edits = resolve(specs, ids, spec_errors=errors)
            except CdiError as error:
                raise InjectionError(
                    entry.container, f"failed to inject CDI devices: {error}"
                ) from error
            out.setdefault(entry.container, []).append(
                ResourceAllocation(
                    resource=entry.resource,
                    device_ids=tuple(d.resource_id for d in devices),
                    envs=edits.env_map,
                    mounts=tuple(
                        MountRecord(m.container_path, m.host_path, m.read_only)
                        for m in edits.mounts
                    ),
                    devices=tuple(
                        DeviceSpecRecord(n.path, n.host_path, n.permissions)
                        for n in edits.device_nodes
                    ),
                    cdi_devices=ids,
                )
            )
        return {name: tuple(given) for name, given in out.items()}

    # ----- unprepare -------------------------------------------------------------------------

    def release(self, pod_uid: str) -> None:
        """The pod stopped or is gone: claims it alone used get unprepared by :meth:`run`."""
        for state in self._claims.values():
            if pod_uid in state.pods:
                state.pods.discard(pod_uid)
                if not state.pods:
                    self._wake.set()

    async def run(self) -> None:
        """Unprepare unused claims after each release, and retry failures, until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            if not await self.unprepare_unused():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._retry):
                        await self._wake.wait()
                self._wake.set()

    async def unprepare_unused(self) -> bool:
        """NodeUnprepareResources for every claim no pod references; False when one failed
        (it stays in the cache for the next try)."""
        async with self._lock:
            unused = [s for s in self._claims.values() if not s.pods]
            batches: dict[str, list[ClaimState]] = {}
            for state in unused:
                for driver in state.drivers:
                    batches.setdefault(driver, []).append(state)
            failed: set[str] = set()
            for driver, states in batches.items():
                failed |= await self._unprepare_batch(driver, states)
            for state in unused:
                if state.ref.uid not in failed and not state.pods:
                    self._claims.pop((state.ref.namespace, state.ref.name), None)
            return not failed

    async def _unprepare_batch(self, driver: str, states: list[ClaimState]) -> set[str]:
        """The UIDs of the claims whose unprepare failed."""
        refs = [s.ref for s in states]
        started = time.perf_counter()
        try:
            answer = await self._plugins.get(driver).unprepare(refs)
        except (NotRegisteredError, DraCallError) as error:
            log.warning("NodeUnprepareResources failed", node=self._node, error=str(error))
            return {r.uid for r in refs}
        finally:
            self.call_seconds["NodeUnprepareResources"].append(time.perf_counter() - started)
        failed = {r.uid for r in refs if r.uid not in answer or answer[r.uid]}
        for ref in refs:
            if ref.uid in failed:
                log.warning(
                    "NodeUnprepareResources failed for ResourceClaim",
                    node=self._node,
                    claim=f"{ref.namespace}/{ref.name}",
                    error=answer.get(ref.uid) or "skipped",
                )
        return failed
