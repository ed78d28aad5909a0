"""Every way a bind can fail leaves no node lock and no assumed decision behind, and says why."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hami_protocol import keys
from hami_scheduler.wire import BindingArgs

from ..service_helpers import (
    Harness,
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    pod_object,
)

pytestmark = pytest.mark.timeout(60)

Scenario = Callable[[Harness, dict[str, Any]], Awaitable[str]]


async def wrong_node(h: Harness, pod: dict[str, Any]) -> str:
    return await h.bind(pod, "m")


async def missing_node(h: Harness, pod: dict[str, Any]) -> str:
    return await h.bind(pod, "nowhere")


async def lock_write_fails(h: Harness, pod: dict[str, Any]) -> str:
    h.api.inject_error("patch", "nodes", code=500)
    return await h.bind(pod, "n")


async def binding_fails(h: Harness, pod: dict[str, Any]) -> str:
    h.api.inject_error("create", "pods/binding", code=500)
    return await h.bind(pod, "n")


async def pod_replaced(h: Harness, pod: dict[str, Any]) -> str:
    # Deleted and created again under the same name between filter and bind: the Binding's
    # UID precondition refuses it.
    await h.api.delete("pods", "p", namespace="default")
    await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
    return await h.bind(pod, "n")


async def contended(h: Harness, pod: dict[str, Any]) -> str:
    holder = await h.add_pod(pod_object("holder", container(limits=gpu_limits(1, mem=1000))))
    assert (await h.filter(holder, ["n"]))["NodeNames"] == ["n"]
    assert await h.bind(holder, "n") == ""
    return await h.bind(pod, "n")


SCENARIOS: dict[str, tuple[Scenario, str]] = {
    "wrong node": (wrong_node, "pod default/p was filtered onto node n, not m"),
    "missing node": (missing_node, "node nowhere not found"),
    "lock write fails": (lock_write_fails, "cannot lock node n:"),
    "binding fails": (binding_fails, "binding failed:"),
    "pod replaced": (pod_replaced, "binding failed:"),
    "contended": (contended, "node n is locked by default/holder"),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_a_failed_bind_leaves_no_lock_and_no_assumption(name: str) -> None:
    scenario, message = SCENARIOS[name]
    async with harness(node_lock_wait_s=0.2) as h:
        await h.add_node("n", gpus("n", 2))
        await h.add_node("m", gpus("m", 2))
        await h.synced_node("n")
        await h.synced_node("m")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        uid = pod["metadata"]["uid"]
        error = await scenario(h, pod)
        h.api.clear_faults()
        assert error.startswith(message), error
        assert h.scheduler.cache.holding(uid) is None
        assert len(h.scheduler.filters.pending) == 0
        for node in ("n", "m"):
            lock = annotations_of(h.node(node)).get(keys.NODE_LOCK)
            assert lock is None or ",default,p" not in lock, (node, lock)
        assert "nodeName" not in h.pod("p")["spec"]
        await eventually(lambda: bool(h.events("BindingFailed")), what="event")
        assert h.events("BindingFailed")[-1]["message"] == error


async def test_a_bind_cancelled_while_waiting_writes_nothing_and_drops_its_decision() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        holder = await h.add_pod(pod_object("holder", container(limits=gpu_limits(1, mem=1000))))
        assert (await h.filter(holder, ["n"]))["NodeNames"] == ["n"]
        assert await h.bind(holder, "n") == ""
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        uid = pod["metadata"]["uid"]
        binder = h.scheduler.binder
        args = BindingArgs(pod_name="p", pod_namespace="default", pod_uid=uid, node="n")
        waiting = asyncio.create_task(binder.bind(args))
        await eventually(lambda: binder._waits.waiting() == {"n": 1}, what="waiting")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert h.scheduler.cache.holding(uid) is None
        assert binder._waits.waiting() == {}
        assert ",default,holder" in annotations_of(h.node("n"))[keys.NODE_LOCK]
