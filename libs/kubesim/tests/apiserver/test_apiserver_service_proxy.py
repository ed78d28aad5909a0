"""The API server's service proxy over real sockets: a small aiohttp backend published behind a
Service and its EndpointSlices, reached through ``/api/v1/namespaces/{ns}/services/{id}/proxy``;
the errors as kube-apiserver words them; Service and EndpointSlice validation."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.testing import RunningApiServer, publish_service, start_app

PROXY = "/api/v1/namespaces/kube-system/services"


async def _echo(request: web.Request) -> web.StreamResponse:
    if request.method == "HEAD":
        return web.Response(headers={"X-Backend": "echo", "Content-Type": "application/json"})
    body = {
        "method": request.method,
        "path": request.rel_url.raw_path,
        "query": request.rel_url.raw_query_string,
        "headers": dict(request.headers),
        "body": (await request.read()).decode(),
    }
    return web.json_response(body, headers={"X-Backend": "echo", "Connection": "keep-alive"})


async def _stream(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(status=207, headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    for part in (b"one ", b"two ", b"three"):
        await response.write(part)
    await response.write_eof()
    return response


@pytest.fixture
async def backend() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("GET", "/stream", _stream)
    app.router.add_route("*", "/{tail:.*}", _echo)
    runner, port = await start_app(app, "127.0.0.1", 0)
    try:
        yield port
    finally:
        await runner.cleanup()


@pytest.fixture
async def http(sim: RunningApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=sim.url) as session:
        yield session


@pytest.fixture
async def published(sim: RunningApiServer, backend: int) -> int:
    await publish_service(
        sim.server,
        namespace="kube-system",
        name="hami-scheduler",
        ports={"https": 443, "gpumap": 9397},
        backends=[{"gpumap": backend, "https": 1}],
    )
    return backend


async def _json(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    body = json.loads(await resp.read())
    assert isinstance(body, dict)
    return body


@pytest.mark.usefixtures("published")
@pytest.mark.parametrize(
    "service_id", ["hami-scheduler:gpumap", "hami-scheduler:9397", "http:hami-scheduler:gpumap"]
)
async def test_port_by_name_or_number_reaches_the_backend(
    http: aiohttp.ClientSession, service_id: str
) -> None:
    async with http.get(
        f"{PROXY}/{service_id}/proxy/api/v1/map?node=gpu-&page=2",
        headers={"Authorization": "Bearer secret", "Accept": "application/json"},
    ) as resp:
        assert resp.status == 200
        assert resp.headers["X-Backend"] == "echo"
        assert "Connection" not in resp.headers or resp.headers["Connection"] != "keep-alive"
        seen = await _json(resp)
    assert seen["method"] == "GET"
    assert seen["path"] == "/api/v1/map"
    assert seen["query"] == "node=gpu-&page=2"
    headers = seen["headers"]
    assert "Authorization" not in headers  # the user's credentials stay at the API server
    assert headers["Accept"] == "application/json"
    assert headers["X-Forwarded-For"] == "127.0.0.1"
    assert headers["X-Forwarded-Uri"] == f"{PROXY}/{service_id}/proxy/api/v1/map"


@pytest.mark.usefixtures("published")
async def test_head_post_and_a_streamed_answer(http: aiohttp.ClientSession) -> None:
    base = f"{PROXY}/hami-scheduler:gpumap/proxy"
    async with http.head(f"{base}/api/v1/map") as resp:
        assert resp.status == 200
        assert resp.headers["X-Backend"] == "echo"
        assert await resp.read() == b""
    async with http.post(f"{base}/x", data=b"payload") as resp:
        assert (await _json(resp))["body"] == "payload"
    async with http.get(f"{base}/stream") as resp:
        assert resp.status == 207
        assert await resp.read() == b"one two three"


@pytest.mark.usefixtures("published")
async def test_the_bare_proxy_path_redirects_below_itself(http: aiohttp.ClientSession) -> None:
    base = f"{PROXY}/hami-scheduler:gpumap/proxy"
    async with http.get(f"{base}?a=1", allow_redirects=False) as resp:
        assert resp.status == 301
        assert resp.headers["Location"] == f"{base}/?a=1"
    async with http.get(f"{base}/") as resp:
        assert (await _json(resp))["path"] == "/"
    async with http.get(f"{base}/a//b/../c/") as resp:
        assert (await _json(resp))["path"] == "/a/c/"


async def _status(http: aiohttp.ClientSession, path: str) -> tuple[int, dict[str, Any]]:
    async with http.get(path) as resp:
        return resp.status, await _json(resp)


async def test_errors_are_the_api_servers(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    code, body = await _status(http, f"{PROXY}/hami-scheduler:9397/proxy/")
    assert (code, body["reason"], body["message"]) == (
        404,
        "NotFound",
        'services "hami-scheduler" not found',
    )
    code, body = await _status(http, f"{PROXY}/hami-scheduler:gpumap/proxy/")
    assert (code, body["reason"], body["message"]) == (
        503,
        "ServiceUnavailable",
        'no endpoints available for service "hami-scheduler"',
    )
    code, body = await _status(http, f"{PROXY}/ftp:hami-scheduler:gpumap/proxy/")
    assert (code, body["message"]) == (400, 'invalid service request "ftp:hami-scheduler:gpumap"')
    await publish_service(
        sim.server,
        namespace="kube-system",
        name="hami-scheduler",
        ports={"gpumap": 9397},
        backends=[{"gpumap": 9}],  # nothing listens on the discard port
    )
    code, body = await _status(http, f"{PROXY}/hami-scheduler:1234/proxy/")
    assert (code, body["message"]) == (
        503,
        'no service port 1234 found for service "hami-scheduler"',
    )
    code, body = await _status(http, f"{PROXY}/hami-scheduler:metrics/proxy/")
    assert (code, body["message"]) == (
        503,
        'no endpoints available for service "hami-scheduler:metrics"',
    )
    code, body = await _status(http, f"{PROXY}/hami-scheduler:gpumap/proxy/api")
    assert code == 503
    assert body["message"] == (
        "error trying to reach service: dial tcp 127.0.0.1:9: connect: connection refused"
    )


async def test_an_unready_endpoint_is_skipped(
    sim: RunningApiServer, http: aiohttp.ClientSession, published: int
) -> None:
    await sim.server.patch(
        "endpointslices",
        "hami-scheduler-0",
        {"endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": False}}]},
        namespace="kube-system",
        patch_type="merge",
    )
    code, body = await _status(http, f"{PROXY}/hami-scheduler:gpumap/proxy/")
    assert (code, body["message"]) == (
        503,
        'no endpoints available for service "hami-scheduler:gpumap"',
    )


@pytest.mark.usefixtures("published")
async def test_a_refusal_of_services_proxy_is_answered_before_the_backend(
    sim: RunningApiServer, http: aiohttp.ClientSession
) -> None:
    message = (
        'services "hami-scheduler" is forbidden: User "alice" cannot get resource '
        '"services/proxy" in API group "" in the namespace "kube-system"'
    )
    sim.server.inject_error("get", "services/proxy", code=403, message=message)
    code, body = await _status(http, f"{PROXY}/hami-scheduler:gpumap/proxy/api/v1/map")
    assert (code, body["reason"], body["message"]) == (403, "Forbidden", message)
    counts = sim.server.requests.counts()
    assert counts.count(verb="CONNECT", resource="services", subresource="proxy", code=403) == 1


async def test_service_defaults_and_validation(sim: RunningApiServer) -> None:
    created = await sim.server.create(
        "services",
        {"metadata": {"name": "web"}, "spec": {"ports": [{"port": 80}]}},
        namespace="default",
    )
    spec = created["spec"]
    assert spec["type"] == "ClusterIP"
    assert spec["clusterIP"].startswith("10.")
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80}]
    with pytest.raises(StatusError) as info:
        await sim.server.create(
            "services",
            {
                "metadata": {"name": "bad"},
                "spec": {"ports": [{"name": "a", "port": 0}, {"port": 81}]},
            },
            namespace="default",
        )
    assert info.value.code == 422
    assert info.value.message == (
        'Service "bad" is invalid: [spec.ports[0].port: Invalid value: 0: must be between 1 and '
        "65535, inclusive, spec.ports[1].name: Required value]"
    )


async def test_endpoint_slice_validation(sim: RunningApiServer) -> None:
    with pytest.raises(StatusError) as info:
        await sim.server.create(
            "endpointslices",
            {
                "metadata": {"name": "s"},
                "addressType": "IPv4",
                "endpoints": [{"addresses": ["::1"]}],
                "ports": [{"name": "web", "port": 70000}],
            },
            namespace="default",
        )
    assert info.value.message == (
        'EndpointSlice.discovery.k8s.io "s" is invalid: [endpoints[0].addresses[0]: Invalid '
        'value: "::1": must be a valid IPv4 address, ports[0].port: Invalid value: 70000: must '
        "be between 1 and 65535, inclusive]"
    )


async def test_discovery_lists_services_proxy(http: aiohttp.ClientSession) -> None:
    async with http.get("/api/v1") as resp:
        resources = {r["name"]: r for r in (await _json(resp))["resources"]}
    assert resources["services"]["shortNames"] == ["svc"]
    assert resources["services/proxy"]["kind"] == "ServiceProxyOptions"
    async with http.get("/apis/discovery.k8s.io/v1") as resp:
        assert [r["name"] for r in (await _json(resp))["resources"]] == ["endpointslices"]
