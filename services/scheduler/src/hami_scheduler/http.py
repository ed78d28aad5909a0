"""The aiohttp application: ``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt``;
``GET /healthz``, ``/readyz``.

Every request gets JSON back.  A body that is not an extender request (not JSON, wrong field
types) gets HTTP 400 with ``{"Error": "..."}``; a body over 1 MiB gets 413 (HAMi's limit); an
unexpected failure inside a verb gets HTTP 200 with the ``Error`` field set (``internal error:
<type>``; for preempt beside an empty victim map, so nothing is evicted) and a logged stack
trace — kube-scheduler treats both as a failed attempt and retries, and the service keeps
serving.  ``/readyz`` answers 200 once the caches have synced.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from aiohttp import web

from hami_runtime.sites import add_health_routes
from hami_scheduler.bind.service import BindService
from hami_scheduler.filter import FilterService
from hami_scheduler.metrics import SchedulerMetrics
from hami_scheduler.preempt import PreemptService
from hami_scheduler.wire import (
    BadArgsError,
    decode_binding_args,
    decode_extender_args,
    decode_preemption_args,
    encode_binding_result,
    encode_filter_result,
    encode_preemption_result,
    encode_priorities,
)

__all__ = ["STATE", "ExtenderState", "build_app"]

log = structlog.get_logger("hami_scheduler")

_JSON = "application/json"


@dataclass(frozen=True, slots=True)
class ExtenderState:
    """What the handlers share."""

    filters: FilterService
    binder: BindService | None
    metrics: SchedulerMetrics
    ready: Callable[[], bool] = lambda: True
    preempts: PreemptService | None = None


STATE = web.AppKey("hami_scheduler_state", ExtenderState)


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(status=status, body=body, content_type=_JSON)


def _error_body(message: str) -> bytes:
    return json.dumps({"Error": message}).encode()


async def _read(request: web.Request, verb: str) -> bytes | web.Response:
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        request.app[STATE].metrics.observe(verb, "error", 0.0, "too_large")
        log.warning("request_too_large", verb=verb, error=exc.text)
        return _json(_error_body(f"request body too large: {exc.text}"), 413)


def _bad_request(state: ExtenderState, verb: str, exc: BadArgsError) -> web.Response:
    state.metrics.observe(verb, "error", 0.0, "bad_request")
    log.warning("bad_extender_request", verb=verb, error=str(exc))
    return _json(_error_body(str(exc)), 400)


def _guarded(
    verb: str, handler: Callable[[web.Request, bytes], Awaitable[web.Response]]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handle(request: web.Request) -> web.Response:
        body = await _read(request, verb)
        if isinstance(body, web.Response):
            return body
        try:
            return await handler(request, body)
        except BadArgsError as exc:
            return _bad_request(request.app[STATE], verb, exc)
        except Exception as exc:
            # A bug must not become a stack trace on the wire or a dead server.
            log.exception("extender_internal_error", verb=verb)
            request.app[STATE].metrics.observe(verb, "error", 0.0, "internal")
            message = f"internal error: {type(exc).__name__}"
            if verb == "prioritize":
                return _json(encode_priorities([]))
            if verb == "bind":
                return _json(encode_binding_result(message))
            if verb == "preempt":
                return _json(encode_preemption_result({}, error=message))
            return _json(encode_filter_result(error=message))

    return handle


async def _filter(request: web.Request, body: bytes) -> web.Response:
    state = request.app[STATE]
    reply = await state.filters.filter(decode_extender_args(body))
    return _json(
        encode_filter_result(
            node_names=reply.node_names,
            nodes=reply.nodes,
            failed=reply.failed,
            failed_unresolvable=reply.unresolvable,
            error=reply.error,
        )
    )


async def _prioritize(request: web.Request, body: bytes) -> web.Response:
    state = request.app[STATE]
    return _json(encode_priorities(state.filters.prioritize(decode_extender_args(body))))


async def _bind(request: web.Request, body: bytes) -> web.Response:
    state = request.app[STATE]
    args = decode_binding_args(body)
    if state.binder is None:
        return _json(encode_binding_result("bind is not available in this process"))
    return _json(encode_binding_result(await state.binder.bind(args)))


async def _preempt(request: web.Request, body: bytes) -> web.Response:
    state = request.app[STATE]
    args = decode_preemption_args(body)
    if state.preempts is None:
        return _json(encode_preemption_result({}, error="preempt is not available in this process"))
    reply = state.preempts.preempt(args)
    return _json(encode_preemption_result(reply.victims, error=reply.error))


def build_app(state: ExtenderState, *, max_body_bytes: int = 1024 * 1024) -> web.Application:
    """The extender application (serve it with TLS in production)."""
    app = web.Application(client_max_size=max_body_bytes)
    app[STATE] = state
    app.router.add_post("/filter", _guarded("filter", _filter))
    app.router.add_post("/prioritize", _guarded("prioritize", _prioritize))
    app.router.add_post("/bind", _guarded("bind", _bind))
    app.router.add_post("/preempt", _guarded("preempt", _preempt))
    add_health_routes(app, ready=state.ready)
    return app
