"""A lock owner's state from the caches, a GET only on a miss — and never a stale copy's word
for freeing a lock taken after that copy was bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from hami_protocol import keys
from hami_protocol.node.lock import NodeLock, OwnerState

from ..service_helpers import Harness, container, eventually, gpu_limits, harness, pod_object

pytestmark = pytest.mark.timeout(60)


def misses(h: Harness) -> float:
    value = h.scheduler.metrics.registry.get_sample_value(
        "hami_scheduler_cache_misses_total", {"object": "lock_owner"}
    )
    return 0.0 if value is None else value


async def bound_pod(h: Harness, name: str, node: str, **notes: str) -> dict[str, Any]:
    pod = pod_object(
        name,
        container(limits=gpu_limits(1, mem=100)),
        annotations={
            keys.VGPU_NODE: node,
            keys.NVIDIA_DEVICES_ALLOCATED: f"GPU-{node}-0,NVIDIA,100,0:;",
            **notes,
        },
    )
    pod["spec"]["nodeName"] = node
    created = await h.add_pod(pod)
    await eventually(lambda: h.scheduler.watcher.pods.store.get(f"default/{name}") is not None)
    return created


async def test_owner_states_come_from_the_pod_watch() -> None:
    async with harness() as h:
        owners = h.scheduler.binder._owners
        now = datetime.now(UTC)
        lock = NodeLock(now, "default", "p")
        fresh = str(int(now.timestamp()))
        await bound_pod(h, "p", "n", **{keys.BIND_TIME: fresh, keys.BIND_PHASE: "allocating"})
        assert await owners.state("default", "p", "n", lock) is OwnerState.WAITING
        assert await owners.state("default", "p", "m", lock) is OwnerState.ELSEWHERE
        await h.api.patch(
            "pods",
            "p",
            {"metadata": {"annotations": {keys.BIND_PHASE: keys.BIND_PHASE_SUCCESS}}},
            namespace="default",
            patch_type="merge",
        )
        await eventually(
            lambda: owners.known("default", "p", "n", lock) is OwnerState.FINISHED,
            what="finished seen",
        )
        assert misses(h) == 0
        # Our own bind in flight: binding, whatever the watch holds.
        with owners.binding("default", "p"):
            assert owners.known("default", "p", "n", lock) is OwnerState.BINDING
        # Unknown to the caches: one counted GET.
        assert await owners.state("default", "ghost", "n", lock) is OwnerState.GONE
        assert misses(h) == 1


async def test_a_copy_bound_before_the_lock_cannot_free_it() -> None:
    """The watch still shows an old pod of that name, finished; the lock is newer than its
    bind-time, so it belongs to a newer pod of the same name: ask the API server."""
    async with harness() as h:
        owners = h.scheduler.binder._owners
        now = datetime.now(UTC)
        old = str(int((now - timedelta(minutes=5)).timestamp()))
        await bound_pod(h, "p", "n", **{keys.BIND_TIME: old, keys.BIND_PHASE: "success"})
        lock = NodeLock(now, "default", "p")
        assert owners.known("default", "p", "n", lock) is None
        # Here the API server has the same pod (it is the old one after all): its word counts.
        assert await owners.state("default", "p", "n", lock) is OwnerState.FINISHED
        assert misses(h) == 1
        # A lock from before its bind: the copy is the lock's owner.
        earlier = NodeLock(now - timedelta(minutes=6), "default", "p")
        assert owners.known("default", "p", "n", earlier) is OwnerState.FINISHED


async def test_a_pod_this_process_just_bound_waits_until_the_watch_speaks() -> None:
    async with harness() as h:
        owners = h.scheduler.binder._owners
        lock = NodeLock(datetime.now(UTC), "default", "q")
        owners.bound("default", "q", "n")
        assert owners.known("default", "q", "n", lock) is OwnerState.WAITING
        assert owners.known("default", "q", "m", lock) is None
        # Any event of that pod hands the word to the watch's copy — here an older pod of that
        # name, finished before the lock was taken: not to be believed, so unknown.
        old = str(int((datetime.now(UTC) - timedelta(minutes=5)).timestamp()))
        await bound_pod(h, "q", "n", **{keys.BIND_TIME: old, keys.BIND_PHASE: "success"})
        assert owners.known("default", "q", "n", lock) is None
