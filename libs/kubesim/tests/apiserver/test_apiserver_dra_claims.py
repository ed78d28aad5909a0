"""ResourceClaims and ResourceClaimTemplates (``resource.k8s.io/v1``) over HTTP: request
defaults, validation messages, the immutable spec, the ``status`` subresource (allocation set
once, reservedFor rules, device statuses, what a status write keeps), strategic merge patches
of ``reservedFor``, and the pod fields that refer to claims."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from hami_kubesim.dra_objects import (
    allocation,
    allocation_result,
    claim_template,
    container_claim,
    exact_request,
    first_available,
    pod_claim,
    resource_claim,
    subrequest,
)
from hami_kubesim.testing import RunningApiServer, http_json

NS = "/apis/resource.k8s.io/v1/namespaces/default"
CLAIMS = f"{NS}/resourceclaims"
TEMPLATES = f"{NS}/resourceclaimtemplates"
PODS = "/api/v1/namespaces/default/pods"
STRATEGIC = "application/strategic-merge-patch+json"


async def create(sim: RunningApiServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    code, created = await http_json(sim.url, "POST", path, body)
    assert code == 201, created
    return created


def causes(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in status["details"]["causes"]]


async def test_claim_defaults_and_empty_status(sim: RunningApiServer) -> None:
    body = resource_claim("c1", exact_request(capacity={"memory": "4096Mi", "cores": 30}))
    body["status"] = {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}
    created = await create(sim, CLAIMS, body)
    assert created["status"] == {}
    assert "generation" not in created["metadata"]
    assert created["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.hami.io",
        "allocationMode": "ExactCount",
        "count": 1,
        "capacity": {"requests": {"memory": "4Gi", "cores": "30"}},
    }
    sub = subrequest("small", capacity={"memory": "1Gi"})
    fancy = await create(sim, CLAIMS, resource_claim("c2", first_available("gpu", sub)))
    stored = fancy["spec"]["devices"]["requests"][0]["firstAvailable"][0]
    assert stored["allocationMode"] == "ExactCount"
    assert stored["count"] == 1


REF = (
    "must be the name of a request in the claim or the name of a request and a subrequest "
    "separated by '/'"
)


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param(
            {"devices": {"requests": [{"name": "gpu"}]}},
            "spec.devices.requests[0]",
            "Required value: exactly one of `exactly` or `firstAvailable` is required",
            id="neither exactly nor firstAvailable",
        ),
        pytest.param(
            {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.hami.io"},
                            "firstAvailable": [subrequest("a")],
                        }
                    ]
                }
            },
            "spec.devices.requests[0]",
            'Invalid value: "null": exactly one of `exactly` or `firstAvailable` is required, '
            "but multiple fields are set",
            id="both",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(), exact_request()]}},
            "spec.devices.requests[1]",
            'Duplicate value: "gpu"',
            id="request names repeat",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(f"r{i}") for i in range(33)]}},
            "spec.devices.requests",
            "Too many: 33: must have at most 32 items",
            id="more than 32 requests",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(device_class_name="")]}},
            "spec.devices.requests[0].exactly.deviceClassName",
            "Required value",
            id="no class",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(count=-1, allocation_mode="ExactCount")]}},
            "spec.devices.requests[0].exactly.count",
            "Invalid value: -1: must be greater than zero",
            id="negative count",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(count=2, allocation_mode="All")]}},
            "spec.devices.requests[0].exactly.count",
            "Invalid value: 2: must not be specified when allocationMode is 'All'",
            id="count with All",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(allocation_mode="Some")]}},
            "spec.devices.requests[0].exactly.allocationMode",
            'Unsupported value: "Some": supported values: "All", "ExactCount"',
            id="unknown mode",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request(capacity={"memory": "lots"})]}},
            "spec.devices.requests[0].exactly.capacity.requests[memory]",
            'Invalid value: "lots": must be a quantity',
            id="capacity request not a quantity",
        ),
        pytest.param(
            {
                "devices": {
                    "requests": [first_available("gpu", *[subrequest(f"s{i}") for i in range(9)])]
                }
            },
            "spec.devices.requests[0].firstAvailable",
            "Too many: 9: must have at most 8 items",
            id="more than 8 subrequests",
        ),
        pytest.param(
            {
                "devices": {
                    "requests": [exact_request()],
                    "constraints": [{"requests": ["nic"], "matchAttribute": "gpu.hami.io/numa"}],
                }
            },
            "spec.devices.constraints[0].requests[0]",
            f'Invalid value: "nic": {REF}',
            id="constraint names an unknown request",
        ),
        pytest.param(
            {
                "devices": {
                    "requests": [exact_request()],
                    "constraints": [{"matchAttribute": "numa"}],
                }
            },
            "spec.devices.constraints[0].matchAttribute",
            'Invalid value: "numa": a fully qualified name must be a domain and a name separated '
            "by a slash",
            id="constraint attribute without a domain",
        ),
        pytest.param(
            {"devices": {"requests": [exact_request()], "config": [{"requests": ["gpu"]}]}},
            "spec.devices.config[0].opaque",
            "Required value",
            id="config without opaque",
        ),
    ],
)
async def test_claim_validation(
    sim: RunningApiServer, spec: dict[str, Any], field: str, message: str
) -> None:
    body = resource_claim("bad")
    body["spec"] = spec
    code, status = await http_json(sim.url, "POST", CLAIMS, body)
    assert code == 422
    assert (field, message) in causes(status)
    assert status["message"].startswith('ResourceClaim.resource.k8s.io "bad" is invalid: ')


async def test_claim_and_template_specs_are_immutable(sim: RunningApiServer) -> None:
    created = await create(sim, CLAIMS, resource_claim("c1"))
    # The manifest as first sent (no defaults) is the same spec once defaulted.
    again = {**resource_claim("c1"), "metadata": created["metadata"]}
    code, _ = await http_json(sim.url, "PUT", f"{CLAIMS}/c1", again)
    assert code == 200
    changed = {**created, "spec": resource_claim("x", exact_request(count=2))["spec"]}
    code, status = await http_json(sim.url, "PUT", f"{CLAIMS}/c1", changed)
    assert code == 422
    [(field, message)] = causes(status)
    assert field == "spec"
    assert message.endswith(": field is immutable")
    template = await create(sim, TEMPLATES, claim_template("t1", labels={"app": "x"}))
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    changed = {**template, "spec": {**template["spec"], "metadata": {"labels": {"app": "y"}}}}
    code, status = await http_json(sim.url, "PUT", f"{TEMPLATES}/t1", changed)
    assert code == 422
    assert causes(status)[0][0] == "spec"
    bad = claim_template("t2", labels={"app": "not valid!"})
    code, status = await http_json(sim.url, "POST", TEMPLATES, bad)
    assert code == 422
    assert causes(status)[0][0] == "spec.metadata.labels"


def reserved(name: str = "p1", uid: str = "uid-1") -> dict[str, Any]:
    return {"resource": "pods", "name": name, "uid": uid}


def allocated(share: str | None = None) -> dict[str, Any]:
    result = allocation_result(
        "gpu", "gpu-0", pool="node-a", share_id=share, consumed={"memory": "4096Mi", "cores": 0}
    )
    return allocation([result], node="node-a")


async def put_status(
    sim: RunningApiServer, claim: dict[str, Any], status: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    return await http_json(
        sim.url, "PUT", f"{CLAIMS}/{claim['metadata']['name']}/status", {**claim, "status": status}
    )


async def test_status_subresource_rules(sim: RunningApiServer) -> None:
    claim = await create(sim, CLAIMS, resource_claim("c1"))
    # status through the main resource is ignored
    code, same = await http_json(
        sim.url, "PUT", f"{CLAIMS}/c1", {**claim, "status": {"allocation": allocated()}}
    )
    assert code == 200
    assert same["status"] == {}
    code, status = await put_status(sim, claim, {"reservedFor": [reserved()]})
    assert code == 422
    assert causes(status) == [
        ("status.reservedFor", "Forbidden: may not be specified when `allocated` is not set")
    ]
    share = str(uuid.uuid4())
    code, written = await put_status(
        sim, same, {"allocation": allocated(share), "reservedFor": [reserved()]}
    )
    assert code == 200, written
    result = written["status"]["allocation"]["devices"]["results"][0]
    assert result["consumedCapacity"] == {"memory": "4Gi", "cores": "0"}
    code, status = await put_status(sim, written, {"allocation": allocated(str(uuid.uuid4()))})
    assert code == 422
    assert causes(status)[0][0] == "status.allocation"
    assert causes(status)[0][1].endswith(": field is immutable")
    twice = {**written["status"], "reservedFor": [reserved(), reserved("p2")]}
    code, status = await put_status(sim, written, twice)
    assert ("status.reservedFor[1]", 'Duplicate value: "uid-1"') in causes(status)
    stranger = {
        **written["status"],
        "devices": [{"driver": "gpu.hami.io", "pool": "node-a", "device": "gpu-1"}],
    }
    code, status = await put_status(sim, written, stranger)
    assert (
        "status.devices[0]",
        'Invalid value: "gpu.hami.io/node-a/gpu-1": must be an allocated device in the claim',
    ) in causes(status)
    bad_share = allocation([allocation_result("gpu", "gpu-0", pool="node-a", share_id="X")])
    other = await create(sim, CLAIMS, resource_claim("c2"))
    code, status = await put_status(sim, other, {"allocation": bad_share})
    assert (
        "status.allocation.devices.results[0].shareID",
        'Invalid value: "X": error validating uid: invalid UUID length: 1',
    ) in causes(status)


async def test_status_write_keeps_spec_and_metadata(sim: RunningApiServer) -> None:
    claim = await create(sim, CLAIMS, resource_claim("c1"))
    meta = {**claim["metadata"], "labels": {"sneaky": "yes"}, "finalizers": ["x.io/f"]}
    body = {**claim, "metadata": meta, "spec": resource_claim("c", exact_request(count=3))["spec"]}
    code, written = await put_status(sim, body, {"allocation": allocated()})
    assert code == 200
    assert written["spec"] == claim["spec"]
    assert "labels" not in written["metadata"]
    assert "finalizers" not in written["metadata"]
    assert written["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"]


async def test_unreserve_by_strategic_merge_patch(sim: RunningApiServer) -> None:
    claim = await create(sim, CLAIMS, resource_claim("c1"))
    refs = [reserved("p1", "uid-1"), reserved("p2", "uid-2")]
    code, _ = await put_status(sim, claim, {"allocation": allocated(), "reservedFor": refs})
    assert code == 200
    patch = {"status": {"reservedFor": [{"$patch": "delete", "uid": "uid-1"}]}}
    code, patched = await http_json(
        sim.url, "PATCH", f"{CLAIMS}/c1/status", patch, content_type=STRATEGIC
    )
    assert code == 200, patched
    assert patched["status"]["reservedFor"] == [reserved("p2", "uid-2")]
    assert patched["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def pod(name: str, claims: list[dict[str, Any]], refs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": claims,
            "containers": [{"name": "c", "image": "img:1", "resources": {"claims": refs}}],
        },
    }


@pytest.mark.parametrize(
    ("claims", "refs", "field", "message"),
    [
        pytest.param(
            [pod_claim("gpu", claim="a", template="t")],
            [],
            "spec.resourceClaims[0]",
            "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified",
            id="claim and template",
        ),
        pytest.param(
            [pod_claim("gpu")],
            [],
            "spec.resourceClaims[0]",
            "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
            id="neither",
        ),
        pytest.param(
            [pod_claim("gpu", claim="a"), pod_claim("gpu", claim="b")],
            [],
            "spec.resourceClaims[1].name",
            'Duplicate value: "gpu"',
            id="names repeat",
        ),
        pytest.param(
            [pod_claim("gpu", claim="a")],
            [container_claim("nic")],
            "spec.containers[0].resources.claims[0]",
            'Not found: "nic": must be one of the names in pod.spec.resourceClaims: gpu',
            id="container names an unknown claim",
        ),
        pytest.param(
            [],
            [container_claim("gpu")],
            "spec.containers[0].resources.claims[0]",
            'Not found: "gpu": must be one of the names in pod.spec.resourceClaims which is empty',
            id="container claim without pod claims",
        ),
        pytest.param(
            [pod_claim("gpu", claim="a")],
            [container_claim("gpu", "r1"), container_claim("gpu", "r1")],
            "spec.containers[0].resources.claims[1]",
            'Duplicate value: "gpu/r1"',
            id="same request twice",
        ),
    ],
)
async def test_pod_claim_fields(
    sim: RunningApiServer,
    claims: list[dict[str, Any]],
    refs: list[dict[str, Any]],
    field: str,
    message: str,
) -> None:
    code, status = await http_json(sim.url, "POST", PODS, pod("p", claims, refs))
    assert code == 422
    found = dict(causes(status))
    assert found[field].endswith(message), found


async def test_pod_claim_fields_accepted_and_immutable(sim: RunningApiServer) -> None:
    body = pod("p", [pod_claim("gpu", template="t1")], [container_claim("gpu", "gpu")])
    created = await create(sim, PODS, body)
    assert created["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "t1"}]
    changed = {
        **created,
        "spec": {**created["spec"], "resourceClaims": [pod_claim("gpu", claim="x")]},
    }
    code, _ = await http_json(sim.url, "PUT", f"{PODS}/p", changed)
    assert code == 422
    wrong = {
        "status": {"resourceClaimStatuses": [{"name": "nic", "resourceClaimName": "p-nic-abcde"}]}
    }
    code, status = await http_json(
        sim.url, "PATCH", f"{PODS}/p/status", wrong, content_type=STRATEGIC
    )
    assert code == 422
    assert causes(status) == [
        (
            "status.resourceClaimStatuses[0].name",
            'Invalid value: "nic": must match the name of an entry in `spec.resourceClaims`',
        )
    ]
