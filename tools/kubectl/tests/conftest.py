"""The plugin against kubesim through the API server's service proxy.

``standin``: a small aiohttp server answering the GPU map API v1 with the fixed contract documents
in ``contract/`` (what the real scheduler serves), published behind the Service
``kube-system/hami-scheduler`` (port ``gpumap`` = 9397) and its EndpointSlice, so every request
travels plugin → kubesim's service proxy → stand-in.  ``plugin``: runs the real console script
``kubectl-hami`` in a subprocess with ``KUBECONFIG`` pointing at kubesim.

An end-to-end test against the real system replaces the stand-in with the stack's own Service
(``SystemSpec(gpumap=True)``) and keeps ``plugin``: see docs/kubectl-hami.md.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from hami_kubesim.testing import RunningApiServer, publish_service, start_app, write_kubeconfig

from .plugin_helpers import PLUGIN, Plugin, Result, StandIn, answer_fit, contract


@pytest.fixture
async def standin(sim: RunningApiServer) -> AsyncIterator[StandIn]:
    state = StandIn(port=0)

    async def answer(request: web.Request) -> web.Response:
        query = dict(request.query)
        state.seen.append((request.path, query))
        if request.path == "/api/v1/map":
            return web.json_response(contract("map"))
        if request.path == "/api/v1/pending":
            return web.json_response(contract("pending"))
        if request.path == "/api/v1/fit":
            return answer_fit(query)
        return web.json_response({"error": "not found"}, status=404)

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner, state.port = await start_app(app, "127.0.0.1", 0)
    try:
        await publish_service(
            sim.server,
            namespace="kube-system",
            name="hami-scheduler",
            ports={"https": 443, "gpumap": 9397},
            backends=[{"https": 1, "gpumap": state.port}],
        )
        yield state
    finally:
        await runner.cleanup()


@pytest.fixture
def plugin(sim: RunningApiServer, tmp_path: Path) -> Plugin:
    """``await plugin("map", "-o", "wide", stdin=b"...")``: the console script's outcome."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.url)

    async def run(*args: str, stdin: bytes | None = None) -> Result:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        process = await asyncio.create_subprocess_exec(
            str(PLUGIN),
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        out, err = await process.communicate(stdin)
        assert process.returncode is not None
        return Result(process.returncode, out.decode(), err.decode())

    return run
