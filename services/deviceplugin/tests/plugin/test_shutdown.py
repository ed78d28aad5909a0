"""The plugin's bounded shutdown, in-process: a step held up by a hung peer is cut off at its own
bound and named in the log, the rest of the shutdown goes on, and the whole stop fits in the
grace period.  (The same as a real process on SIGTERM: ``test_process.py``.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog.testing

from hami_deviceplugin.app import CLOSE_S, EVENT_FLUSH_S, serving
from hami_deviceplugin.settings import Settings
from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc
from hami_kubesim.testing import RunningApiServer

from ..helpers import (
    NODE,
    UUIDS,
    eventually,
    gpu,
    plugin_settings,
    registration_server,
    write_devices,
)

GRACE_S = 5.0


@pytest.fixture
def settings(sim: RunningApiServer, plugin_dir: Path, tmp_path: Path) -> Settings:
    devices = tmp_path / "gpus.yaml"
    write_devices(devices, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1)])
    return plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=devices,
        host_root=None,
        shutdown_grace_s=GRACE_S,
    )


def events_named(logs: Sequence[Mapping[str, Any]], event: str) -> list[Mapping[str, Any]]:
    return [entry for entry in logs if entry.get("event") == event]


def stopped_cleanly(logs: Sequence[Mapping[str, Any]]) -> bool:
    return any(entry.get("node") == NODE for entry in events_named(logs, "device plugin stopped"))


async def allocate_on(socket: Path, *device_ids: str) -> api_pb2.AllocateResponse:
    async with grpc.aio.insecure_channel(f"unix:{socket}") as channel:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=list(device_ids))]
        )
        return await api_pb2_grpc.DevicePluginStub(channel).Allocate(request, timeout=10)


async def test_events_held_by_an_api_server_that_stopped_answering_are_cut_off_and_named(
    sim: RunningApiServer, settings: Settings
) -> None:
    with structlog.testing.capture_logs() as logs:
        async with serving(settings):
            sim.server.inject_latency(3600.0, verb="create", resource="events")
            # No pod waits on the node: the Allocate fails and queues an AllocateFailed Event
            # on the node, which the API server now never takes.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await allocate_on(settings.socket_path, f"{UUIDS[0]}-0")
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
            started = time.monotonic()
        took = time.monotonic() - started

    timed_out = events_named(logs, "shutdown_step_timed_out")
    assert [entry["step"] for entry in timed_out] == ["events-flush"]
    assert any("deviceplugin-events" in task for task in timed_out[0]["tasks"])
    # The flush waited its bound (a timer may fire a clock tick early), not the grace period.
    assert EVENT_FLUSH_S - 0.05 <= took < GRACE_S
    assert stopped_cleanly(logs)


class SilentKubelet(api_pb2_grpc.RegistrationServicer):
    """A kubelet that takes ``Register`` and never answers it."""

    def __init__(self) -> None:
        self.called = asyncio.Event()

    async def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.Empty:
        self.called.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_register_call_the_kubelet_never_answers_does_not_hold_the_shutdown(
    settings: Settings,
) -> None:
    kubelet = SilentKubelet()
    async with registration_server(settings.plugin_dir, kubelet):
        with structlog.testing.capture_logs() as logs:
            async with serving(settings) as plugin:
                await eventually(kubelet.called.is_set, what="the plugin called Register")
                assert not plugin.ready()
                started = time.monotonic()
            took = time.monotonic() - started

    assert not events_named(logs, "shutdown_step_timed_out")
    assert took < CLOSE_S
    assert not settings.socket_path.exists()
    assert stopped_cleanly(logs)
