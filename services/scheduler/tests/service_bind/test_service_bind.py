"""``/bind`` through the emulated API server: node lock semantics (§8 item 35), the Binding
that carries the decision, and undoing everything on failure.  Waiting in line for a lock:
``test_service_lock_waits.py``."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from hami_protocol import keys
from hami_protocol.node.lock import NodeLock, OwnerState, decode_node_lock, encode_node_lock
from hami_protocol.vendor.table import DEFAULT_VENDORS
from hami_scheduler.nodelock.locker import LockContendedError, NodeLocker

from ..service_helpers import (
    Harness,
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    labels_of,
    pod_object,
)

pytestmark = pytest.mark.timeout(60)


def lock_of(h: Harness, node: str = "n") -> str | None:
    return annotations_of(h.node(node)).get(keys.NODE_LOCK)


def used(h: Harness, node: str = "n") -> int:
    return sum(d.used for d in h.scheduler.cache.nodes[node].devices)


async def test_bind_locks_the_node_marks_allocating_and_posts_the_binding() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        pod = await h.filtered("p")
        assert await h.bind(pod, "n") == ""
        stored = h.pod("p")
        assert stored["spec"]["nodeName"] == "n"
        notes = annotations_of(stored)
        assert notes[keys.BIND_PHASE] == "allocating"
        assert int(notes[keys.BIND_TIME]) > 0
        lock = decode_node_lock(lock_of(h) or "")
        assert (lock.namespace, lock.pod) == ("default", "p")
        assert datetime.now(UTC) - lock.acquired < timedelta(minutes=1)
        await eventually(lambda: bool(h.events("BindingSucceed")), what="event")
        assert h.events("BindingSucceed")[0]["message"] == (
            "Successfully binding node [n] to default/p"
        )


async def test_the_binding_carries_the_decision_and_bind_phase() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        pod = await h.filtered("p")
        decided = h.scheduler.filters.pending._entries[pod["metadata"]["uid"]].record
        assert decided is not None
        assert await h.bind(pod, "n") == ""
        notes = annotations_of(h.pod("p"))
        assert {k: notes[k] for k in decided.annotations} == dict(decided.annotations)
        assert notes[keys.VGPU_NODE] == "n"
        assert notes[keys.BIND_PHASE] == "allocating"
        assert len(h.scheduler.filters.pending) == 0


async def test_a_live_holder_makes_the_lock_contended_and_the_loser_is_undone() -> None:
    async with harness(node_lock_wait_s=1.0) as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        first = await h.filtered("first")
        assert await h.bind(first, "n") == ""
        since = encode_node_lock(NodeLock(decode_node_lock(lock_of(h) or "").acquired))
        second = await h.filtered("second")
        assert used(h) == 2
        error = await h.bind(second, "n")
        holder = f"node n is locked by default/first, waiting for its device plugin since {since}"
        assert re.fullmatch(re.escape(holder) + r"; waited [12]s", error), error
        assert decode_node_lock(lock_of(h) or "").pod == "first"
        assert "nodeName" not in h.pod("second")["spec"]
        # The loser's reservation is dropped: only the bound pod holds a device.
        assert used(h) == 1
        assert h.scheduler.cache.assumed_count() == 0
        await eventually(lambda: bool(h.events("BindingFailed")), what="event")
        assert h.events("BindingFailed")[0]["message"] == error


async def test_expired_and_dangling_locks_are_taken_over() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        await h.add_pod(pod_object("alive"))
        old = datetime.now(UTC) - timedelta(minutes=6)
        await h.set_lock(encode_node_lock(NodeLock(old, "default", "alive")))
        pod = await h.filtered("late")
        assert await h.bind(pod, "n") == ""
        assert decode_node_lock(lock_of(h) or "").pod == "late"
        # A recent lock whose owner no longer exists is dangling.
        await h.set_lock(encode_node_lock(NodeLock(datetime.now(UTC), "default", "gone")))
        other = await h.filtered("other")
        assert await h.bind(other, "n") == ""
        assert decode_node_lock(lock_of(h) or "").pod == "other"


async def test_the_lock_is_reentrant_for_its_own_pod() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        pod = await h.filtered("p")
        value = encode_node_lock(
            NodeLock(datetime.now(UTC) - timedelta(seconds=30), "default", "p")
        )
        await h.set_lock(value)
        assert await h.bind(pod, "n") == ""
        assert lock_of(h) == value


async def test_write_conflicts_are_retried_on_a_fresh_read() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        pod = await h.filtered("p")
        # A resourceVersion that moved under us: the guarded lock write answers 409 twice.
        h.api.inject_error(
            "patch", "nodes", code=409, times=2, message="the object has been modified"
        )
        assert await h.bind(pod, "n") == ""
        assert decode_node_lock(lock_of(h) or "").pod == "p"


async def test_a_stale_resource_version_never_overwrites_a_new_lock() -> None:
    async with harness(node_lock_wait_s=0.0) as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        pod = await h.filtered("p")
        await h.add_pod(pod_object("rival"))
        stale = h.node("n")
        await h.set_lock(encode_node_lock(NodeLock(datetime.now(UTC), "default", "rival")))
        binder = h.scheduler.binder
        # A locker whose cache still shows the node unlocked: its guarded write answers 409,
        # and the decision made again on a fresh read finds the rival (not bound yet).
        locker = NodeLocker(binder._client, owners=binder._owners, cached=lambda _name: stale)
        with pytest.raises(LockContendedError) as caught:
            await locker.acquire("n", namespace="default", pod="p")
        assert caught.value.contention.owner is OwnerState.BINDING
        assert decode_node_lock(lock_of(h) or "").pod == "rival"
        assert (await h.bind(pod, "n")).startswith(
            "node n is locked by default/rival, whose bind has not finished, since "
        )


async def test_a_failed_binding_releases_the_lock_and_the_reservation() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        pod = await h.filtered("p")
        assert used(h) == 1
        h.api.inject_error("create", "pods/binding", code=500)
        error = await h.bind(pod, "n")
        assert error.startswith("binding failed:")
        assert lock_of(h) is None
        assert used(h) == 0
        assert "nodeName" not in h.pod("p")["spec"]
        h.api.clear_faults()
        # kube-scheduler tries again: filter, then bind.
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        assert await h.bind(pod, "n") == ""
        await eventually(lambda: used(h) == 1, what="held again")


async def test_missing_pod_or_node_and_bad_args_are_errors() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        ghost = pod_object("ghost")
        ghost["metadata"]["uid"] = "u-ghost"
        assert await h.bind(ghost, "n") == "pod default/ghost not found"
        pod = await h.filtered("p")
        assert await h.bind(pod, "nowhere") == "node nowhere not found"
        assert used(h) == 0
        status, reply = await h.post("bind", {"PodName": "p"})
        assert (status, reply) == (
            200,
            {"Error": "extender binding args missing PodName, PodNamespace or Node"},
        )
        status, reply = await h.post("bind", {"podname": 5})
        assert status == 400
        replaced = {**pod, "metadata": {**pod["metadata"], "uid": "not-the-uid"}}
        assert "has UID" in await h.bind(replaced, "n")


async def test_all_mode_decides_at_bind_for_the_chosen_node() -> None:
    async with harness(filter_mode="all") as h:
        await h.add_node("a", gpus("a", 1))
        await h.add_node("b", gpus("b", 1))
        await h.synced_node("a")
        await h.synced_node("b")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=2000))))
        reply = await h.filter(pod, ["a", "b"])
        assert sorted(reply["NodeNames"]) == ["a", "b"]
        assert h.scheduler.cache.pod_count == 0
        assert await h.bind(pod, "b") == ""
        stored = h.pod("p")
        notes = annotations_of(stored)
        assert notes[keys.VGPU_NODE] == "b"
        # The label is the device plugin's to set, once the pod is allocated.
        assert keys.VGPU_NODE not in labels_of(stored)
        assert notes[keys.NVIDIA_DEVICES_ALLOCATED] == "GPU-b-0,NVIDIA,2000,0:;"
        assert notes[keys.BIND_PHASE] == "allocating"
        assert stored["spec"]["nodeName"] == "b"
        assert used(h, "b") == 1
        # The device plugin released the lock; a pod that no longer fits the node
        # kube-scheduler picked is refused at bind, and nothing is left behind.
        await h.api.patch(
            "nodes", "b", {"metadata": {"annotations": {keys.NODE_LOCK: None}}}, patch_type="merge"
        )
        big = await h.add_pod(pod_object("big", container(limits=gpu_limits(1, mem=7000))))
        error = await h.bind(big, "b")
        assert error == "node b no longer fits: 1/1 CardInsufficientMemory"
        assert lock_of(h, "b") is None
        assert used(h, "b") == 1
        assert keys.VGPU_NODE not in annotations_of(h.pod("big"))


async def test_binding_again_or_elsewhere_never_undoes_a_bound_pod() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.add_node("m", gpus("m", 2))
        await h.synced_node("n")
        await h.synced_node("m")
        pod = await h.filtered("p")
        assert await h.bind(pod, "n") == ""
        await eventually(lambda: h.scheduler.cache.assumed_count() == 0, what="seen")
        # kube-scheduler retrying a bind that did succeed: success, nothing released.
        assert await h.bind(pod, "n") == ""
        assert error_free(h)
        assert await h.bind(pod, "m") == "pod default/p is already bound to node n"
        assert used(h) == 1
        assert decode_node_lock(lock_of(h) or "").pod == "p"


async def test_single_mode_refuses_a_node_the_filter_did_not_choose() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 1))
        await h.add_node("m", gpus("m", 1))
        await h.synced_node("n")
        await h.synced_node("m")
        pod = await h.filtered("p", node="n")
        assert await h.bind(pod, "m") == "pod default/p was filtered onto node n, not m"
        assert lock_of(h, "m") is None
        assert h.scheduler.cache.assumed_count() == 0


async def test_without_a_kept_decision_bind_reads_the_pod_and_decides() -> None:
    """The extender restarted between filter and bind (or never filtered the pod): the pod is
    read once and the decision made for the node kube-scheduler chose."""
    async with harness() as h:
        await h.add_node("n", gpus("n", 1))
        await h.synced_node("n")
        fresh = await h.add_pod(pod_object("fresh", container(limits=gpu_limits(1, mem=1000))))
        misses = h.scheduler.metrics.cache_misses.labels(object="pod")
        before = misses._value.get()
        assert await h.bind(fresh, "n") == ""
        assert misses._value.get() == before + 1
        notes = annotations_of(h.pod("fresh"))
        assert notes[keys.NVIDIA_DEVICES_ALLOCATED] == "GPU-n-0,NVIDIA,1000,0:;"
        assert notes[keys.BIND_PHASE] == "allocating"
        assert used(h) == 1


def error_free(h: Harness) -> bool:
    return used(h) == 1 and h.pod("p")["spec"]["nodeName"] == "n"


async def test_a_pod_copied_from_a_placed_pod_keeps_none_of_its_allocations() -> None:
    # A pod created from a running pod's manifest carries that pod's device lists, RDMA list
    # and MIG reservations.  The Binding's annotations are merged into the pod's, so every
    # list the decision does not write is blanked; otherwise the cache would count another
    # pod's devices twice and a device plugin could hand them to this pod.
    dcu = next(v for v in DEFAULT_VENDORS if v.common_word == "DCU").devices_allocated_key
    assert dcu is not None
    reservation = {"gpu": "GPU-m-0", "profile": "1g.5gb", "placement": {"start": 6, "size": 1}}
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        first = await h.filtered("first")
        assert await h.bind(first, "n") == ""
        await h.allocated("first", "n")
        stale = {
            **{k: v for k, v in annotations_of(h.pod("first")).items() if k.startswith("hami.io")},
            dcu: "DCU-0,DCU,1024,10:;",
            keys.RDMA_DEVICES_ALLOCATED: "0000_1a_00.1,RDMA,1,0:;",
            keys.NVIDIA_MIG_ALLOCATIONS: json.dumps([reservation]),
        }
        copy = await h.add_pod(
            pod_object("copy", container(limits=gpu_limits(1, mem=1000)), annotations=stale)
        )
        assert (await h.filter(copy, ["n"]))["NodeNames"] == ["n"]
        assert await h.bind(copy, "n") == ""
        notes = annotations_of(h.pod("copy"))
        assert notes[dcu] == notes[keys.RDMA_DEVICES_ALLOCATED] == ""
        assert notes[keys.NVIDIA_MIG_ALLOCATIONS] == ""
        assert notes[keys.NVIDIA_DEVICES_ALLOCATED] != stale[keys.NVIDIA_DEVICES_ALLOCATED]

        def held() -> dict[str, tuple[str, ...]]:
            return {name: h.key for _uid, name, h in h.scheduler.cache.holdings()}

        await eventually(lambda: len(held()) == 2, what="both pods held")
        copied = next(held for _uid, name, held in h.scheduler.cache.holdings() if name == "copy")
        assert copied.nics is None
        assert copied.reservations == ()
        assert not {"DCU", "RDMA", "MIG"} & set(copied.key)
        assert used(h) == 2
