"""Per-vendor node locks at bind, through the extender's HTTP interface against the emulated API
server: every locking vendor's key taken in the sorted order of the common words, the ones taken
released when a later one cannot be, Cambricon's own key and value, lockless vendors, and the
owner-state rule on Cambricon's key."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import aiohttp
import pytest

from hami_kubesim.testing import eventually, running_apiserver
from hami_protocol import keys
from hami_protocol.node.identity import format_identity
from hami_protocol.node.lock import NodeLock, decode_node_lock, encode_node_lock
from hami_protocol.node.lock_keys import decode_cambricon_lock, encode_cambricon_lock

from ..service_helpers import (
    MLU_CAPACITY,
    MTHREADS_CAPACITY,
    Harness,
    annotations_of,
    container,
    gpu_limits,
    gpus,
    harness,
    metric,
    pod_object,
    scheduler_on,
)

pytestmark = pytest.mark.timeout(60)

MLU = {"cambricon.com/vmlu": "1", "cambricon.com/mlu.smlu.vmemory": "4"}
MLU_LOCK = keys.CAMBRICON_DSMLU_LOCK


def node_locks(h: Harness, node: str = "n") -> dict[str, str]:
    notes = annotations_of(h.node(node))
    return {k: notes[k] for k in (keys.NODE_LOCK, MLU_LOCK) if k in notes}


async def mixed_node(h: Harness, **annotations: str) -> None:
    capacity = {"nvidia.com/gpu": "20", **MLU_CAPACITY, **MTHREADS_CAPACITY}
    await h.add_node("n", gpus("n", 2), allocatable=capacity, annotations=annotations)
    await h.synced_node("n")


async def filtered(h: Harness, name: str, limits: dict[str, str]) -> dict[str, object]:
    pod = await h.add_pod(pod_object(name, container(limits=limits)))
    assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"], name
    return pod


async def mlu_allocated(h: Harness, name: str) -> None:
    """What cambricon-device-plugin writes once it served the pod: assigned, lock deleted."""
    await h.api.patch(
        "pods",
        name,
        {"metadata": {"annotations": {keys.CAMBRICON_DSMLU_ASSIGNED: "true"}}},
        namespace="default",
        patch_type="merge",
    )
    await h.api.patch(
        "nodes", "n", {"metadata": {"annotations": {MLU_LOCK: None}}}, patch_type="merge"
    )


def fresh_legacy_lock() -> str:
    return encode_node_lock(NodeLock(datetime.now(UTC)))


async def test_a_pod_asking_nvidia_and_cambricon_locks_mlu_first_then_the_mutex() -> None:
    async with harness() as h:
        await mixed_node(h)
        pod = await filtered(h, "both", {**gpu_limits(1, mem=1000), **MLU})
        # The mutex is held by a lock naming no pod: the bind takes what comes before it and waits.
        await h.set_lock(fresh_legacy_lock())
        binding = asyncio.create_task(h.bind(pod, "n"))
        # "MLU" sorts before "NVIDIA" (the table lists NVIDIA first): Cambricon's key is first.
        await eventually(lambda: MLU_LOCK in node_locks(h), what="Cambricon's lock taken")
        assert not binding.done()
        await h.api.patch(
            "nodes", "n", {"metadata": {"annotations": {keys.NODE_LOCK: None}}}, patch_type="merge"
        )
        assert await binding == ""
        locks = node_locks(h)
        assert decode_node_lock(locks[keys.NODE_LOCK]).owned_by("default", "both")
        taken = decode_cambricon_lock(locks[MLU_LOCK])
        assert taken.legacy
        assert abs(taken.acquired - datetime.now(UTC)) < timedelta(minutes=1)


async def test_the_second_lock_failing_releases_the_first_and_the_bind_says_why() -> None:
    async with harness(node_lock_wait_s=0.5) as h:
        await mixed_node(h)
        pod = await filtered(h, "both", {**gpu_limits(1, mem=1000), **MLU})
        held = fresh_legacy_lock()
        await h.set_lock(held)
        error = await h.bind(pod, "n")
        assert "node n is locked since" in error
        # Cambricon's lock, taken first, was rolled back; the other writer's mutex is untouched.
        assert node_locks(h) == {keys.NODE_LOCK: held}
        assert "nodeName" not in h.pod("both")["spec"]
        await eventually(lambda: bool(h.events("BindingFailed")), what="BindingFailed")


async def test_a_cambricon_pod_writes_only_its_own_lock_as_a_bare_rfc3339_time() -> None:
    async with harness() as h:
        await mixed_node(h)
        pod = await filtered(h, "mlu", MLU)
        assert await h.bind(pod, "n") == ""
        locks = node_locks(h)
        assert list(locks) == [MLU_LOCK]
        assert locks[MLU_LOCK] == encode_cambricon_lock(
            decode_cambricon_lock(locks[MLU_LOCK]).acquired
        )
        assert "," not in locks[MLU_LOCK]


async def test_a_lockless_vendor_takes_no_lock() -> None:
    async with harness() as h:
        await mixed_node(h)
        limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "4"}
        pod = await filtered(h, "mt", limits)
        assert await h.bind(pod, "n") == ""
        assert node_locks(h) == {}
        assert h.pod("mt")["spec"]["nodeName"] == "n"


async def test_a_pod_resources_node_skips_only_the_nvidia_lock() -> None:
    async with harness() as h:
        identity = {keys.NODE_ALLOCATE_IDENTITY: format_identity(datetime.now(UTC))}
        await mixed_node(h, **identity)
        pod = await filtered(h, "both", {**gpu_limits(1, mem=1000), **MLU})
        assert await h.bind(pod, "n") == ""
        assert list(node_locks(h)) == [MLU_LOCK]


async def test_a_cambricon_lock_is_waited_for_past_its_two_minutes_while_its_owner_waits() -> None:
    offset = [timedelta(0)]

    def now() -> datetime:
        return datetime.now(UTC) + offset[0]

    async with harness(now=now) as h:
        await mixed_node(h)
        first = await filtered(h, "first", MLU)
        assert await h.bind(first, "n") == ""
        held = node_locks(h)[MLU_LOCK]
        # Past Cambricon's 2 minutes, with its owner still waiting for its Allocate.
        offset[0] = timedelta(minutes=3)
        second = await filtered(h, "second", MLU)
        binding = asyncio.create_task(h.bind(second, "n"))
        await eventually(
            lambda: dict(h.scheduler.binder._waits.waiting()) == {"n": 1}, what="second waits"
        )
        assert node_locks(h)[MLU_LOCK] == held
        await mlu_allocated(h, "first")
        assert await binding == ""
        assert node_locks(h)[MLU_LOCK] != held


async def test_an_overdue_cambricon_lock_is_reported_once_naming_its_owner_and_key() -> None:
    offset = [timedelta(0)]

    def now() -> datetime:
        return datetime.now(UTC) + offset[0]

    async with harness(now=now, node_lock_wait_s=0.3) as h:
        await mixed_node(h)
        first = await filtered(h, "first", MLU)
        assert await h.bind(first, "n") == ""
        await eventually(lambda: bool(h.scheduler.binder._waits.vendor_locks), what="lock seen")
        await h.scheduler.upkeep.run_pass()
        assert metric(h, "hami_node_lock_overdue") == 0
        # Past Cambricon's 2 minutes, its owner still waiting for its Allocate.
        offset[0] = timedelta(minutes=3)
        second = await filtered(h, "second", MLU)
        assert "waiting for its device plugin" in await h.bind(second, "n")
        await h.scheduler.upkeep.run_pass()
        await h.scheduler.upkeep.run_pass()
        assert metric(h, "hami_node_lock_overdue") == 1
        await eventually(lambda: bool(h.events("NodeLockOverdue")), what="event")
        (event,) = h.events("NodeLockOverdue")
        assert event["type"] == "Warning"
        assert f"pod default/first has held the node lock {MLU_LOCK} since" in event["message"]
        assert "past the 2m0s timeout" in event["message"]
        await mlu_allocated(h, "first")
        await eventually(lambda: not h.scheduler.binder._waits.vendor_locks, what="lock gone")
        await h.scheduler.upkeep.run_pass()
        assert metric(h, "hami_node_lock_overdue") == 0
        assert len(h.events("NodeLockOverdue")) == 1


async def test_after_a_restart_a_waiting_pods_cambricon_lock_is_still_kept_and_reported() -> None:
    # Cambricon's value names no pod; a new process (a restart, another replica) finds its owner
    # among the pods the caches show waiting on the node, instead of freeing it by age.
    offset = [timedelta(0)]

    def now() -> datetime:
        return datetime.now(UTC) + offset[0]

    async with running_apiserver() as sim:
        async with scheduler_on(sim, now=now) as before, aiohttp.ClientSession() as http:
            h = Harness(sim, before, http)
            await mixed_node(h)
            first = await filtered(h, "first", MLU)
            assert await h.bind(first, "n") == ""
            held = node_locks(h)[MLU_LOCK]
        async with (
            scheduler_on(sim, now=now, node_lock_wait_s=0.3) as after,
            aiohttp.ClientSession() as http,
        ):
            h = Harness(sim, after, http)
            await h.synced_node("n")
            offset[0] = timedelta(minutes=3)
            second = await filtered(h, "second", MLU)
            error = await h.bind(second, "n")
            assert f"{MLU_LOCK} is held by default/first, waiting for its device plugin" in error
            assert node_locks(h)[MLU_LOCK] == held
            await h.scheduler.upkeep.run_pass()
            assert metric(h, "hami_node_lock_overdue") == 1
            await mlu_allocated(h, "first")
            assert await h.bind(await filtered(h, "third", MLU), "n") == ""


async def test_a_cambricon_lock_another_writer_left_is_taken_over_after_two_minutes() -> None:
    async with harness(node_lock_wait_s=0.5) as h:
        await mixed_node(h)
        stale = encode_cambricon_lock(datetime.now(UTC) - timedelta(minutes=3))
        fresh = encode_cambricon_lock(datetime.now(UTC) - timedelta(seconds=30))
        await h.api.patch(
            "nodes", "n", {"metadata": {"annotations": {MLU_LOCK: fresh}}}, patch_type="merge"
        )
        pod = await filtered(h, "mlu", MLU)
        error = await h.bind(pod, "n")
        assert f"node n's {MLU_LOCK} is held since" in error
        assert node_locks(h) == {MLU_LOCK: fresh}
        await h.api.patch(
            "nodes", "n", {"metadata": {"annotations": {MLU_LOCK: stale}}}, patch_type="merge"
        )
        again = await filtered(h, "mlu2", MLU)
        assert await h.bind(again, "n") == ""
        assert node_locks(h)[MLU_LOCK] not in {stale, fresh}
