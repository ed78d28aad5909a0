"""The GPU map's HTTP server: its own port (``--gpumap-bind-address``), read-only by construction.

Routes (relative to wherever a proxy mounts the server): the pages ``/`` (map), ``/pending`` and
``/fit``, rendered by :func:`~hami_scheduler.gpumap.page.render_page` from the very documents
the JSON routes ``/api/v1/map``, ``/api/v1/pending`` and ``/api/v1/fit`` answer.

* **GET and HEAD only**: any other method on any path is 405 (``Allow: GET, HEAD``); no route
  writes, the fit probe is a dry run, and there is no raw query endpoint.
* **Bounded input**: a query string longer than :data:`MAX_QUERY` is 414 (the request line limit
  is raised to just above it, for a fit manifest); every parameter is bounded
  (:mod:`.query`); a request or manifest that cannot be read is 400 ``{"error": "..."}`` (a page:
  the renderer's error view).
* **Headers on every answer**: ``Cache-Control: no-store``, ``X-Content-Type-Options: nosniff``,
  ``Referrer-Policy: no-referrer`` and the Content-Security-Policy
  (:func:`content_security_policy`, ``frame-ancestors`` from ``--gpumap-frame-ancestors``).
* **Whichever replica answers**: every replica's cache follows the cluster (the watches run
  whether it leads or not), so the map and the fit probe answer from any replica; each document
  says who answered and who leads (:meth:`GpuMapState.replica`).  The extender's verdicts exist
  only where ``/filter`` ran — the leader — so a follower's pending list carries
  ``verdicts.recordedHere: false`` (and every ``verdict`` null) rather than pretending.
* **Usage beside allocation** (``--gpumap-monitors``): the map's nodes get their vGPU monitors'
  figures from :class:`~.monitors.UsageCollector` — only the shown nodes, remembered 15 s, the
  request waiting at most the scrape timeout — joined by :func:`~.usage.apply_usage`.
* Each answer's duration is observed in
  ``hami_scheduler_gpumap_request_duration_seconds{view,format,code}``.

Rendering runs on the event loop beside ``/filter``: the cluster totals read each node's
remembered summary (:mod:`.summary`), O(nodes), and a page shows at most 500 nodes.  The map —
the view a browser polls — is built, rendered and serialised in steps (:mod:`.steps`): the loop
is handed back after every quarter millisecond of work, for a millisecond, so a filter waits
about a slice, not for the page.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar, cast

import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware

from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.gpumap.answers import Answer, SharedAnswers, answer_key
from hami_scheduler.gpumap.dra.join import UNWATCHED, DraView
from hami_scheduler.gpumap.fit import FitProbe, pod_from_manifest, pod_from_parameters
from hami_scheduler.gpumap.model import MapQuery, map_document_steps
from hami_scheduler.gpumap.monitors import UsageCollector
from hami_scheduler.gpumap.page import render_steps
from hami_scheduler.gpumap.pending import PendingPods, PendingQuery, pending_document
from hami_scheduler.gpumap.query import QueryError, document
from hami_scheduler.gpumap.steps import Steps, json_steps, step
from hami_scheduler.gpumap.usage import apply_usage
from hami_scheduler.leader import LeaderView
from hami_scheduler.metrics import SchedulerMetrics

__all__ = [
    "MAX_QUERY",
    "PAUSE_S",
    "PROBE_PARAMETERS",
    "SLICE_S",
    "GpuMapState",
    "build_gpumap_app",
    "content_security_policy",
    "sliced",
]

log = structlog.get_logger("hami_scheduler")

MAX_QUERY: Final = 96 * 1024
"""The longest query string taken: a 64 KiB manifest in base64url is 87,382 characters."""
MAX_LINE: Final = MAX_QUERY + 2048
"""The request line limit given to the server (path, method and version beside the query)."""
PROBE_PARAMETERS: Final = (
    "gpus",
    "memory",
    "memoryPercentage",
    "cores",
    "type",
    "vendor",
    "namespace",
    "manifest",
)
"""A fit page with none of these shows the form only (``kind: FitForm``)."""

SLICE_S: Final = 0.00025
"""How long :func:`sliced` works before handing the event loop back (seconds); a step costs
0.1-0.4 ms at 5,000 nodes."""
PAUSE_S: Final = 0.001
"""How long :func:`sliced` then stays away (seconds): the page takes at most a fifth of the loop
while it is built.  A ``/filter`` request takes several loop turns (reading its body of 5,000
node names, answering); handed back with ``sleep(0)`` the page ran a slice at each of them, some
2-4 ms per filter while a page was being built (``bench/gpumap.py``: "filters during a poll"),
and a page polled every second was being built during most filters.  Away for a millisecond, the
page takes a slice at about one turn of each filter.  A page of 40 ms of work answers some
0.2 s later than it would at once, which a person does not notice."""

_T = TypeVar("_T")


async def sliced(steps: Steps[_T], budget: float = SLICE_S, pause: float = PAUSE_S) -> _T:
    """Run ``steps`` (:mod:`.steps`) on the event loop: ``budget`` seconds of work, then the
    loop left to others for ``pause`` seconds, until it ends."""
    clock = time.perf_counter
    deadline = clock() + budget
    while True:
        ended, result = step(steps)
        if ended:
            return cast("_T", result)
        if clock() >= deadline:
            await asyncio.sleep(pause)
            deadline = clock() + budget


Render = Callable[[str, dict[str, Any], Mapping[str, str]], Steps[str]]


def content_security_policy(frame_ancestors: str) -> str:
    """The page's policy: nothing loaded from anywhere, inline CSS only, forms to itself."""
    return (
        "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; "
        f"base-uri 'none'; frame-ancestors {frame_ancestors}"
    )


