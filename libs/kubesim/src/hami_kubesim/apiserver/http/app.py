"""The HTTP face of :class:`~hami_kubesim.apiserver.server.ApiServer`: an aiohttp application
serving the Kubernetes REST paths, discovery, ``/metrics`` (requests counted as kube-apiserver
counts them, see :mod:`hami_kubesim.apiserver.metrics`) and the ``/_sim`` control endpoints."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web

from hami_kubesim.apiserver.errors import BadRequestError, MethodNotAllowedError, StatusError
from hami_kubesim.apiserver.history import Entry, encode
from hami_kubesim.apiserver.http import discovery, openapi
from hami_kubesim.apiserver.http.admin import add_admin_routes
from hami_kubesim.apiserver.http.routing import Discovery, Target, parse
from hami_kubesim.apiserver.http.serviceproxy import ServiceProxy, parse_proxy_path, resolve
from hami_kubesim.apiserver.http.watch import serve_watch
from hami_kubesim.apiserver.listing import ListPage
from hami_kubesim.apiserver.metrics import client_name, kube_verb
from hami_kubesim.apiserver.proxy import ProxyRequest, proxy_verb
from hami_kubesim.apiserver.selectors import label_selector_from_query, parse_field_selector
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.objects import tables
from hami_kubesim.objects.patching import APPLY_PATCH, PATCH_TYPES, media_type
from hami_kubesim.objects.resources import ResourceType

log = logging.getLogger(__name__)
SERVER_KEY: web.AppKey[ApiServer] = web.AppKey("kubesim_server", ApiServer)
JSON = "application/json"
_SUCCESS_201 = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}


def json_response(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON)


def error_response(err: StatusError) -> web.Response:
    resp = json_response(encode(err.status()), err.code)
    if err.retry_after:
        resp.headers["Retry-After"] = str(err.retry_after)
    return resp


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1", "")


_JSON_TYPES = ("", "application/json", "application/yaml")


async def _body(request: web.Request) -> Any:
    ctype = media_type(request.headers.get("Content-Type"))
    if request.method != "PATCH" and ctype not in _JSON_TYPES and not ctype.endswith("+json"):
        # Protobuf/CBOR senders (kubectl's typed clients) fall back to JSON on a 415.
        raise StatusError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: "
            f"application/json, application/yaml; got {ctype}",
        )
    raw = await request.read()
    if not raw:
        raise BadRequestError("the body of the request was empty")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequestError(
            f"the body of the request could not be decoded as JSON: {exc}"
        ) from exc


async def _optional_body(request: web.Request) -> dict[str, Any] | None:
    """DeleteOptions, when a body was sent."""
    raw = await request.read()
    if not raw.strip():
        return None
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequestError(
            f"the body of the request could not be decoded as JSON: {exc}"
        ) from exc
    return body if isinstance(body, dict) else None


def _verb(request: web.Request, target: Target) -> str:
    method = request.method
    if method == "GET":
        if target.name:
            return "get"
        return (
            "watch" if target.watch_path or _truthy(request.query.get("watch", "false")) else "list"
        )
    if method == "DELETE":
        return "delete" if target.name else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def _list_body(rt: ResourceType, page: ListPage) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(page.rv)}
    if page.continue_token:
        meta["continue"] = page.continue_token
        if page.remaining is not None:
            meta["remainingItemCount"] = page.remaining
    head = (
        f'{{"kind":"{rt.list_kind}","apiVersion":"{rt.api_version}","metadata":'.encode()
        + encode(meta)
        + b',"items":['
    )
    return head + b",".join(e.item_json() for e in page.entries) + b"]}"


def _wants_table(request: web.Request) -> bool:
    return "as=Table" in request.headers.get("Accept", "")


def _object_response(
    request: web.Request, rt: ResourceType, entry: Entry, status: int = 200
) -> web.Response:
    if _wants_table(request) and request.method == "GET":
        body = tables.table(
            rt,
            [entry.obj],
            resource_version=entry.obj["metadata"]["resourceVersion"],
            include_object=request.query.get("includeObject", "Metadata"),
        )
        return json_response(encode(body), status)
    return json_response(entry.wire_json(rt.wire_prefix), status)


class Handlers:
    """Request handlers bound to one :class:`ApiServer`."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self.proxy = ServiceProxy()

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        proxied = parse_proxy_path(request.rel_url.raw_path)
        if proxied is not None:
            return await self._proxy(request, proxied)
        try:
            target = parse(self.server.registry, request.path)
        except StatusError as err:
            return error_response(err)
        if isinstance(target, Discovery):
            if request.method != "GET":
                return error_response(MethodNotAllowedError())
            return self._discovery(request, target)  # not counted: not a resource request
        verb = _verb(request, target)
        count = self._counter(request, target, verb)
        response = await self._answer(request, target, verb, count)
        if verb != "watch" or response.status != 200:  # a started watch counted itself
            count(response.status)
        return response

    async def _proxy(self, request: web.Request, target: ProxyRequest) -> web.StreamResponse:
        """``services/proxy``: counted as kube-apiserver counts a connect request (verb
        ``CONNECT``); faults match verb ``get`` (``create``, ... by method, the verb RBAC
        checks) and resource ``services/proxy``."""
        client = client_name(request.headers.get("User-Agent"))
        verb = proxy_verb(request.method)
        names = ("services/proxy",)
        try:
            delay = self.server.faults.latency_for(verb, names)
            if delay > 0:
                await asyncio.sleep(delay)
            injected = self.server.faults.error_for(verb, names)
            if injected is not None:
                raise injected
            response = await self.proxy.forward(request, target, resolve(self.server, target))
        except StatusError as err:
            response = error_response(err)
        self.server.requests.record(
            client=client,
            verb="CONNECT",
            resource="services",
            subresource="proxy",
            code=response.status,
        )
        return response

    def _counter(self, request: web.Request, target: Target, verb: str) -> Callable[[int], None]:
        """Records this request in ``apiserver_request_total`` with the code it is given."""
        resource, sub = target.rt.plural, target.subresource or ""
        if target.legacy_binding:
            resource, sub = "bindings", ""
        client = client_name(request.headers.get("User-Agent"))
        kube = kube_verb(verb, media_type(request.headers.get("Content-Type")))

        def count(code: int) -> None:
            self.server.requests.record(
                client=client, verb=kube, resource=resource, subresource=sub, code=code
            )

        return count

    async def _answer(
        self, request: web.Request, target: Target, verb: str, count: Callable[[int], None]
    ) -> web.StreamResponse:
        try:
            names = target.fault_names()
            delay = self.server.faults.latency_for(verb, names)
            if delay > 0:
                await asyncio.sleep(delay)
            injected = self.server.faults.error_for(verb, names)
            if injected is not None:
                return error_response(injected)
            if verb == "watch":
                return await serve_watch(request, self.server, target, on_start=lambda: count(200))
            return await self._resource(request, target, verb)
        except StatusError as err:
            return error_response(err)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as exc:
            log.exception("internal error serving %s %s", request.method, request.path)
            return error_response(StatusError(500, f"Internal error occurred: {exc}"))

    def _discovery(self, request: web.Request, target: Discovery) -> web.Response:
        registry = self.server.registry
        doc: dict[str, Any] | None
        if target.what == "api":
            doc = discovery.api_versions(request.host)
        elif target.what == "apis":
            doc = discovery.api_group_list(registry)
        elif target.what == "group":
            doc = discovery.api_group(registry, target.group)
        else:
            doc = discovery.resource_list(registry, target.group, target.version)
        if doc is None:
            return error_response(
                StatusError(404, "the server could not find the requested resource", details={})
            )
        return json_response(encode(doc))

    async def _resource(
        self, request: web.Request, target: Target, verb: str
    ) -> web.StreamResponse:
        rt, store = target.rt, self.server.store
        ns, name, sub = target.namespace, target.name, target.subresource
        if verb == "get":
            return _object_response(request, rt, store.entry(rt, ns, name))
        if verb == "list":
            return self._list(request, target)
        dry = bool(request.query.get("dryRun"))
        if verb == "create":
            body = await _body(request)
            if sub == "binding":
                if target.legacy_binding:
                    meta = body.get("metadata") if isinstance(body, dict) else None
                    name = str((meta or {}).get("name", ""))
                with store.dry_run(dry):
                    store.bind(ns or "", name, body)
                return json_response(encode(_SUCCESS_201), 201)
            if name:
                raise MethodNotAllowedError()
            entry = await self.server.create_entry(rt, body, ns, dry_run=dry)
            return _object_response(request, rt, entry, 201)
        if verb == "update" and name:
            body = await _body(request)
            with store.dry_run(dry):
                entry = store.update(rt, ns, name, body, subresource=sub)
            return _object_response(request, rt, entry)
        if verb == "patch" and name:
            ctype = media_type(request.headers.get("Content-Type"))
            if ctype == APPLY_PATCH or ctype not in PATCH_TYPES:
                raise StatusError(
                    415,
                    "the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(PATCH_TYPES)}",
                )
            body = await _body(request)
            with store.dry_run(dry):
                entry = store.patch(rt, ns, name, ctype, body, subresource=sub)
            return _object_response(request, rt, entry)
        if verb == "delete" and sub is None:
            options = await _optional_body(request)
            grace = request.query.get("gracePeriodSeconds")
            if grace is not None:  # DeleteOptions may come as query parameters too
                try:
                    options = {**(options or {}), "gracePeriodSeconds": int(grace)}
                except ValueError as exc:
                    raise BadRequestError(f"invalid gracePeriodSeconds: {grace}") from exc
            with store.dry_run(dry):
                entry = store.delete(rt, ns, name, options=options)
            return json_response(entry.wire_json(rt.wire_prefix))
        if verb == "deletecollection" and sub is None:
            options = await _optional_body(request)
            page = store.select(
                rt,
                namespace=ns,
                labels=label_selector_from_query(request.query.get("labelSelector")),
                fields=parse_field_selector(request.query.get("fieldSelector"), rt.field_labels),
            )
            with store.dry_run(dry):
                deleted = store.delete_collection(rt, page.entries, options=options)
            return json_response(_list_body(rt, ListPage(deleted, store.rv)))
        raise MethodNotAllowedError()

    def _list(self, request: web.Request, target: Target) -> web.Response:
        rt, query = target.rt, request.query
        try:
            limit = int(query.get("limit") or 0)
        except ValueError as exc:
            raise BadRequestError(f"invalid limit: {query.get('limit')}") from exc
        page = self.server.store.select(
            rt,
            namespace=target.namespace,
            labels=label_selector_from_query(query.get("labelSelector")),
            fields=parse_field_selector(query.get("fieldSelector"), rt.field_labels),
            limit=max(0, limit),
            continue_token=query.get("continue") or "",
        )
        if _wants_table(request):
            body = tables.table(
                rt,
                [e.obj for e in page.entries],
                resource_version=str(page.rv),
                include_object=query.get("includeObject", "Metadata"),
                continue_token=page.continue_token,
            )
            return json_response(encode(body))
        return json_response(_list_body(rt, page))


