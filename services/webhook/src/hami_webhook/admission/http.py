"""The aiohttp application: ``POST /webhook``, ``POST /webhook/dra``, ``GET /healthz``,
``GET /readyz``.

A review is answered from memory (the decision is pure and the quota view is a watched cache).
``/webhook/dra`` (``--dra-claims``) also turns NVIDIA requests into DRA claims; its handler
awaits one thing more: creating the ResourceClaimTemplates the patched pod references, before
the reply (skipped for a dry run, so a dry run writes nothing; a failure is an error answer, as
a pod referencing a template that is not there would wait forever).  The chart routes the
namespaces that opted in to that path.  Every body gets an
answer that is not a stack trace: a reply AdmissionReview whenever the request's uid can be read,
otherwise HTTP 400 with a ``metav1.Status`` explaining what is wrong.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog
from aiohttp import web

from hami_kube.errors import KubeError
from hami_kube.objects import ObjectView
from hami_runtime.sites import add_health_routes
from hami_webhook.admission.review import (
    AdmissionRequest,
    BadReviewError,
    decode_review,
    encode_response,
    failure_status,
)
from hami_webhook.dra.template_writer import TemplateWriter
from hami_webhook.metrics import WebhookMetrics
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.decision import Decision, Outcome
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.quota.check import QuotaView

__all__ = [
    "DRA_WEBHOOK_PATH",
    "STATE",
    "WEBHOOK_PATH",
    "WebhookState",
    "answer_dra_review",
    "answer_review",
    "build_app",
]

log = structlog.get_logger("hami_webhook")

WEBHOOK_PATH = "/webhook"
DRA_WEBHOOK_PATH = "/webhook/dra"
_JSON = "application/json"


@dataclass(frozen=True, slots=True)
class WebhookState:
    """What the handlers share: the rules, the quota view, metrics and readiness."""

    rules: MutationRules
    metrics: WebhookMetrics
    quota: QuotaView | None = None
    ready: Callable[[], bool] = lambda: True
    templates: TemplateWriter | None = None
    """Set with ``--dra-claims``: ``/webhook/dra`` converts NVIDIA requests into claims."""


STATE = web.AppKey("hami_webhook_state", WebhookState)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    outcome: Outcome


def _bad_request(message: str) -> Answer:
    status = {"kind": "Status", "apiVersion": "v1", **failure_status(400, "BadRequest", message)}
    return Answer(400, json.dumps(status).encode(), "error")


def _decide(
    request: AdmissionRequest, state: WebhookState, *, dra: bool = False
) -> tuple[Decision, list[str]]:
    if request.sub_resource or request.operation != "CREATE":
        return Decision("allowed", message="only pod CREATE is mutated"), []
    if not request.is_pod:
        warning = f"hami-webhook ignores {request.kind_name}: only pods are mutated"
        log.warning("non_pod_object", kind=request.kind_name, uid=request.uid)
        return Decision("allowed", message=warning), [warning]
    namespace = request.namespace
    if not namespace and isinstance(request.object, Mapping):
        namespace = ObjectView(request.object).namespace
    if dra and state.templates is None:
        message = f"{DRA_WEBHOOK_PATH} was called but hami-webhook runs without --dra-claims"
        return Decision("error", message=message, code=500, reason="InternalError"), []
    decision = admit_pod(
        request.object, namespace=namespace, rules=state.rules, quota=state.quota, dra_claims=dra
    )
    return decision, list(decision.warnings)


def _log_decision(request: AdmissionRequest, decision: Decision) -> None:
    if decision.allowed:
        # Every admitted pod passes here: keep the common path to one cheap call.
        log.debug(
            "admission_allowed",
            pod=request.display_name,
            uid=request.uid,
            outcome=decision.outcome,
            patch_ops=len(decision.patch),
        )
        return
    fields = {
        "pod": request.display_name,
        "uid": request.uid,
        "outcome": decision.outcome,
        **{key: str(value)[:200] for key, value in decision.detail.items()},
    }
    if decision.outcome == "denied":
        log.info("admission_denied", message=decision.message, **fields)
    else:
        log.warning("admission_error", message=decision.message, **fields)


@dataclass(frozen=True, slots=True)
class _Decided:
    request: AdmissionRequest
    decision: Decision
    warnings: list[str]


def _decided(body: bytes, state: WebhookState, *, dra: bool) -> _Decided | Answer:
    try:
        request = decode_review(body)
    except BadReviewError as exc:
        log.warning(
            "admission_bad_review", error=str(exc), body=body[:120].decode("utf-8", "replace")
        )
        return _bad_request(str(exc))
    try:
        decision, warnings = _decide(request, state, dra=dra)
    except Exception as exc:
        # A bug must not turn into an unreadable 500; the API server applies failurePolicy to
        # an error answer like to any other refusal.
        log.exception("admission_internal_error", uid=request.uid, pod=request.display_name)
        decision = _internal_error(f"internal error: {type(exc).__name__}")
        warnings = []
    return _Decided(request, decision, warnings)


def _internal_error(message: str) -> Decision:
    return Decision("error", message=message, code=500, reason="InternalError")


def _answer(decided: _Decided) -> Answer:
    request, decision = decided.request, decided.decision
    _log_decision(request, decision)
    reply = encode_response(
        api_version=request.api_version,
        uid=request.uid,
        decision=decision,
        warnings=decided.warnings,
    )
    return Answer(200, reply, decision.outcome)


def answer_review(body: bytes, state: WebhookState) -> Answer:
    """The HTTP answer for one review body of ``/webhook`` (pure apart from logging)."""
    decided = _decided(body, state, dra=False)
    return decided if isinstance(decided, Answer) else _answer(decided)


async def answer_dra_review(body: bytes, state: WebhookState) -> Answer:
    """The answer for ``/webhook/dra``: the templates the pod references exist before it goes
    out (not on a dry run: nothing is written then, the reply is the same)."""
    decided = _decided(body, state, dra=True)
    if isinstance(decided, Answer):
        return decided
    decision = decided.decision
    if decision.templates and decision.allowed and not decided.request.dry_run:
        assert state.templates is not None  # _decide refuses the path without a writer
        try:
            await state.templates.ensure(decision.templates)
        except KubeError as exc:
            names = ", ".join(t.name for t in decision.templates)
            decided = _Decided(
                decided.request,
                _internal_error(f"cannot create ResourceClaimTemplate {names}: {exc}"),
                [],
            )
    return _answer(decided)


async def _serve(request: web.Request, *, dra: bool) -> web.Response:
    started = time.perf_counter()
    state = request.app[STATE]
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        state.metrics.observe("error", time.perf_counter() - started)
        log.warning("admission_body_too_large", error=exc.text)
        answer = _bad_request(f"request body too large: {exc.text}")
        return web.Response(status=413, body=answer.body, content_type=_JSON)
    answer = await answer_dra_review(body, state) if dra else answer_review(body, state)
    state.metrics.observe(answer.outcome, time.perf_counter() - started)
    return web.Response(status=answer.status, body=answer.body, content_type=_JSON)


async def _review(request: web.Request) -> web.Response:
    return await _serve(request, dra=False)


async def _dra_review(request: web.Request) -> web.Response:
    return await _serve(request, dra=True)


def build_app(state: WebhookState, *, max_body_bytes: int = 4 * 1024 * 1024) -> web.Application:
    """The webhook application (serve it with TLS in production)."""
    app = web.Application(client_max_size=max_body_bytes)
    app[STATE] = state
    app.router.add_post(WEBHOOK_PATH, _review)
    app.router.add_post(DRA_WEBHOOK_PATH, _dra_review)
    add_health_routes(app, ready=state.ready)
    return app