@dataclass(frozen=True, slots=True)
class GpuMapState:
    """What the handlers read."""

    cache: SchedulerCache
    probe: FitProbe
    pending: PendingPods
    pending_synced: Callable[[], bool]
    leadership: LeaderView
    identity: str
    scheduler_name: str
    metrics: SchedulerMetrics
    frame_ancestors: str = "'none'"
    now: Callable[[], datetime] = datetime.now
    render: Render = render_steps
    usage: UsageCollector | None = None
    """The vGPU monitors' figures for the map (``--gpumap-monitors``); ``None``: not read."""
    shared: SharedAnswers = field(default_factory=lambda: SharedAnswers(0.0))
    """Map and pending answers shared between requests (``--gpumap-max-age``; 0: none)."""
    dra: Callable[[], DraView] = lambda: UNWATCHED
    """The DRA GPUs' view (``--gpumap-dra``; :class:`~hami_scheduler.cache.dra.DraWatch`)."""

    def replica(self) -> dict[str, Any]:
        """Who answers and who leads (every document carries it)."""
        return {
            "leader": self.leadership.leader or None,
            "answeredBy": self.identity or None,
            "answeredByLeader": self.leadership.is_leader,
        }


_STATE: Final = web.AppKey("hami_gpumap_state", GpuMapState)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(doc: Mapping[str, Any], status: int = 200) -> web.Response:
    body = json.dumps(doc, separators=(",", ":"), default=str).encode()
    return web.Response(status=status, body=body, content_type="application/json")


async def _json_sliced(doc: Mapping[str, Any]) -> web.Response:
    """:func:`_json` for a document (a map page is long), serialised in steps."""
    body = await sliced(json_steps(doc))
    return web.Response(body=body, content_type="application/json")


async def _page(
    state: GpuMapState, kind: str, doc: dict[str, Any], query: Mapping[str, str]
) -> web.Response:
    status = 400 if kind == "error" else 200
    text = await sliced(state.render(kind, doc, query))
    return web.Response(status=status, text=text, content_type="text/html")


def _map(state: GpuMapState, query: Mapping[str, str]) -> Steps[dict[str, Any]]:
    map_query = MapQuery.read(query)  # a bad query is refused before the first step
    return map_document_steps(
        state.cache, map_query, now=state.now(), replica=state.replica(), dra=state.dra()
    )


async def _add_usage(state: GpuMapState, doc: dict[str, Any]) -> None:
    """The shown nodes' measured usage beside their allocation (docs/gpumap.md, Usage)."""
    collector = state.usage
    nodes = doc["nodes"]
    if collector is None:
        doc["usage"] = {"enabled": False}
        for node in nodes:
            node["monitor"] = None
        return
    doc["usage"] = {
        "enabled": True,
        "maxAgeSeconds": collector.max_age_s,
        "timeoutSeconds": collector.timeout_s,
    }
    readings = await collector.readings([node["name"] for node in nodes])
    apply_usage(nodes, readings, now=state.now())


def _pending(state: GpuMapState, query: Mapping[str, str]) -> dict[str, Any]:
    doc = pending_document(
        state.pending,
        PendingQuery.read(query),
        now=state.now(),
        scheduler=state.scheduler_name,
        complete=state.pending_synced(),
        replica=state.replica(),
    )
    here = state.leadership.is_leader
    doc["verdicts"] = {
        "recordedHere": here,
        "kept": len(state.pending.verdicts),
        "note": None
        if here
        else (
            "this replica does not lead: the extender's verdicts are kept by the leader "
            f"({state.leadership.leader or 'unknown'}) that answered /filter; ask again to "
            "reach another replica, or open the page through the leader's pod"
        ),
    }
    if not here:
        for item in doc["items"]:
            item["verdict"] = None
    return doc