async def _plain(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def _metrics_handler(server: ApiServer) -> Any:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            text=server.requests.render(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )

    return handler


async def _version(request: web.Request) -> web.Response:
    return json_response(encode(discovery.version()))


def _openapi_handler(server: ApiServer) -> Any:
    async def handler(request: web.Request) -> web.Response:
        tail = request.match_info.get("tail", "")
        doc: dict[str, Any] | None = None
        if tail == "v3":
            doc = openapi.index(server.registry)
        elif tail.startswith("v3/"):
            doc = openapi.group_version(server.registry, tail[3:])
        if doc is None:
            return error_response(
                StatusError(404, "the server could not find the requested resource", details={})
            )
        return json_response(encode(doc))

    return handler


def create_app(server: ApiServer) -> web.Application:
    """The aiohttp application serving ``server``."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SERVER_KEY] = server
    handlers = Handlers(server)
    for path in ("/healthz", "/readyz", "/livez"):
        app.router.add_get(path, _plain)
    app.router.add_get("/version", _version)
    app.router.add_get("/version/", _version)
    app.router.add_get("/openapi/{tail:.*}", _openapi_handler(server))
    app.router.add_get("/metrics", _metrics_handler(server))
    add_admin_routes(app, server)
    app.router.add_route("*", "/{tail:.*}", handlers.dispatch)

    async def _on_shutdown(_app: web.Application) -> None:
        server.shutdown()

    async def _on_cleanup(_app: web.Application) -> None:
        await handlers.proxy.close()

    app.on_shutdown.append(_on_shutdown)
    app.on_cleanup.append(_on_cleanup)
    return app
