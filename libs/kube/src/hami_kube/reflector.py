"""The reflector (an informer): keeps a local ``Store`` equal to one resource's server state.

Algorithm (client-go's ListAndWatch, on raw JSON):

1. LIST (consistent read); make the store hold exactly the items and call handlers for the
   difference: ``on_delete`` for objects gone since the previous list, ``on_add`` for new ones,
   ``on_update`` for changed ones (by resourceVersion). After the first LIST ``has_synced`` is true.
   ``before_list`` runs before each LIST is sent and ``after_list`` once it is applied, with the
   objects the store now holds: what a LIST cannot tell by a difference — an object created and
   deleted while the watch was down is in neither the old store nor the list — a client that
   keeps its own state beside the store can settle there (it knows what it did before the LIST
   began, and the LIST shows everything that still exists then).
2. WATCH from the list's resourceVersion with ``allowWatchBookmarks`` and a ``timeoutSeconds``
   drawn from ``[t, 2t)`` so many clients do not reconnect together. Each event updates the store
   and then calls the handlers; the last resourceVersion seen (bookmarks included) is remembered.
3. A stream that ends (server timeout, dropped connection) is re-opened from that resourceVersion.
   410 (an ERROR event with code 410, or a 410 answer) means the version is compacted: go to 1.
   Other failures back off exponentially with jitter (capped) and retry; a failure that a retry
   cannot cure (e.g. 403, or "too large resource version" from a restarted server) re-lists
   after the backoff.

``ReflectorConfig.keep`` narrows what is mirrored on the client side, for what a server selector
cannot express: objects it rejects are not stored (an object that stops matching is reported as
deleted), so a watch over many objects costs memory only for those kept.

Events are applied idempotently: an ADDED/MODIFIED carrying the resourceVersion already stored, or
a DELETED for an unknown key, calls no handler, so no object is reported twice or lost across
re-lists and re-watches. Handlers may be plain functions or coroutines; they run one at a time in
stream order, after the store has been updated. A handler that raises is logged and skipped.
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from hami_kube.backoff import Backoff, BackoffPolicy
from hami_kube.errors import ApiError, ExpiredError, KubeError, api_error, is_retryable
from hami_kube.objects import ObjectView, object_key
from hami_kube.resources import JsonObject, Resource
from hami_kube.rest import KubeClient, WatchEvent
from hami_kube.store import Indexer, Store

log = structlog.get_logger(__name__)

_HEALTHY_WATCH_S = 1.0

AddHandler = Callable[[JsonObject], Awaitable[None] | None]
UpdateHandler = Callable[[JsonObject, JsonObject], Awaitable[None] | None]
DeleteHandler = Callable[[JsonObject], Awaitable[None] | None]
BeforeListHandler = Callable[[], Awaitable[None] | None]
AfterListHandler = Callable[[Sequence[JsonObject]], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class EventHandlers:
    """Callbacks for store changes; any may be None. ``on_update`` gets ``(old, new)``.

    ``before_list``: called just before each LIST (the first and every re-list) is sent.
    ``after_list``: called once that LIST is applied (after its add/update/delete handlers),
    with the objects the store holds now.  A LIST that fails calls ``before_list`` only."""

    on_add: AddHandler | None = None
    on_update: UpdateHandler | None = None
    on_delete: DeleteHandler | None = None
    before_list: BeforeListHandler | None = None
    after_list: AfterListHandler | None = None


def upserting(
    upsert: Callable[[JsonObject], None], remove: Callable[[JsonObject], None]
) -> EventHandlers:
    """Handlers for a cache that treats an add and an update alike (the usual case)."""

    def update(_old: JsonObject, new: JsonObject) -> None:
        upsert(new)

    return EventHandlers(on_add=upsert, on_update=update, on_delete=remove)


@dataclass(frozen=True, slots=True)
class ReflectorConfig:
    """What to watch and how to recover.

    ``watch_timeout_s``: each watch asks the server to end it after ``[t, 2t)`` seconds.
    ``backoff``: delays between consecutive failures; reset by a watch that delivered events or
    stayed open a while.
    ``keep``: a client-side filter on top of the selectors; ``None`` keeps everything.
    """

    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    watch_timeout_s: int = 300
    allow_bookmarks: bool = True
    backoff: BackoffPolicy = field(default_factory=lambda: BackoffPolicy(initial=0.2, cap=30.0))
    keep: Callable[[JsonObject], bool] | None = None

    def __post_init__(self) -> None:
        if self.watch_timeout_s < 1:
            raise ValueError("watch_timeout_s must be at least 1")


@dataclass(slots=True)
class ReflectorStats:
    """Counters for logs, metrics and tests (read-only for callers)."""

    lists: int = 0
    watches: int = 0
    expired: int = 0
    errors: int = 0
    events: int = 0
    handler_errors: int = 0


class _RelistError(Exception):
    """Internal: the watch must be abandoned and the resource listed again."""


class Reflector:
    """Mirrors one resource (optionally filtered) into ``store``; ``run()`` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        config: ReflectorConfig | None = None,
        handlers: Sequence[EventHandlers] = (),
        indexers: Mapping[str, Indexer] | None = None,
        name: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._config = config or ReflectorConfig()
        self._handlers = tuple(handlers)
        self._store = Store(indexers=indexers)
        self._name = name or resource.plural
        self._rng = rng or random.Random()
        self._synced = asyncio.Event()
        self._resource_version = ""
        self._stats = ReflectorStats()
        self._log = log.bind(reflector=self._name, resource=resource.plural)

    @property
    def name(self) -> str:
        return self._name

    @property
    def store(self) -> Store:
        return self._store

    @property
    def has_synced(self) -> bool:
        """True once the first LIST has been applied (and its handlers called)."""
        return self._synced.is_set()

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (from a LIST, an event or a bookmark)."""
        return self._resource_version

    @property
    def stats(self) -> ReflectorStats:
        return self._stats

    async def wait_synced(self) -> None:
        await self._synced.wait()

    # -- main loop ---------------------------------------------------------------------------
    async def run(self) -> None:
        """List and watch forever; returns only by cancellation."""
        backoff = Backoff(self._config.backoff, rng=self._rng)
        while True:
            try:
                await self._list()
            except KubeError as exc:
                self._stats.errors += 1
                await self._pause(backoff, "list failed", exc)
                continue
            await self._watch_until_relist(backoff)

    async def _watch_until_relist(self, backoff: Backoff) -> None:
        while True:
            try:
                healthy = await self._watch_once()
            except ExpiredError as exc:
                self._stats.expired += 1
                # Usually one short pause; back-to-back expiries back off like any failure.
                await self._pause(backoff, "watch expired, re-listing", exc)
                return
            except KubeError as exc:
                self._stats.errors += 1
                await self._pause(backoff, "watch failed", exc)
                if isinstance(exc, ApiError) and (not is_retryable(exc) or _too_large(exc)):
                    return
                continue
            if healthy:
                backoff.reset()
            else:
                # A stream closed at once without a single event: pace the reconnects.
                await self._pause(backoff, "watch closed without events", None)

    async def _pause(self, backoff: Backoff, what: str, error: BaseException | None) -> None:
        delay = backoff.next_delay()
        # Expiry and closed streams are routine; anything else deserves a warning.
        routine = error is None or isinstance(error, ExpiredError)
        emit = self._log.info if routine else self._log.warning
        emit(what, error=None if error is None else str(error), retry_in_s=round(delay, 3))
        await asyncio.sleep(delay)

    async def _list(self) -> None:
        config = self._config
        for handlers in self._handlers:
            if handlers.before_list is not None:
                await self._call("before_list", handlers.before_list)
        listing = await self._client.list(
            self._resource,
            namespace=config.namespace,
            label_selector=config.label_selector,
            field_selector=config.field_selector,
        )
        self._stats.lists += 1
        items = listing.get("items") or []
        keep = config.keep
        objects = [
            self._with_type(item)
            for item in items
            if isinstance(item, dict) and (keep is None or keep(item))
        ]
        delta = self._store.replace(objects)
        version = ObjectView(listing).resource_version
        self._resource_version = version
        self._log.debug(
            "listed",
            resource_version=version,
            count=len(objects),
            added=len(delta.added),
            updated=len(delta.updated),
            deleted=len(delta.deleted),
        )
        for old in delta.deleted:
            await self._emit_delete(old)
        for obj in delta.added:
            await self._emit_add(obj)
        for old, new in delta.updated:
            await self._emit_update(old, new)
        for handlers in self._handlers:
            if handlers.after_list is not None:
                await self._call("after_list", handlers.after_list, objects)
        self._synced.set()

    async def _watch_once(self) -> bool:
        """One watch stream; returns whether it was healthy (delivered an event or lasted a
        while). Raises on failure."""
        config = self._config
        timeout = config.watch_timeout_s + self._rng.randrange(config.watch_timeout_s)
        loop = asyncio.get_running_loop()
        started = loop.time()
        delivered = False
        self._stats.watches += 1
        async with self._client.watch(
            self._resource,
            namespace=config.namespace,
            resource_version=self._resource_version or None,
            timeout_seconds=timeout,
            allow_bookmarks=config.allow_bookmarks,
            label_selector=config.label_selector,
            field_selector=config.field_selector,
        ) as events:
            async for event in events:
                await self._apply(event)
                delivered = True
        return delivered or loop.time() - started >= _HEALTHY_WATCH_S

    async def _apply(self, event: WatchEvent) -> None:
        if event.type == "ERROR":
            raise _error_from_status(event.object)
        version = ObjectView(event.object).resource_version
        if event.type != "BOOKMARK":
            self._stats.events += 1
            obj = self._with_type(event.object)
            keep = self._config.keep
            if event.type == "DELETED" or (keep is not None and not keep(obj)):
                old = self._store.remove(object_key(obj))
                if old is not None:
                    await self._emit_delete(obj)
            else:
                old = self._store.upsert(obj)
                if old is None:
                    await self._emit_add(obj)
                elif ObjectView(old).resource_version != version or not version:
                    await self._emit_update(old, obj)
        if version:
            self._resource_version = version

    def _with_type(self, obj: JsonObject) -> JsonObject:
        # Items of a raw LIST carry no kind/apiVersion while watch objects do; make them uniform.
        if "kind" not in obj:
            obj["kind"] = self._resource.kind
        if "apiVersion" not in obj:
            obj["apiVersion"] = self._resource.api_version
        return obj

    # -- handlers ----------------------------------------------------------------------------
    async def _emit_add(self, obj: JsonObject) -> None:
        for handlers in self._handlers:
            if handlers.on_add is not None:
                await self._call("on_add", handlers.on_add, obj)

    async def _emit_update(self, old: JsonObject, new: JsonObject) -> None:
        for handlers in self._handlers:
            if handlers.on_update is not None:
                await self._call("on_update", handlers.on_update, old, new)

    async def _emit_delete(self, obj: JsonObject) -> None:
        for handlers in self._handlers:
            if handlers.on_delete is not None:
                await self._call("on_delete", handlers.on_delete, obj)

    async def _call(
        self, which: str, handler: Callable[..., Awaitable[None] | None], *args: Any
    ) -> None:
        try:
            result = handler(*args)
            if inspect.isawaitable(result):
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            self._stats.handler_errors += 1
            # The list hooks get no object (or a list of them): no key to name.
            key = object_key(args[-1]) if which.startswith("on_") else None
            self._log.exception("event handler failed", handler=which, key=key)


def _too_large(error: ApiError) -> bool:
    """The server has not reached our resourceVersion (e.g. it restarted with a fresh history):
    waiting will not help, a new LIST will."""
    causes = error.details.get("causes")
    if isinstance(causes, list):
        for cause in causes:
            if isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge":
                return True
    return "too large resource version" in error.message.lower()


def _error_from_status(status: JsonObject) -> ApiError:
    code = status.get("code")
    return api_error(code if isinstance(code, int) and code > 0 else 500, status, method="WATCH")


class ReflectorGroup:
    """Reflectors that feed one cache together: synced when all are, run as one set of tasks."""

    def __init__(self, *reflectors: Reflector) -> None:
        self.reflectors = reflectors

    @property
    def synced(self) -> bool:
        return all(reflector.has_synced for reflector in self.reflectors)

    async def wait_synced(self) -> None:
        for reflector in self.reflectors:
            await reflector.wait_synced()

    def start(self, group: asyncio.TaskGroup) -> list[asyncio.Task[None]]:
        """Run every reflector as a task of ``group`` named ``reflector-<name>``; cancel them
        to stop."""
        return [
            group.create_task(reflector.run(), name=f"reflector-{reflector.name}")
            for reflector in self.reflectors
        ]


__all__ = [
    "AddHandler",
    "AfterListHandler",
    "BeforeListHandler",
    "DeleteHandler",
    "EventHandlers",
    "Reflector",
    "ReflectorConfig",
    "ReflectorGroup",
    "ReflectorStats",
    "UpdateHandler",
    "upserting",
]