def _fit(state: GpuMapState, query: Mapping[str, str]) -> dict[str, Any]:
    encoded = query.get("manifest", "")
    vendors = state.cache.vendors
    pod = pod_from_manifest(encoded) if encoded else pod_from_parameters(query, vendors)
    return state.probe.probe(pod, now=state.now(), replica=state.replica())


async def _build(state: GpuMapState, view: str, query: Mapping[str, str]) -> dict[str, Any]:
    """The view's document: the map in steps, the others (one page of pods, one selection)
    at once."""
    if view == "map":
        return await sliced(_map(state, query))
    return _BUILDERS[view](state, query)


_VIEWS: Final[Mapping[str, tuple[str, str]]] = {
    "/": ("map", "html"),
    "/pending": ("pending", "html"),
    "/fit": ("fit", "html"),
    "/api/v1/map": ("map", "json"),
    "/api/v1/pending": ("pending", "json"),
    "/api/v1/fit": ("fit", "json"),
}
_BUILDERS: Final[Mapping[str, Callable[[GpuMapState, Mapping[str, str]], dict[str, Any]]]] = {
    "pending": _pending,
    "fit": _fit,
}


_SHARED_VIEWS: Final = frozenset({"map", "pending"})
"""What a polling page asks again and again (the fit probe answers one person's question)."""


async def _view(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    view, form = _VIEWS[request.path]
    query: Mapping[str, str] = request.query
    if view not in _SHARED_VIEWS:
        return await _answer(state, view, form, query)
    render_refresh = form == "html" and bool(query.get("refresh"))
    if render_refresh:
        # The page's own auto-refresh setting is written into the page: not shared.
        return await _answer(state, view, form, query)

    async def build() -> Answer:
        response = await _answer(state, view, form, query)
        assert isinstance(response.body, bytes)
        return Answer(response.status, response.body, response.content_type)

    shared = await state.shared.get(answer_key(request.path, query), build)
    response = web.Response(status=shared.status, body=shared.body)
    response.content_type = shared.content_type
    if shared.content_type == "text/html":
        response.charset = "utf-8"
    return response


async def _answer(
    state: GpuMapState, view: str, form: str, query: Mapping[str, str]
) -> web.Response:
    try:
        if view == "fit" and form == "html" and not any(query.get(p) for p in PROBE_PARAMETERS):
            doc = document("FitForm", state.now(), state.replica())
            doc["vendors"] = [vendor.common_word for vendor in state.cache.vendors]
        else:
            doc = await _build(state, view, query)
            if view == "map":
                await _add_usage(state, doc)
    except QueryError as exc:
        if form == "json":
            return _json({"error": str(exc)}, 400)
        return await _page(state, "error", {"error": str(exc), "view": view}, query)
    if form == "json":
        return await _json_sliced(doc)
    return await _page(state, view, doc, query)


def _headers(response: web.StreamResponse, policy: str, frame_ancestors: str) -> None:
    headers = response.headers
    headers["Cache-Control"] = "no-store"
    headers["X-Content-Type-Options"] = "nosniff"
    headers["Referrer-Policy"] = "no-referrer"
    headers["Content-Security-Policy"] = policy
    if frame_ancestors.strip() == "'none'":
        headers["X-Frame-Options"] = "DENY"


def _guard(state: GpuMapState) -> Middleware:
    policy = content_security_policy(state.frame_ancestors)

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        view, form = _VIEWS.get(request.path, ("other", "json"))
        response: web.StreamResponse
        if request.method not in ("GET", "HEAD"):
            response = _json({"error": f"{request.method} not allowed: read-only"}, 405)
            response.headers["Allow"] = "GET, HEAD"
        elif len(request.query_string) > MAX_QUERY:
            response = _json({"error": f"query longer than {MAX_QUERY} characters"}, 414)
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                response = _json({"error": exc.reason}, exc.status)
            except Exception as exc:
                log.exception("gpumap_internal_error", path=request.path)
                response = _json({"error": f"internal error: {type(exc).__name__}"}, 500)
        _headers(response, policy, state.frame_ancestors)
        state.metrics.gpumap.labels(view=view, format=form, code=str(response.status)).observe(
            time.perf_counter() - started
        )
        return response

    return cast("Middleware", guard)


def build_gpumap_app(state: GpuMapState) -> web.Application:
    """The GPU map application (serve it with ``max_line_size=MAX_LINE``)."""
    app = web.Application(middlewares=[_guard(state)], client_max_size=1024)
    app[_STATE] = state
    for path in _VIEWS:
        app.router.add_get(path, _view)
    return app
