"""Decisions assumed here survive no gap in the pod watch longer than the pod they stand for.

A pod bound and deleted while the extender's pod watch is down, its history compacted, is in
neither the reflector's store nor its re-list: no event ever tells of it, so the re-list itself
must settle the decision its Binding carried.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from ..service_helpers import eventually, gpus, harness, metric

pytestmark = pytest.mark.timeout(60)


async def test_a_pod_bound_and_deleted_while_the_pod_watch_was_down_holds_nothing() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        cache, pods = h.scheduler.cache, h.scheduler.watcher.pods
        gone = await h.filtered("gone")
        # Filtered, its bind still to come: its decision must outlive the re-list.
        waiting = await h.filtered("waiting")
        gone_uid, waiting_uid = gone["metadata"]["uid"], waiting["metadata"]["uid"]
        lists = pods.stats.lists

        # The pod watches cut, and every re-watch refused, until the history is compacted.
        h.api.inject_error("watch", "pods", code=500)
        assert h.api.drop_watches("pods", mode="abort") >= 1
        assert await h.bind(gone, "n") == ""
        await h.allocated("gone", "n")  # its device plugin served it and freed the node lock
        await h.api.delete("pods", "gone", namespace="default")
        with capture_logs() as logs:
            h.api.compact()
            h.api.clear_faults()
            # The next watch meets 410 and lists again: the list lacks the pod.
            await eventually(lambda: pods.stats.lists > lists, what="the pod watch re-listed")
            await eventually(lambda: cache.holding(gone_uid) is None, what="decision forgotten")

        forgotten = [e for e in logs if e["event"] == "assumption_forgotten"]
        assert [(e["pod"], e["uid"]) for e in forgotten] == [("default/gone", gone_uid)]
        assert cache.holding(waiting_uid) is not None
        assert cache.assumed_count() == 1
        assert metric(h, "hami_scheduler_cache_objects", kind="assumed") == 1
        device = cache.nodes["n"].device("GPU-n-0")
        assert device is not None
        assert (device.used, device.usedmem) == (1, 1000)
        # The waiting pod's bind still finds its decision and lands.
        assert await h.bind(waiting, "n") == ""
        await eventually(lambda: cache.assumed_count() == 0, what="the watch confirms the bind")


async def test_the_sweep_reads_bound_decisions_the_watch_never_confirmed() -> None:
    # Backstop for what a re-list cannot settle (a Binding answered while the list was under
    # way): past max_age, one GET per bound decision still unconfirmed.
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        cache, pending = h.scheduler.cache, h.scheduler.filters.pending
        gone, alive = await h.filtered("gone"), await h.filtered("alive")
        h.api.inject_error("watch", "pods", code=500)
        assert h.api.drop_watches("pods", mode="abort") >= 1
        for pod in (gone, alive):
            assert await h.bind(pod, "n") == ""
            await h.allocated(pod["metadata"]["name"], "n")
        await h.api.delete("pods", "gone", namespace="default")
        client = h.scheduler.binder._client
        with capture_logs() as logs:
            assert await pending.sweep(client) == 0  # too young
            pending._max_age_s = 0.0
            assert await pending.sweep(client) == 1
        forgotten = [(e["pod"], e["reason"]) for e in logs if e["event"] == "assumption_forgotten"]
        assert forgotten == [("default/gone", "gone")]
        assert cache.holding(gone["metadata"]["uid"]) is None
        # Bound with its decision, only the watch is late: it keeps counting.
        assert list(cache.bound_unconfirmed()) == [alive["metadata"]["uid"]]
        h.api.clear_faults()
        await eventually(lambda: cache.assumed_count() == 0, what="the watch confirms the bind")
        assert cache.holding(alive["metadata"]["uid"]) is not None
