"""The DRA mode through real sockets against kubesim: the kubelet's registration handshake on
the registration socket, the ResourceSlice it publishes (and re-publishes on health changes),
the device-plugin path withdrawn from the node, and NodePrepareResources /
NodeUnprepareResources (v1 and v1beta1) with their CDI spec files, idempotent across a plugin
restart, and refusing bad claims one by one."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from hami_deviceplugin.allocation.entries import AllocatingContainer
from hami_deviceplugin.app import allocate_options
from hami_deviceplugin.dra.app import RunningDra, serving_dra
from hami_deviceplugin.gpu.plan import HookLayout, container_grant
from hami_deviceplugin.settings import Settings
from hami_kubelet_api.dra.v1 import api_pb2 as v1
from hami_kubelet_api.dra.v1 import api_pb2_grpc as v1_grpc
from hami_kubelet_api.dra.v1beta1 import api_pb2 as v1beta1
from hami_kubelet_api.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from hami_kubelet_api.pluginregistration.v1 import api_pb2 as registration
from hami_kubelet_api.pluginregistration.v1 import api_pb2_grpc as registration_grpc
from hami_kubesim import dra_objects as dra
from hami_kubesim.testing import RunningApiServer
from hami_protocol.config.node import NodeSettings
from hami_protocol.keys import NVIDIA_HANDSHAKE, NVIDIA_REGISTER
from hami_protocol.pod.devices import ContainerDevice

if TYPE_CHECKING:  # the async stub type exists only in the typed stubs
    from hami_kubelet_api.dra.v1.api_pb2_grpc import DRAPluginAsyncStub

from ..helpers import NODE, UUIDS, annotations_of, eventually, gpu, plugin_settings, write_devices


@pytest.fixture
def settings(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path, tmp_path: Path
) -> Settings:
    return plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=devices,
        host_root=host_root,
        node=NodeSettings(device_split_count=4),
        mode="dra",
        kubelet_dir=plugin_dir,
        cdi_dir=tmp_path / "cdi",
        dra_state_dir_path=tmp_path / "state",
        slice_resync_interval_s=0.2,
    )


def _sockets_in(directory: Path) -> list[Path]:
    return list(directory.glob("*.sock"))


def _slices(sim: RunningApiServer) -> list[dict[str, Any]]:
    return [
        s
        for s in sim.server.list("resourceslices")
        if s["spec"].get("nodeName") == NODE and s["spec"]["driver"] == "gpu.hami.io"
    ]


def _published(sim: RunningApiServer, generation: int, names: list[str]) -> bool:
    slices = _slices(sim)
    return (
        len(slices) == 1
        and slices[0]["spec"]["pool"]["generation"] == generation
        and [d["name"] for d in slices[0]["spec"]["devices"]] == names
    )


async def test_registration_slices_and_no_device_plugin(
    sim: RunningApiServer, settings: Settings, plugin_dir: Path, devices: Path
) -> None:
    stale = {NVIDIA_REGISTER: "[]", NVIDIA_HANDSHAKE: "Reported 2026-01-01 00:00:00"}
    await sim.server.patch("nodes", NODE, {"metadata": {"annotations": stale}}, patch_type="merge")
    async with serving_dra(settings) as running:
        address = f"unix:{running.sockets.registration_path}"
        assert running.sockets.registration_path == plugin_dir / "plugins_registry" / (
            "gpu.hami.io-reg.sock"
        )
        async with grpc.aio.insecure_channel(address) as channel:
            stub = registration_grpc.RegistrationStub(channel)
            info = await stub.GetInfo(registration.InfoRequest())
            assert (info.type, info.name) == ("DRAPlugin", "gpu.hami.io")
            assert info.endpoint == str(plugin_dir / "plugins" / "gpu.hami.io" / "dra.sock")
            assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
            assert not running.ready()
            await stub.NotifyRegistrationStatus(
                registration.RegistrationStatus(plugin_registered=True)
            )
            assert running.ready()
            with pytest.raises(grpc.aio.AioRpcError, match="kubelet says no"):
                await stub.NotifyRegistrationStatus(
                    registration.RegistrationStatus(
                        plugin_registered=False, error="kubelet says no"
                    )
                )
            assert not running.ready()

        await eventually(lambda: _published(sim, 1, ["gpu-0", "gpu-1"]), what="slice published")
        (published,) = _slices(sim)
        assert published["spec"]["pool"]["name"] == NODE
        owner = published["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Node", NODE)
        assert published["spec"]["devices"][0]["attributes"]["uuid"] == {"string": UUIDS[0]}

        # The extender must not count these GPUs: no register annotation, no device plugin.
        await eventually(
            lambda: (
                not {NVIDIA_REGISTER, NVIDIA_HANDSHAKE} & set(annotations_of(sim, "nodes", NODE))
            ),
            what="device-plugin annotations withdrawn",
        )
        assert not _sockets_in(plugin_dir)

        write_devices(devices, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1, healthy=False)])
        await eventually(lambda: _published(sim, 2, ["gpu-0"]), what="unhealthy GPU withdrawn")

        # The kubelet deletes a node's slices when it starts: they come back.
        await sim.server.delete("resourceslices", published["metadata"]["name"])
        await eventually(lambda: _published(sim, 1, ["gpu-0"]), what="slice published again")


# --- Prepare / Unprepare ------------------------------------------------------------------------
async def _pod_and_claim(
    sim: RunningApiServer,
    name: str,
    results: list[dict[str, Any]],
    *,
    reserve: bool = True,
) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = await sim.server.create(
        "pods",
        {
            "metadata": {"name": f"{name}-pod", "namespace": "default"},
            "spec": {
                "nodeName": NODE,
                "resourceClaims": [dra.pod_claim("gpus", claim=name)],
                "containers": [
                    {
                        "name": "main",
                        "image": "cuda",
                        "resources": {"claims": [dra.container_claim("gpus")]},
                    }
                ],
            },
        },
    )
    claim = await sim.server.create("resourceclaims", dra.resource_claim(name))
    claim["status"] = {
        "allocation": dra.allocation(results, node=NODE),
        "reservedFor": [dra.pod_reference(pod)] if reserve else [],
    }
    claim = await sim.server.update("resourceclaims", claim, subresource="status")
    return pod, claim


def _ref(claim: dict[str, Any], api: Any = v1) -> Any:
    meta = claim["metadata"]
    return api.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])


@asynccontextmanager
async def _dra_stub(running: RunningDra) -> AsyncIterator[DRAPluginAsyncStub]:
    async with grpc.aio.insecure_channel(f"unix:{running.sockets.dra_path}") as channel:
        yield v1_grpc.DRAPluginStub(channel)


async def _prepare(running: RunningDra, *claims: dict[str, Any]) -> v1.NodePrepareResourcesResponse:
    async with _dra_stub(running) as stub:
        request = v1.NodePrepareResourcesRequest(claims=[_ref(c) for c in claims])
        return await stub.NodePrepareResources(request)


async def _unprepare(running: RunningDra, *refs: Any) -> v1.NodeUnprepareResourcesResponse:
    async with _dra_stub(running) as stub:
        return await stub.NodeUnprepareResources(v1.NodeUnprepareResourcesRequest(claims=refs))


def _env(spec: dict[str, Any]) -> dict[str, str]:
    (device,) = spec["devices"]
    return dict(item.split("=", 1) for item in device["containerEdits"]["env"])


async def test_prepare_writes_hami_core_cdi_and_survives_a_restart(
    sim: RunningApiServer, settings: Settings, host_root: Path
) -> None:
    shared = dra.allocation_result(
        "gpu",
        "gpu-1",
        pool=NODE,
        share_id="7f0c9b9e-0000-4000-8000-000000000001",
        consumed={"memory": "3Gi", "cores": 30},
    )
    pod, claim = await _pod_and_claim(sim, "train", [shared])
    uid = claim["metadata"]["uid"]
    spec_path = settings.cdi_dir / f"k8s.gpu.hami.io-claim_{uid}.json"
    async with serving_dra(settings) as running:
        answer = (await _prepare(running, claim)).claims[uid]
        assert answer.error == ""
        (device,) = answer.devices
        assert (device.device_name, device.pool_name, list(device.request_names)) == (
            "gpu-1",
            NODE,
            ["gpu"],
        )
        assert device.share_id == shared["shareID"]
        assert list(device.cdi_device_ids) == [f"k8s.gpu.hami.io/claim={uid}-gpu"]
        spec = json.loads(spec_path.read_text())
        assert spec["kind"] == "k8s.gpu.hami.io/claim"
        assert spec["devices"][0]["name"] == f"{uid}-gpu"
        env = _env(spec)
        cache = env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].rsplit("/", 1)[1].removesuffix(".cache")
        expected = container_grant(
            index=0,
            container=AllocatingContainer("main"),
            devices=(ContainerDevice(UUIDS[1], "NVIDIA", 3072, 30),),
            pod_uid=pod["metadata"]["uid"],
            options=allocate_options(settings),
            layout=HookLayout(hook_path=settings.hook_path),
            cache_name=cache,
        )
        assert env == dict(expected.envs)
        assert env["NVIDIA_VISIBLE_DEVICES"] == UUIDS[1]
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3072m"
        cache_dir = host_root / f"usr/local/vgpu/containers/{pod['metadata']['uid']}_main"
        assert cache_dir.is_dir()
        (cache_dir / "region.cache").write_text("in use")

        again = (await _prepare(running, claim)).claims[uid]
        assert again == answer
        assert (cache_dir / "region.cache").exists()  # a repeated Prepare wipes nothing

    spec_path.unlink()  # /var/run is a tmpfs: a reboot loses it, the checkpoint does not
    async with serving_dra(settings) as running:
        after = (await _prepare(running, claim)).claims[uid]
        assert after == answer
        assert json.loads(spec_path.read_text()) == spec
        assert (cache_dir / "region.cache").exists()

        done = await _unprepare(running, _ref(claim))
        assert done.claims[uid].error == ""
        assert not spec_path.exists()
        again_done = await _unprepare(
            running, _ref(claim), v1.Claim(namespace="x", uid="nope", name="y")
        )
        assert {k: r.error for k, r in again_done.claims.items()} == {uid: "", "nope": ""}
    async with serving_dra(settings) as running:
        assert running.driver.prepared == {}


async def test_prepare_refuses_bad_claims_one_by_one(
    sim: RunningApiServer, settings: Settings
) -> None:
    _, good = await _pod_and_claim(sim, "good", [dra.allocation_result("gpu", "gpu-0", pool=NODE)])
    _, elsewhere = await _pod_and_claim(
        sim, "elsewhere", [dra.allocation_result("gpu", "gpu-0", pool="node-b")]
    )
    _, vanished = await _pod_and_claim(
        sim, "vanished", [dra.allocation_result("gpu", "gpu-9", pool=NODE)]
    )
    _, clash = await _pod_and_claim(
        sim, "clash", [dra.allocation_result("gpu", "gpu-0", pool=NODE)]
    )
    unallocated = await sim.server.create("resourceclaims", dra.resource_claim("idle"))
    replaced = v1.Claim(namespace="default", uid="not-the-uid", name="good")
    missing = v1.Claim(namespace="default", uid="gone-uid", name="gone")
    async with serving_dra(settings) as running, _dra_stub(running) as stub:
        answer = await stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(
                claims=[
                    _ref(good),
                    _ref(elsewhere),
                    _ref(vanished),
                    _ref(unallocated),
                    replaced,
                    missing,
                    v1.Claim(namespace="default", uid="", name="x"),
                ]
            )
        )
        errors = {uid: r.error for uid, r in answer.claims.items()}
        assert errors[good["metadata"]["uid"]] == ""
        assert "not from this node's pool" in errors[elsewhere["metadata"]["uid"]]
        assert "gpu-9 is not a healthy GPU" in errors[vanished["metadata"]["uid"]]
        assert "not allocated" in errors[unallocated["metadata"]["uid"]]
        assert "got replaced" in errors["not-the-uid"]
        assert "not found" in errors["gone-uid"]
        assert "needs namespace, uid and name" in errors[""]
        # gpu-0 is held exclusively by "good": a second exclusive claim is refused.
        second = await stub.NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=[_ref(clash)])
        )
        assert (
            "already prepared for claim default/good"
            in second.claims[clash["metadata"]["uid"]].error
        )
        assert set(running.driver.prepared) == {good["metadata"]["uid"]}


async def test_v1beta1_answers_without_share_ids(sim: RunningApiServer, settings: Settings) -> None:
    result = dra.allocation_result(
        "gpu",
        "gpu-0",
        pool=NODE,
        share_id="7f0c9b9e-0000-4000-8000-000000000002",
        consumed={"memory": "1Gi"},
    )
    _, claim = await _pod_and_claim(sim, "old", [result])
    uid = claim["metadata"]["uid"]
    async with (
        serving_dra(settings) as running,
        grpc.aio.insecure_channel(f"unix:{running.sockets.dra_path}") as channel,
    ):
        stub = v1beta1_grpc.DRAPluginStub(channel)
        answer = await stub.NodePrepareResources(
            v1beta1.NodePrepareResourcesRequest(claims=[_ref(claim, v1beta1)])
        )
        (device,) = answer.claims[uid].devices
        assert device.device_name == "gpu-0"
        assert list(device.cdi_device_ids) == [f"k8s.gpu.hami.io/claim={uid}-gpu"]
        done = await stub.NodeUnprepareResources(
            v1beta1.NodeUnprepareResourcesRequest(claims=[_ref(claim, v1beta1)])
        )
        assert done.claims[uid].error == ""
