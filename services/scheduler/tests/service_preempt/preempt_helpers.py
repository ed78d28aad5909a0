"""Builders for the preemption service tests: PriorityClasses, running pods of a priority,
preemptors, and ``/preempt`` calls over HTTP."""

from __future__ import annotations

from typing import Any

from hami_kubesim.testing import eventually

from ..service_helpers import (
    Harness,
    container,
    gpu_limits,
    gpus,
    pod_object,
)

HIGH = 100
FINALIZER = "test.hami.io/hold"


async def priority_class(h: Harness, value: int) -> str:
    """The name of a PriorityClass of ``value`` (made on first use): the API server's Priority
    admission sets ``spec.priority`` from it, and refuses a pod that sets the number itself."""
    name = f"priority-{value}"
    if not any(c["metadata"]["name"] == name for c in h.api.list("priorityclasses")):
        await h.api.create(
            "priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            },
        )
    return name


async def running(
    h: Harness,
    name: str,
    mem: int,
    priority: int,
    node: str = "n",
    *,
    labels: dict[str, str] | None = None,
    finalizer: bool = False,
) -> dict[str, Any]:
    """A pod of ``priority`` holding ``mem`` MiB of one GPU on ``node``, as the cache sees it
    once bound (priority known).  ``finalizer``: a DELETE only marks it (being deleted, still
    holding its devices) until :func:`gone` removes it."""
    pod = pod_object(name, container(limits=gpu_limits(1, mem=mem)), labels=labels)
    pod["spec"]["priorityClassName"] = await priority_class(h, priority)
    if finalizer:
        pod["metadata"]["finalizers"] = [FINALIZER]
    created = await h.add_pod(pod)
    reply = await h.schedule(created, [node])
    assert reply["NodeNames"] == [node], reply
    uid = created["metadata"]["uid"]
    await eventually(
        lambda: any(
            r.uid == uid and r.priority == priority for r in h.scheduler.cache.residents(node)
        ),
        what=f"{name} seen bound",
    )
    return h.pod(name)


async def gone(h: Harness, name: str) -> None:
    """Finish the deletion of a pod made with ``finalizer``."""
    await h.api.patch(
        "pods", name, {"metadata": {"finalizers": None}}, namespace="default", patch_type="merge"
    )


async def preemptor(
    h: Harness, mem: int = 4000, priority: int = HIGH, name: str = "big"
) -> dict[str, Any]:
    """A pending pod the extender never filtered."""
    pod = pod_object(name, container(limits=gpu_limits(1, mem=mem)))
    pod["spec"]["priorityClassName"] = await priority_class(h, priority)
    return await h.add_pod(pod)


async def one_gpu_nodes(h: Harness, *names: str) -> None:
    for name in names:
        await h.add_node(name, gpus(name, 1))
        await h.synced_node(name)


def meta(*uids: str, pdb: int = 0) -> dict[str, Any]:
    return {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": pdb}


def uid(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["uid"])


async def preempt(h: Harness, body: dict[str, Any]) -> dict[str, Any]:
    status, reply = await h.post("preempt", body)
    assert status == 200, reply
    assert isinstance(reply, dict)
    return reply
