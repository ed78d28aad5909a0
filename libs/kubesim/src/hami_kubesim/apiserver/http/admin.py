"""``/_sim`` control endpoints for tests driving the emulator over HTTP: fault plan, forced
compaction, dropping watches, statistics, and the knob of each node's kubelet stand-in (pause,
resume, admission delay, restart).  They are never subject to injected faults, and requests to
them are not counted in the request metrics."""

from __future__ import annotations

import json
import math
from typing import Any

from aiohttp import web

from hami_kubesim.apiserver.errors import BadRequestError, StatusError
from hami_kubesim.apiserver.hooks import KubeletControl
from hami_kubesim.apiserver.server import ApiServer


def _ok(body: Any) -> web.Response:
    return web.json_response(body)


def _fail(err: StatusError) -> web.Response:
    return web.json_response(err.status(), status=err.code)


async def _json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequestError(f"invalid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequestError("expected a JSON object")
    return body


def add_admin_routes(app: web.Application, server: ApiServer) -> None:
    """Register the control endpoints:

    * ``GET /_sim/faults`` - the plan: ``{"seed", "errors": [...], "latency": [...]}``
    * ``POST /_sim/faults`` - replace the plan (same shape; error rule keys ``verb``,
      ``resource``, ``code``, ``rate``, ``times``, ``message``, ``retry_after``; latency rule keys
      ``seconds``, ``verb``, ``resource``)
    * ``DELETE /_sim/faults`` - clear the plan
    * ``POST /_sim/compact`` - ``{"resourceVersion": N}`` optional; forget watch history up to it
    * ``POST /_sim/history`` - ``{"size": N}``: per-resource history length
    * ``POST /_sim/drop-watches`` - ``{"resource": "pods", "mode": "close|expire|abort"}``
    * ``GET /_sim/stats`` - object and watcher counts, resourceVersion, history windows
    * ``GET /_sim/kubelets`` - ``{"kubelets": [state, ...]}``; ``GET /_sim/kubelets/<node>`` -
      one node's state: ``{"node", "paused", "admissionDelaySeconds", "waiting", "admitting"}``
    * ``POST /_sim/kubelets/<node>/pause`` and ``.../resume`` - hold and release admission
    * ``POST /_sim/kubelets/<node>/admission-delay`` - ``{"seconds": N}``: every admission starts
      N seconds late (0: none)
    * ``POST /_sim/kubelets/<node>/restart`` - a kubelet restart as the plugins see it
    """

    async def get_faults(request: web.Request) -> web.Response:
        return _ok(server.faults.to_dict())

    async def set_faults(request: web.Request) -> web.Response:
        try:
            server.faults.configure(await _json(request))
        except StatusError as err:
            return _fail(err)
        except (TypeError, ValueError) as exc:
            return _fail(BadRequestError(f"invalid fault plan: {exc}"))
        return _ok(server.faults.to_dict())

    async def clear_faults(request: web.Request) -> web.Response:
        server.clear_faults()
        return _ok(server.faults.to_dict())

    async def compact(request: web.Request) -> web.Response:
        try:
            body = await _json(request)
            rv = body.get("resourceVersion")
            target = server.compact(int(rv) if rv not in (None, "") else None)
        except StatusError as err:
            return _fail(err)
        except (TypeError, ValueError) as exc:
            return _fail(BadRequestError(f"invalid resourceVersion: {exc}"))
        return _ok({"compactedTo": str(target)})

    async def history(request: web.Request) -> web.Response:
        try:
            size = int((await _json(request)).get("size", 0))
        except StatusError as err:
            return _fail(err)
        except (TypeError, ValueError) as exc:
            return _fail(BadRequestError(f"invalid size: {exc}"))
        if size < 1:
            return _fail(BadRequestError("size must be at least 1"))
        server.set_history_size(size)
        return _ok({"size": size})

    async def drop_watches(request: web.Request) -> web.Response:
        try:
            body = await _json(request)
            dropped = server.drop_watches(body.get("resource"), mode=body.get("mode", "close"))
        except StatusError as err:
            return _fail(err)
        return _ok({"dropped": dropped})

    async def stats(request: web.Request) -> web.Response:
        return _ok(server.stats())

    def kubelet(request: web.Request) -> KubeletControl:
        node = request.match_info["node"]
        found = server.kubelets.get(node)
        if found is None:
            raise StatusError(404, f"no kubelet stand-in runs for node {node!r}", reason="NotFound")
        return found

    async def list_kubelets(request: web.Request) -> web.Response:
        return _ok({"kubelets": [k.describe() for _, k in sorted(server.kubelets.items())]})

    async def kubelet_state(request: web.Request) -> web.Response:
        try:
            return _ok(kubelet(request).describe())
        except StatusError as err:
            return _fail(err)

    async def kubelet_action(request: web.Request) -> web.Response:
        try:
            target = kubelet(request)
            action = request.match_info["action"]
            if action == "pause":
                target.pause()
            elif action == "resume":
                target.resume()
            elif action == "admission-delay":
                target.set_admission_delay(_seconds((await _json(request)).get("seconds")))
            elif action == "restart":
                await target.restart()
            else:
                raise StatusError(
                    404,
                    f"unknown kubelet action {action!r}; use pause, resume, admission-delay "
                    "or restart",
                    reason="NotFound",
                )
        except StatusError as err:
            return _fail(err)
        return _ok(target.describe())

    app.router.add_get("/_sim/faults", get_faults)
    app.router.add_post("/_sim/faults", set_faults)
    app.router.add_delete("/_sim/faults", clear_faults)
    app.router.add_post("/_sim/compact", compact)
    app.router.add_post("/_sim/history", history)
    app.router.add_post("/_sim/drop-watches", drop_watches)
    app.router.add_get("/_sim/stats", stats)
    app.router.add_get("/_sim/kubelets", list_kubelets)
    app.router.add_get("/_sim/kubelets/{node}", kubelet_state)
    app.router.add_post("/_sim/kubelets/{node}/{action}", kubelet_action)


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadRequestError(f"seconds must be a number, got {value!r}")
    if value < 0:
        raise BadRequestError(f"seconds must not be negative, got {value!r}")
    return float(value)
