"""The plugin-registration v1 and DRA v1 / v1beta1 bindings match the kubelet's wire contracts
(field numbers, types, services), and work end to end over a unix socket with grpc.aio."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import grpc
import pytest
from google.protobuf.descriptor import FieldDescriptor

from hami_kubelet_api import constants
from hami_kubelet_api.dra.v1 import api_pb2 as dra_v1
from hami_kubelet_api.dra.v1 import api_pb2_grpc as dra_v1_grpc
from hami_kubelet_api.dra.v1beta1 import api_pb2 as dra_v1beta1
from hami_kubelet_api.pluginregistration.v1 import api_pb2 as registration
from hami_kubelet_api.pluginregistration.v1 import api_pb2_grpc as registration_grpc

_T = FieldDescriptor

REGISTRATION_FIELDS = [
    ("PluginInfo", "type", _T.TYPE_STRING, 1, False),
    ("PluginInfo", "name", _T.TYPE_STRING, 2, False),
    ("PluginInfo", "endpoint", _T.TYPE_STRING, 3, False),
    ("PluginInfo", "supported_versions", _T.TYPE_STRING, 4, True),
    ("RegistrationStatus", "plugin_registered", _T.TYPE_BOOL, 1, False),
    ("RegistrationStatus", "error", _T.TYPE_STRING, 2, False),
]

# (message, field, type, number, repeated) of the kubelet's DRA v1beta1 API; v1 adds share_id.
DRA_FIELDS = [
    ("NodePrepareResourcesRequest", "claims", _T.TYPE_MESSAGE, 1, True),
    ("NodePrepareResourcesResponse", "claims", _T.TYPE_MESSAGE, 1, True),
    ("NodePrepareResourceResponse", "devices", _T.TYPE_MESSAGE, 1, True),
    ("NodePrepareResourceResponse", "error", _T.TYPE_STRING, 2, False),
    ("Device", "request_names", _T.TYPE_STRING, 1, True),
    ("Device", "pool_name", _T.TYPE_STRING, 2, False),
    ("Device", "device_name", _T.TYPE_STRING, 3, False),
    ("Device", "cdi_device_ids", _T.TYPE_STRING, 4, True),
    ("NodeUnprepareResourcesRequest", "claims", _T.TYPE_MESSAGE, 1, True),
    ("NodeUnprepareResourcesResponse", "claims", _T.TYPE_MESSAGE, 1, True),
    ("NodeUnprepareResourceResponse", "error", _T.TYPE_STRING, 1, False),
    ("Claim", "namespace", _T.TYPE_STRING, 1, False),
    ("Claim", "uid", _T.TYPE_STRING, 2, False),
    ("Claim", "name", _T.TYPE_STRING, 3, False),
]
SHARE_ID = ("Device", "share_id", _T.TYPE_STRING, 5, False)


def _fields(module: ModuleType) -> set[tuple[str, str, int, int, bool]]:
    return {
        (name, field.name, field.type, field.number, field.is_repeated)
        for name, message in module.DESCRIPTOR.message_types_by_name.items()
        for field in message.fields
    }


def test_registration_fields_are_the_kubelets() -> None:
    assert _fields(registration) == set(REGISTRATION_FIELDS)
    assert set(registration.DESCRIPTOR.message_types_by_name) == {
        "PluginInfo",
        "RegistrationStatus",
        "RegistrationStatusResponse",
        "InfoRequest",
    }
    service = registration.DESCRIPTOR.services_by_name["Registration"]
    assert service.full_name == constants.PLUGIN_REGISTRATION_SERVICE
    assert {(m.name, m.input_type.name, m.output_type.name) for m in service.methods} == {
        ("GetInfo", "InfoRequest", "PluginInfo"),
        ("NotifyRegistrationStatus", "RegistrationStatus", "RegistrationStatusResponse"),
    }


@pytest.mark.parametrize(
    ("module", "extra", "service_name"),
    [
        (dra_v1, {SHARE_ID}, constants.DRA_V1_SERVICE),
        (dra_v1beta1, set(), constants.DRA_V1BETA1_SERVICE),
    ],
)
def test_dra_fields_and_service_are_the_kubelets(
    module: ModuleType, extra: set[tuple[str, str, int, int, bool]], service_name: str
) -> None:
    assert _fields(module) == set(DRA_FIELDS) | extra
    service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
    assert service.full_name == service_name
    assert {(m.name, m.input_type.name, m.output_type.name) for m in service.methods} == {
        ("NodePrepareResources", "NodePrepareResourcesRequest", "NodePrepareResourcesResponse"),
        (
            "NodeUnprepareResources",
            "NodeUnprepareResourcesRequest",
            "NodeUnprepareResourcesResponse",
        ),
    }
    assert not any(m.server_streaming or m.client_streaming for m in service.methods)


def test_share_id_is_optional_and_the_response_maps_by_claim_uid() -> None:
    assert not dra_v1.Device().HasField("share_id")
    response = dra_v1.NodePrepareResourcesResponse()
    response.claims["uid-1"].devices.add(device_name="gpu-0", share_id="")
    decoded = dra_v1.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    assert decoded.claims["uid-1"].devices[0].HasField("share_id")
    # v1beta1 reads a v1 message, dropping the field it does not know (the wire is shared).
    old = dra_v1beta1.NodePrepareResourcesResponse.FromString(response.SerializeToString())
    assert old.claims["uid-1"].devices[0].device_name == "gpu-0"


def test_dra_constants() -> None:
    assert constants.KUBELET_DIR == "/var/lib/kubelet"
    assert constants.PLUGINS_REGISTRY_DIR_NAME == "plugins_registry"
    assert constants.PLUGINS_DIR_NAME == "plugins"
    assert constants.DRA_PLUGIN_TYPE == "DRAPlugin"
    assert constants.DRA_V1_VERSION == "v1.DRAPlugin"
    assert constants.DRA_V1BETA1_VERSION == "v1beta1.DRAPlugin"


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="dra-") as path:
        yield Path(path)


class _Registration(registration_grpc.RegistrationServicer):
    async def GetInfo(
        self, request: registration.InfoRequest, context: object
    ) -> registration.PluginInfo:
        return registration.PluginInfo(
            type=constants.DRA_PLUGIN_TYPE, name="gpu.example", endpoint="/x.sock"
        )

    async def NotifyRegistrationStatus(
        self, request: registration.RegistrationStatus, context: object
    ) -> registration.RegistrationStatusResponse:
        return registration.RegistrationStatusResponse()


class _Dra(dra_v1_grpc.DRAPluginServicer):
    async def NodePrepareResources(
        self, request: dra_v1.NodePrepareResourcesRequest, context: object
    ) -> dra_v1.NodePrepareResourcesResponse:
        response = dra_v1.NodePrepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].devices.add(device_name=claim.name)
        return response

    async def NodeUnprepareResources(
        self, request: dra_v1.NodeUnprepareResourcesRequest, context: object
    ) -> dra_v1.NodeUnprepareResourcesResponse:
        return dra_v1.NodeUnprepareResourcesResponse()


async def test_both_services_answer_over_a_unix_socket(socket_dir: Path) -> None:
    address = f"unix:{socket_dir / 'p.sock'}"
    server = grpc.aio.server()
    registration_grpc.add_RegistrationServicer_to_server(_Registration(), server)
    dra_v1_grpc.add_DRAPluginServicer_to_server(_Dra(), server)
    server.add_insecure_port(address)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            info = await registration_grpc.RegistrationStub(channel).GetInfo(
                registration.InfoRequest()
            )
            assert info.type == "DRAPlugin"
            answer = await dra_v1_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_v1.NodePrepareResourcesRequest(
                    claims=[dra_v1.Claim(namespace="ns", uid="u1", name="c")]
                )
            )
            assert answer.claims["u1"].devices[0].device_name == "c"
    finally:
        await server.stop(None)
