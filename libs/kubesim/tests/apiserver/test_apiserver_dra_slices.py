"""ResourceSlices and DeviceClasses (``resource.k8s.io/v1``) over HTTP: the stored shape
(generation, canonical quantities), discovery, field selectors, kubernetes-asyncio's typed
client, and kube-apiserver's validation messages for slices, devices and request policies."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from hami_kubesim.dra_objects import (
    capacity,
    device,
    device_class,
    gpu_device,
    resource_slice,
)
from hami_kubesim.testing import RunningApiServer, http_json

GROUP = "/apis/resource.k8s.io/v1"
SLICES = f"{GROUP}/resourceslices"
CLASSES = f"{GROUP}/deviceclasses"


async def create(sim: RunningApiServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    code, created = await http_json(sim.url, "POST", path, body)
    assert code == 201, created
    return created


async def refused(sim: RunningApiServer, path: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """The (field, message) causes of a 422."""
    code, status = await http_json(sim.url, "POST", path, body)
    assert code == 422, status
    return [(c["field"], c["message"]) for c in status["details"]["causes"]]


async def test_discovery_lists_the_four_kinds(sim: RunningApiServer) -> None:
    code, listing = await http_json(sim.url, "GET", GROUP)
    assert code == 200
    served = {r["name"]: r["namespaced"] for r in listing["resources"]}
    assert served == {
        "resourceslices": False,
        "deviceclasses": False,
        "resourceclaims": True,
        "resourceclaims/status": True,
        "resourceclaimtemplates": True,
    }


async def test_slice_stored_with_generation_and_canonical_quantities(
    sim: RunningApiServer,
) -> None:
    body = resource_slice("node-a", [gpu_device(0, memory="16384Mi")])
    created = await create(sim, SLICES, body)
    assert created["metadata"]["generation"] == 1
    memory = created["spec"]["devices"][0]["capacity"]["memory"]
    assert memory == {
        "value": "16Gi",
        "requestPolicy": {
            "default": "16Gi",
            "validRange": {"min": "1Mi", "max": "16Gi", "step": "1Mi"},
        },
    }
    name = created["metadata"]["name"]
    same = {**created, "spec": {**created["spec"]}}
    code, unchanged = await http_json(sim.url, "PUT", f"{SLICES}/{name}", same)
    assert code == 200
    assert unchanged["metadata"]["generation"] == 1
    changed = {**created, "spec": {**created["spec"], "devices": [gpu_device(0), gpu_device(1)]}}
    code, updated = await http_json(sim.url, "PUT", f"{SLICES}/{name}", changed)
    assert code == 200
    assert updated["metadata"]["generation"] == 2


async def test_typed_client_and_field_selectors(sim: RunningApiServer) -> None:
    api: Any = client.ResourceV1Api(sim.api_client())  # takes plain dicts as bodies too
    await api.create_resource_slice(resource_slice("node-a", [gpu_device(0)]))
    await api.create_resource_slice(resource_slice("node-b", [gpu_device(0)]))
    other = resource_slice("node-b", [device("nic-0")], driver="net.example.com", name="b-net")
    await api.create_resource_slice(other)
    on_b = await api.list_resource_slice(field_selector="spec.nodeName=node-b")
    assert sorted(s.metadata.name for s in on_b.items) == ["b-net", "node-b-gpu-hami-io"]
    ours = await api.list_resource_slice(field_selector="spec.driver=gpu.hami.io")
    assert len(ours.items) == 2
    read = await api.read_resource_slice("node-a-gpu-hami-io")
    assert read.spec.devices[0].allow_multiple_allocations is True
    assert read.spec.devices[0].capacity["cores"].request_policy.default == "0"


async def test_slice_immutable_fields(sim: RunningApiServer) -> None:
    created = await create(sim, SLICES, resource_slice("node-a", [gpu_device(0)]))
    moved = {**created, "spec": {**created["spec"], "nodeName": "node-b"}}
    code, status = await http_json(sim.url, "PUT", f"{SLICES}/{created['metadata']['name']}", moved)
    assert code == 422
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": 'Invalid value: "node-b": field is immutable',
            "field": "spec.nodeName",
        }
    ]


SCOPE = (
    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
)


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        pytest.param(
            {"nodeName": None},
            "spec",
            f"Required value: {SCOPE}",
            id="no scope",
        ),
        pytest.param(
            {"allNodes": True},
            "spec",
            f'Invalid value: "{{`nodeName`, `allNodes`}}": {SCOPE}, but multiple fields are set',
            id="two scopes",
        ),
        pytest.param(
            {"driver": "GPU_driver"},
            "spec.driver",
            'Invalid value: "GPU_driver": a lowercase RFC 1123 subdomain must consist of lower '
            "case alphanumeric characters, '-' or '.', and must start and end with an "
            "alphanumeric character (e.g. 'example.com', regex used for validation is "
            r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            id="driver not a subdomain",
        ),
        pytest.param(
            {"pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 0}},
            "spec.pool.resourceSliceCount",
            "Invalid value: 0: must be greater than zero",
            id="no slices in pool",
        ),
        pytest.param(
            {"devices": [device(f"gpu-{i}") for i in range(129)]},
            "spec.devices",
            "Too many: 129: must have at most 128 items",
            id="more than 128 devices",
        ),
        pytest.param(
            {"devices": [device("gpu-0"), device("gpu-0")]},
            "spec.devices[1]",
            'Duplicate value: "gpu-0"',
            id="device names repeat",
        ),
        pytest.param(
            {"devices": [device("GPU0")]},
            "spec.devices[0].name",
            'Invalid value: "GPU0": a lowercase RFC 1123 label must consist of lower case '
            "alphanumeric characters or '-', and must start and end with an alphanumeric "
            "character (e.g. 'my-name',  or '123-abc', regex used for validation is "
            "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
            id="device name not a label",
        ),
        pytest.param(
            {"devices": [device("gpu-0", attributes={"model": "x" * 65})]},
            "spec.devices[0].attributes[model].string",
            "Too long: may not be more than 64 bytes",
            id="attribute string too long",
        ),
        pytest.param(
            {"devices": [device("gpu-0", attributes={"driverVersion": {"version": "550"}})]},
            "spec.devices[0].attributes[driverVersion].version",
            'Invalid value: "550": must be a string compatible with semver.org spec 2.0.0',
            id="version not semver",
        ),
        pytest.param(
            {"devices": [device("gpu-0", attributes={"my-attr": 1})]},
            "spec.devices[0].attributes",
            'Invalid value: "my-attr": a valid C identifier must start with alphabetic '
            "character or '_', followed by a string of alphanumeric characters or '_' (e.g. "
            "'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is "
            "'[A-Za-z_][A-Za-z0-9_]*')",
            id="attribute name not a C identifier",
        ),
        pytest.param(
            {"devices": [device("gpu-0", attributes={f"a{i}": i for i in range(33)})]},
            "spec.devices[0]",
            "Invalid value: 33: the total number of attributes and capacities must not exceed 32",
            id="too many attributes",
        ),
    ],
)
async def test_slice_validation(
    sim: RunningApiServer, spec: dict[str, Any], field: str, message: str
) -> None:
    body = resource_slice("node-a", [gpu_device(0)])
    body["spec"].update(spec)
    if body["spec"].get("nodeName") is None:
        body["spec"].pop("nodeName", None)
    if spec.get("allNodes"):
        body["spec"]["nodeName"] = "node-a"
    assert (field, message) in await refused(sim, SLICES, body)


def shared(value: str, **policy: Any) -> dict[str, Any]:
    return device(
        "gpu-0", capacities={"memory": capacity(value, **policy)}, allow_multiple_allocations=True
    )


WHERE = "spec.devices[0].capacity[memory].requestPolicy"


@pytest.mark.parametrize(
    ("dev", "field", "message"),
    [
        pytest.param(
            device("gpu-0", capacities={"memory": capacity("16Gi", default="1Gi")}),
            WHERE,
            "Forbidden: allowMultipleAllocations must be true",
            id="policy on an exclusive device",
        ),
        pytest.param(
            shared("16Gi", default="1Gi", valid_values=["1Gi"], valid_range=("1Gi", None, None)),
            WHERE,
            'Forbidden: exactly one policy can be specified, cannot specify "validValues" and '
            '"validRange" at the same time',
            id="both policies",
        ),
        pytest.param(
            shared("16Gi", valid_values=["1Gi", "2Gi"]),
            f"{WHERE}.default",
            "Required value: required when validValues is defined",
            id="values without default",
        ),
        pytest.param(
            shared("16Gi", valid_range=("1Gi", None, None)),
            f"{WHERE}.default",
            "Required value: required when validRange is defined",
            id="range without default",
        ),
        pytest.param(
            shared("16Gi", default="1Gi", valid_values=["2Gi", "1Gi"]),
            f"{WHERE}.validValues[1]",
            'Invalid value: "1Gi": values must be sorted in ascending order',
            id="values unsorted",
        ),
        pytest.param(
            shared("16Gi", default="1Gi", valid_values=["1Gi", "32Gi"]),
            f"{WHERE}.validValues[1]",
            'Invalid value: "32Gi": option is larger than capacity value: 16Gi',
            id="value above capacity",
        ),
        pytest.param(
            shared("16Gi", default="3Gi", valid_values=["1Gi", "2Gi"]),
            f"{WHERE}.validValues",
            'Invalid value: "3Gi": default value is not valid according to the requestPolicy',
            id="default not a value",
        ),
        pytest.param(
            shared("16Gi", default="1Gi", valid_range=(None, "8Gi", None)),
            f"{WHERE}.validRange.min",
            "Required value: required when validRange is defined",
            id="range without min",
        ),
        pytest.param(
            shared("16Gi", default="8Gi", valid_range=("1Gi", "4Gi", None)),
            f"{WHERE}.validRange.default",
            'Invalid value: "8Gi": default is more than max: 4Gi',
            id="default above max",
        ),
        pytest.param(
            shared("16Gi", default="16Gi", valid_range=("1Gi", "32Gi", None)),
            f"{WHERE}.validRange.max",
            'Invalid value: "32Gi": max is larger than capacity value: 16Gi',
            id="max above capacity",
        ),
        pytest.param(
            shared("16Gi", default="1536Mi", valid_range=("1Gi", None, "1Gi")),
            f"{WHERE}.validRange.step",
            'Invalid value: "1536Mi": value is not a multiple of a given step (1Gi) from (1Gi)',
            id="default off the step grid",
        ),
        pytest.param(
            shared("1Gi", default="1Gi", valid_range=("1Gi", None, "1Gi")),
            f"{WHERE}.validRange.step",
            'Invalid value: "1Gi": one step 2Gi is larger than capacity value: 1Gi',
            id="one step above capacity",
        ),
    ],
)
async def test_request_policy_validation(
    sim: RunningApiServer, dev: dict[str, Any], field: str, message: str
) -> None:
    assert (field, message) in await refused(sim, SLICES, resource_slice("node-a", [dev]))


async def test_device_class_generation_and_validation(sim: RunningApiServer) -> None:
    created = await create(sim, CLASSES, device_class())
    assert created["metadata"]["generation"] == 1
    changed = {**created, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    code, updated = await http_json(sim.url, "PUT", f"{CLASSES}/gpu.hami.io", changed)
    assert code == 200
    assert updated["metadata"]["generation"] == 2
    long = device_class("long", selectors=["true || " * 1300 + "true"])
    assert ("spec.selectors[0].cel.expression", "Too long: may not be more than 10240 bytes") in (
        await refused(sim, CLASSES, long)
    )
    opaque = device_class("cfg", config=[{"opaque": {"driver": "gpu.hami.io", "parameters": [1]}}])
    assert (
        "spec.config[0].opaque.parameters",
        'Invalid value: "<value omitted>": must be a valid JSON object',
    ) in await refused(sim, CLASSES, opaque)
