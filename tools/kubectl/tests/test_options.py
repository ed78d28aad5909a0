"""The command line, the API calls it makes and the messages of failures (pure)."""

from __future__ import annotations

import base64

import pytest

from hami_kube.errors import api_error
from hami_kubectl.fetch import explain
from hami_kubectl.options import Connection, parse
from hami_kubectl.outcome import CommandError, Exit
from hami_kubectl.probe import MAX_MANIFEST_BYTES, api_call, check_document


def test_defaults_and_connection_flags() -> None:
    invocation = parse(["map"])
    assert invocation.output == "table"
    assert invocation.connection == Connection()
    assert invocation.connection.proxy_path("api/v1/map") == (
        "/api/v1/namespaces/kube-system/services/hami-scheduler:gpumap/proxy/api/v1/map"
    )
    custom = parse(
        ["pending", "--kubeconfig", "/k", "--context", "prod", "--scheduler-namespace", "hami",
         "--scheduler-service", "s", "--port", "9397", "--request-timeout", "5s", "-o", "wide"]
    )  # fmt: skip
    assert custom.connection == Connection("/k", "prod", "hami", "s", "9397", 5.0)
    assert custom.output == "wide"


def test_api_calls() -> None:
    assert api_call(parse(["map"])).query == {}
    call = api_call(parse(["map", "--node", "a", "--vendor", "T4", "--page", "3", "--per-page",
                           "20"]))  # fmt: skip
    assert (call.path, call.query) == (
        "api/v1/map",
        {"node": "a", "vendor": "T4", "page": "3", "perPage": "20"},
    )
    assert api_call(parse(["pending", "-n", "ml"])).query == {"namespace": "ml"}
    fit = api_call(parse(["fit", "--gpus", "2", "--memory", "4000", "--cores", "30", "--type",
                          "A100", "--vendor", "NVIDIA"]))  # fmt: skip
    assert fit.query == {
        "gpus": "2", "memory": "4000", "cores": "30", "type": "A100", "vendor": "NVIDIA"
    }  # fmt: skip
    pod = b"kind: Pod\n"
    manifest = api_call(parse(["fit", "-f", "pod.yaml"]), pod).query["manifest"]
    assert base64.urlsafe_b64decode(manifest + "=" * (-len(manifest) % 4)) == pod


def test_a_manifest_over_64_kib_is_refused_here() -> None:
    with pytest.raises(CommandError) as info:
        api_call(parse(["fit", "-f", "big.yaml"]), b"x" * (MAX_MANIFEST_BYTES + 1))
    assert info.value.status == Exit.USAGE


@pytest.mark.parametrize(
    "argv",
    [
        ["fit"],
        ["fit", "-f", "p.yaml", "--gpus", "1"],
        ["fit", "--memory", "1", "--memory-percentage", "50"],
        ["map", "--per-page", "0"],
        ["map", "-o", "yaml"],
        ["nothing"],
    ],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2


def test_only_the_gpu_map_document_is_accepted() -> None:
    check_document("map", {"apiVersion": "gpumap.hami.io/v1", "kind": "GpuMap"})
    with pytest.raises(CommandError) as info:
        check_document("map", {"kind": "Status"})
    assert info.value.status == Exit.BAD_ANSWER


def _status(code: int, reason: str, message: str) -> bytes:
    return (
        f'{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"{message}",'
        f'"reason":"{reason}","code":{code}}}'
    ).encode()


def test_failures_say_what_to_do() -> None:
    connection = Connection()
    forbidden = explain(api_error(403, _status(403, "Forbidden", "no")), connection)
    assert forbidden.status == Exit.FORBIDDEN
    assert "--resource-name=hami-scheduler:gpumap" in forbidden.message
    assert explain(api_error(401, b"Unauthorized"), connection).status == Exit.FORBIDDEN
    missing = explain(api_error(404, _status(404, "NotFound", 'services \\"x\\" not found')),
                      connection)  # fmt: skip
    assert missing.status == Exit.UNAVAILABLE
    assert "--scheduler-namespace" in missing.message
    down = explain(api_error(503, _status(503, "ServiceUnavailable", "no endpoints")), connection)
    assert down.status == Exit.UNAVAILABLE
    assert "scheduler.gpumap.enabled" in down.message
    refused = explain(api_error(400, b'{"error": "manifest: line 3: bad"}'), connection)
    assert (refused.status, refused.message) == (
        Exit.USAGE,
        "the scheduler refused the request: manifest: line 3: bad",
    )
    old = explain(api_error(404, b"404: Not Found"), connection)
    assert old.status == Exit.BAD_ANSWER
    assert "does not serve the GPU map API" in old.message
