"""Patch, read-modify-write and retry helpers against the emulated API server."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from hami_kube import errors
from hami_kube.backoff import BackoffPolicy
from hami_kube.objects import ObjectView
from hami_kube.patch import metadata_patch, patch_metadata, update_with_retry, with_retries
from hami_kube.resources import NODES, PODS
from hami_kube.rest import KubeClient
from hami_kubesim.testing import RunningApiServer

from .helpers import node, pod

FAST = BackoffPolicy(initial=0.001, factor=2.0, cap=0.01)


def test_metadata_patch_body() -> None:
    assert metadata_patch(annotations={"a": "1", "b": None}, resource_version="7") == {
        "metadata": {"annotations": {"a": "1", "b": None}, "resourceVersion": "7"}
    }
    assert metadata_patch(labels={"l": "v"}) == {"metadata": {"labels": {"l": "v"}}}
    assert metadata_patch() == {"metadata": {}}


async def test_patch_annotations_and_labels(kube: KubeClient) -> None:
    await kube.create(PODS, pod("a", annotations={"old": "x"}))
    patched = await patch_metadata(
        kube,
        PODS,
        "a",
        namespace="default",
        annotations={"old": None, "new": "y"},
        labels={"l": "1"},
    )
    assert patched["metadata"]["annotations"] == {"new": "y"}
    assert patched["metadata"]["labels"] == {"l": "1"}


async def test_resource_version_precondition(kube: KubeClient) -> None:
    created = await kube.create(NODES, node("n1"))
    version = ObjectView(created).resource_version
    locked = await patch_metadata(
        kube, NODES, "n1", annotations={"lock": "me"}, resource_version=version
    )
    assert locked["metadata"]["annotations"] == {"lock": "me"}
    with pytest.raises(errors.ConflictError):
        await patch_metadata(
            kube, NODES, "n1", annotations={"lock": "you"}, resource_version=version
        )
    current = await kube.get(NODES, "n1")
    assert current["metadata"]["annotations"] == {"lock": "me"}


async def test_concurrent_read_modify_write_loses_no_update(kube: KubeClient) -> None:
    await kube.create(NODES, node("n1", annotations={"count": "0"}))

    def bump(obj: dict[str, Any]) -> dict[str, Any]:
        annotations = obj["metadata"]["annotations"]
        annotations["count"] = str(int(annotations["count"]) + 1)
        return obj

    writers = 8
    async with asyncio.TaskGroup() as group:
        for index in range(writers):
            group.create_task(
                update_with_retry(
                    kube, NODES, "n1", bump, attempts=50, backoff=FAST, rng=random.Random(index)
                ),
                name=f"writer-{index}",
            )
    final = await kube.get(NODES, "n1")
    assert final["metadata"]["annotations"]["count"] == str(writers)


async def test_mutation_returning_none_writes_nothing(kube: KubeClient) -> None:
    created = await kube.create(NODES, node("n1"))
    result = await update_with_retry(kube, NODES, "n1", lambda obj: None)
    assert ObjectView(result).resource_version == ObjectView(created).resource_version


async def test_conflicts_beyond_the_bound_propagate(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await kube.create(NODES, node("n1"))
    sim.server.inject_error("update", "nodes", code=409, message="injected conflict")
    calls = 0

    def mutate(obj: dict[str, Any]) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return obj

    with pytest.raises(errors.ConflictError):
        await update_with_retry(kube, NODES, "n1", mutate, attempts=3, backoff=FAST)
    assert calls == 3


async def test_with_retries_survives_transient_errors(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    await kube.create(NODES, node("n1"))
    sim.server.inject_error("get", "nodes", code=503, times=2)
    fetched = await with_retries(lambda: kube.get(NODES, "n1"), attempts=3, backoff=FAST)
    assert fetched["metadata"]["name"] == "n1"


async def test_with_retries_does_not_retry_permanent_errors(
    sim: RunningApiServer, kube: KubeClient
) -> None:
    calls = 0

    async def get() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return await kube.get(NODES, "absent")

    with pytest.raises(errors.NotFoundError):
        await with_retries(get, attempts=5, backoff=FAST)
    assert calls == 1
