"""Write helpers: metadata merge patches, conflict-aware read-modify-write, transient retries.

- ``metadata_patch`` / ``patch_metadata``: RFC 7386 merge patch of annotations/labels (``None``
  deletes a key), optionally carrying ``metadata.resourceVersion`` as a precondition (a stale
  version answers 409 -> ``ConflictError``). That precondition is the optimistic-concurrency
  primitive behind the node lock.
- ``update_with_retry``: GET, apply a pure mutation, PUT with the read resourceVersion; on 409
  re-read and retry with backoff, a bounded number of times.
- ``with_retries``: retry any operation on transient failures (transport errors, 429, 5xx).
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import structlog

from hami_kube.backoff import BackoffPolicy
from hami_kube.errors import ConflictError, is_retryable
from hami_kube.objects import ObjectView
from hami_kube.resources import JsonObject, Resource
from hami_kube.rest import KubeClient, PatchType

log = structlog.get_logger(__name__)

T = TypeVar("T")

DEFAULT_CONFLICT_BACKOFF = BackoffPolicy(initial=0.01, factor=2.0, cap=1.0, jitter=0.5)
DEFAULT_RETRY_BACKOFF = BackoffPolicy(initial=0.1, factor=2.0, cap=5.0, jitter=0.5)

Mutation = Callable[[JsonObject], JsonObject | None]
"""Receives a private deep copy of the current object; returns the desired object (it may be the
same dict, changed in place) or None when nothing needs writing."""


def metadata_patch(
    *,
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
    resource_version: str | None = None,
) -> JsonObject:
    """The merge-patch body ``{"metadata": {...}}``; a ``None`` value deletes that key."""
    meta: dict[str, Any] = {}
    if annotations:
        meta["annotations"] = dict(annotations)
    if labels:
        meta["labels"] = dict(labels)
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


async def patch_metadata(
    client: KubeClient,
    resource: Resource,
    name: str,
    *,
    namespace: str | None = None,
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
    resource_version: str | None = None,
) -> JsonObject:
    """Merge-patch annotations/labels; returns the updated object.

    With ``resource_version`` the write only succeeds if the object is still at that version
    (``ConflictError`` otherwise).
    """
    body = metadata_patch(annotations=annotations, labels=labels, resource_version=resource_version)
    return await client.patch(resource, name, body, namespace=namespace, patch_type=PatchType.MERGE)


async def update_with_retry(
    client: KubeClient,
    resource: Resource,
    name: str,
    mutate: Mutation,
    *,
    namespace: str | None = None,
    attempts: int = 5,
    backoff: BackoffPolicy = DEFAULT_CONFLICT_BACKOFF,
    rng: random.Random | None = None,
) -> JsonObject:
    """Read-modify-write with optimistic concurrency; returns the object as finally stored.

    ``mutate`` runs on every attempt against a fresh read. When it returns None nothing is
    written and the current object is returned. After ``attempts`` conflicts the last
    ``ConflictError`` propagates; any other error propagates at once.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 0
    while True:
        current = await client.get(resource, name, namespace=namespace)
        desired = mutate(copy.deepcopy(current))
        if desired is None:
            return current
        desired.setdefault("metadata", {})["resourceVersion"] = ObjectView(current).resource_version
        try:
            return await client.replace(resource, desired)
        except ConflictError:
            attempt += 1
            if attempt >= attempts:
                raise
            delay = backoff.delay(attempt - 1, rng)
            log.debug(
                "update conflict, retrying", resource=resource.plural, name=name, attempt=attempt
            )
            await asyncio.sleep(delay)


async def with_retries(
    operation: Callable[[], Awaitable[T]],
    *,
    attempts: int = 5,
    backoff: BackoffPolicy = DEFAULT_RETRY_BACKOFF,
    retry_on: Callable[[BaseException], bool] = is_retryable,
    rng: random.Random | None = None,
) -> T:
    """Await ``operation()``; on an error ``retry_on`` accepts, back off and call it again.

    At most ``attempts`` calls; the last error propagates.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 0
    while True:
        try:
            return await operation()
        except Exception as exc:
            attempt += 1
            if attempt >= attempts or not retry_on(exc):
                raise
            delay = backoff.delay(attempt - 1, rng)
            log.debug("transient failure, retrying", error=str(exc), attempt=attempt)
            await asyncio.sleep(delay)


__all__ = [
    "DEFAULT_CONFLICT_BACKOFF",
    "DEFAULT_RETRY_BACKOFF",
    "Mutation",
    "metadata_patch",
    "patch_metadata",
    "update_with_retry",
    "with_retries",
]
