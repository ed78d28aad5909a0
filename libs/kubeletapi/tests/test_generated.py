"""The committed kubelet bindings are current and match the kubelet's wire contracts (device
plugin v1beta1, pod resources v1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor

from hami_kubelet_api import constants, generate
from hami_kubelet_api.v1beta1 import api_pb2


def test_committed_bindings_are_byte_identical_to_fresh_generation() -> None:
    fresh = generate.generate()
    assert sorted(fresh) == sorted(generate.GENERATED_FILES)
    assert generate.stale_files(fresh, generate.package_dir()) == []


def test_check_mode_reports_current_files() -> None:
    assert generate.main(["--check"]) == 0


def test_stale_files_detects_a_difference(tmp_path: Path) -> None:
    fresh = generate.generate()
    for name in generate.GENERATED_FILES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
    generate.write_files(fresh, tmp_path)
    assert generate.stale_files(fresh, tmp_path) == []
    (tmp_path / "v1beta1/api_pb2.py").write_bytes(b"# edited\n")
    (tmp_path / "podresources/v1/api_pb2_grpc.pyi").unlink()
    assert generate.stale_files(fresh, tmp_path) == [
        "v1beta1/api_pb2.py",
        "podresources/v1/api_pb2_grpc.pyi",
    ]


@pytest.mark.parametrize("package", ["v1beta1", "podresources.v1"])
def test_generated_grpc_module_imports_its_messages_as_a_package(package: str) -> None:
    source = (generate.package_dir() / package.replace(".", "/") / "api_pb2_grpc.py").read_text()
    assert f"from hami_kubelet_api.{package} import api_pb2 as" in source
    assert "\nimport api_pb2" not in source


_T = FieldDescriptor
# (message, field, type, number, repeated) from the kubelet's v1beta1 API.
FIELDS = [
    ("DevicePluginOptions", "pre_start_required", _T.TYPE_BOOL, 1, False),
    ("DevicePluginOptions", "get_preferred_allocation_available", _T.TYPE_BOOL, 2, False),
    ("RegisterRequest", "version", _T.TYPE_STRING, 1, False),
    ("RegisterRequest", "endpoint", _T.TYPE_STRING, 2, False),
    ("RegisterRequest", "resource_name", _T.TYPE_STRING, 3, False),
    ("RegisterRequest", "options", _T.TYPE_MESSAGE, 4, False),
    ("ListAndWatchResponse", "devices", _T.TYPE_MESSAGE, 1, True),
    ("TopologyInfo", "nodes", _T.TYPE_MESSAGE, 1, True),
    ("NUMANode", "ID", _T.TYPE_INT64, 1, False),
    ("Device", "ID", _T.TYPE_STRING, 1, False),
    ("Device", "health", _T.TYPE_STRING, 2, False),
    ("Device", "topology", _T.TYPE_MESSAGE, 3, False),
    ("PreStartContainerRequest", "devices_ids", _T.TYPE_STRING, 1, True),
    ("PreferredAllocationRequest", "container_requests", _T.TYPE_MESSAGE, 1, True),
    ("ContainerPreferredAllocationRequest", "available_deviceIDs", _T.TYPE_STRING, 1, True),
    ("ContainerPreferredAllocationRequest", "must_include_deviceIDs", _T.TYPE_STRING, 2, True),
    ("ContainerPreferredAllocationRequest", "allocation_size", _T.TYPE_INT32, 3, False),
    ("PreferredAllocationResponse", "container_responses", _T.TYPE_MESSAGE, 1, True),
    ("ContainerPreferredAllocationResponse", "deviceIDs", _T.TYPE_STRING, 1, True),
    ("AllocateRequest", "container_requests", _T.TYPE_MESSAGE, 1, True),
    ("ContainerAllocateRequest", "devices_ids", _T.TYPE_STRING, 1, True),
    ("CDIDevice", "name", _T.TYPE_STRING, 1, False),
    ("AllocateResponse", "container_responses", _T.TYPE_MESSAGE, 1, True),
    ("ContainerAllocateResponse", "envs", _T.TYPE_MESSAGE, 1, True),
    ("ContainerAllocateResponse", "mounts", _T.TYPE_MESSAGE, 2, True),
    ("ContainerAllocateResponse", "devices", _T.TYPE_MESSAGE, 3, True),
    ("ContainerAllocateResponse", "annotations", _T.TYPE_MESSAGE, 4, True),
    ("ContainerAllocateResponse", "cdi_devices", _T.TYPE_MESSAGE, 5, True),
    ("Mount", "container_path", _T.TYPE_STRING, 1, False),
    ("Mount", "host_path", _T.TYPE_STRING, 2, False),
    ("Mount", "read_only", _T.TYPE_BOOL, 3, False),
    ("DeviceSpec", "container_path", _T.TYPE_STRING, 1, False),
    ("DeviceSpec", "host_path", _T.TYPE_STRING, 2, False),
    ("DeviceSpec", "permissions", _T.TYPE_STRING, 3, False),
]


@pytest.mark.parametrize(("message", "field", "kind", "number", "repeated"), FIELDS)
def test_field_matches_contract(
    message: str, field: str, kind: int, number: int, repeated: bool
) -> None:
    descriptor = api_pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[field]
    assert descriptor.number == number
    assert descriptor.type == kind
    assert descriptor.is_repeated == repeated


def test_every_message_field_is_in_the_table() -> None:
    listed = {(m, f) for m, f, *_ in FIELDS}
    actual = {
        (name, field.name)
        for name, message in api_pb2.DESCRIPTOR.message_types_by_name.items()
        for field in message.fields
    }
    assert actual == listed
    empty = {"Empty", "PreStartContainerResponse"}
    assert empty | {m for m, _ in listed} == set(api_pb2.DESCRIPTOR.message_types_by_name)


def test_map_fields_are_string_maps() -> None:
    response = api_pb2.ContainerAllocateResponse(envs={"A": "1"}, annotations={"k": "v"})
    decoded = api_pb2.ContainerAllocateResponse.FromString(response.SerializeToString())
    assert dict(decoded.envs) == {"A": "1"}
    assert dict(decoded.annotations) == {"k": "v"}


METHODS = [
    ("Registration", "Register", "RegisterRequest", "Empty", False),
    ("DevicePlugin", "GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
    ("DevicePlugin", "ListAndWatch", "Empty", "ListAndWatchResponse", True),
    (
        "DevicePlugin",
        "GetPreferredAllocation",
        "PreferredAllocationRequest",
        "PreferredAllocationResponse",
        False,
    ),
    ("DevicePlugin", "Allocate", "AllocateRequest", "AllocateResponse", False),
    (
        "DevicePlugin",
        "PreStartContainer",
        "PreStartContainerRequest",
        "PreStartContainerResponse",
        False,
    ),
]


@pytest.mark.parametrize(("service", "method", "request_type", "response_type", "stream"), METHODS)
def test_method_matches_contract(
    service: str, method: str, request_type: str, response_type: str, stream: bool
) -> None:
    descriptor = api_pb2.DESCRIPTOR.services_by_name[service]
    assert descriptor.full_name == f"v1beta1.{service}"
    rpc = descriptor.methods_by_name[method]
    assert rpc.input_type.name == request_type
    assert rpc.output_type.name == response_type
    assert rpc.server_streaming == stream
    assert not rpc.client_streaming


def test_constants_match_kubelet() -> None:
    assert constants.VERSION == "v1beta1"
    assert constants.SUPPORTED_VERSIONS == ("v1beta1",)
    assert constants.DEVICE_PLUGIN_PATH == "/var/lib/kubelet/device-plugins/"
    assert constants.KUBELET_SOCKET == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert constants.HEALTHY == "Healthy"
    assert constants.UNHEALTHY == "Unhealthy"
    assert constants.KUBELET_PRE_START_CONTAINER_RPC_TIMEOUT_SECONDS == 30
    assert (
        api_pb2.DESCRIPTOR.services_by_name["Registration"].full_name
        == constants.REGISTRATION_SERVICE
    )
    assert (
        api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].full_name
        == constants.DEVICE_PLUGIN_SERVICE
    )


# (message, field, type, number, repeated) from the kubelet's pod-resources v1 API.
PODRESOURCES_FIELDS = [
    ("ListPodResourcesResponse", "pod_resources", _T.TYPE_MESSAGE, 1, True),
    ("PodResources", "name", _T.TYPE_STRING, 1, False),
    ("PodResources", "namespace", _T.TYPE_STRING, 2, False),
    ("PodResources", "containers", _T.TYPE_MESSAGE, 3, True),
    ("ContainerResources", "name", _T.TYPE_STRING, 1, False),
    ("ContainerResources", "devices", _T.TYPE_MESSAGE, 2, True),
    ("ContainerResources", "cpu_ids", _T.TYPE_INT64, 3, True),
    ("ContainerDevices", "resource_name", _T.TYPE_STRING, 1, False),
    ("ContainerDevices", "device_ids", _T.TYPE_STRING, 2, True),
    ("ContainerDevices", "topology", _T.TYPE_MESSAGE, 3, False),
    ("TopologyInfo", "nodes", _T.TYPE_MESSAGE, 1, True),
    ("NUMANode", "ID", _T.TYPE_INT64, 1, False),
    ("AllocatableResourcesResponse", "devices", _T.TYPE_MESSAGE, 1, True),
    ("AllocatableResourcesResponse", "cpu_ids", _T.TYPE_INT64, 2, True),
    ("GetPodResourcesRequest", "name", _T.TYPE_STRING, 1, False),
    ("GetPodResourcesRequest", "namespace", _T.TYPE_STRING, 2, False),
    ("GetPodResourcesResponse", "pod_resources", _T.TYPE_MESSAGE, 1, False),
]


@pytest.mark.parametrize(("message", "field", "kind", "number", "repeated"), PODRESOURCES_FIELDS)
def test_pod_resources_field_matches_contract(
    message: str, field: str, kind: int, number: int, repeated: bool
) -> None:
    from hami_kubelet_api.podresources.v1 import api_pb2 as podresources

    descriptor = podresources.DESCRIPTOR.message_types_by_name[message].fields_by_name[field]
    assert descriptor.type == kind
    assert descriptor.number == number
    assert descriptor.is_repeated == repeated


def test_pod_resources_service_is_the_kubelets() -> None:
    from hami_kubelet_api.podresources.v1 import api_pb2 as podresources

    service = podresources.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name for m in service.methods} == {"List", "GetAllocatableResources", "Get"}
    assert constants.POD_RESOURCES_SOCKET == "/var/lib/kubelet/pod-resources/kubelet.sock"
