"""``python -m hami_deviceplugin`` as a real process: SIGTERM ends it within its grace period even
while its peers hang.  The process boundary is what is tested here (signal handling, the exit
status, the last log line, threads and leftover tasks at the end of the loop); the same shutdown
in-process is tested in ``test_shutdown.py``.

The hung peers: a kubelet that accepts ``Register``, opens the plugin's ListAndWatch stream and
never reads it (the plugin's writes back up once the stream's flow-control window is full), and
an API server that stops answering (kubesim's latency injection: every request waits an hour).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import grpc
import pytest

from hami_kubelet_api.v1beta1 import api_pb2, api_pb2_grpc
from hami_kubesim.testing import RunningApiServer
from hami_protocol.keys import NVIDIA_REGISTER

from ..helpers import (
    NODE,
    annotations_of,
    api_server_hung,
    eventually,
    gpu,
    named,
    python_process,
    registration_server,
    terminate,
    write_devices,
)

pytestmark = pytest.mark.timeout(90)

GRACE_S = 3.0
SLACK_S = 2.0
"""Beyond the grace: the end of the event loop (leftover tasks, the default executor: 1 s each at
most) and the interpreter's exit."""

GPU_UUIDS = tuple(f"GPU-{i:08d}-1111-2222-3333-444444444444" for i in range(8))


class NeverReadingKubelet(api_pb2_grpc.RegistrationServicer):
    """``Register`` answered as the kubelet does, after opening the plugin's ListAndWatch stream,
    which is then never read."""

    def __init__(self, plugin_dir: Path) -> None:
        self._plugin_dir = plugin_dir
        self.channels: list[grpc.aio.Channel] = []
        self.streams: list[Any] = []

    async def Register(
        self, request: api_pb2.RegisterRequest, context: grpc.aio.ServicerContext[object, object]
    ) -> api_pb2.Empty:
        channel = grpc.aio.insecure_channel(f"unix:{self._plugin_dir / request.endpoint}")
        self.channels.append(channel)
        self.streams.append(api_pb2_grpc.DevicePluginStub(channel).ListAndWatch(api_pb2.Empty()))
        return api_pb2.Empty()


@contextlib.asynccontextmanager
async def never_reading_kubelet(plugin_dir: Path) -> AsyncIterator[NeverReadingKubelet]:
    kubelet = NeverReadingKubelet(plugin_dir)
    try:
        async with registration_server(plugin_dir, kubelet):
            yield kubelet
    finally:
        for channel in kubelet.channels:
            await channel.close()


def logged_at_least(lines: list[dict[str, Any]], event: str, times: int) -> bool:
    return len(named(lines, event)) >= times


async def test_sigterm_ends_the_process_within_its_grace_period_while_peers_hang(
    sim: RunningApiServer, plugin_dir: Path, tmp_path: Path
) -> None:
    devices = tmp_path / "gpus.yaml"
    write_devices(devices, [gpu(uuid, i) for i, uuid in enumerate(GPU_UUIDS)])
    async with (
        never_reading_kubelet(plugin_dir) as kubelet,
        python_process(
            "-m",
            "hami_deviceplugin",
            f"--node-name={NODE}",
            f"--kube-url={sim.url}",
            f"--kubelet-socket={plugin_dir / 'kubelet.sock'}",
            "--device-backend=fake",
            f"--fake-devices={devices}",
            f"--sysfs-root={tmp_path / 'no-sysfs'}",
            "--host-root=none",
            "--device-split-count=100",  # 800 replicas: ~50 kB per device list
            "--metrics-bind-address=127.0.0.1:0",
            "--kubelet-poll-interval=0.05",
            "--fake-poll-interval=0.05",
            "--register-retry-interval=0.1",
            f"--shutdown-grace-period={GRACE_S:g}s",
            "--log-format=json",
        ) as (process, lines),
    ):

        def running() -> bool:
            if process.returncode is not None:
                raise AssertionError(f"the plugin exited with {process.returncode}")
            return bool(kubelet.streams)

        await eventually(running, within=30, what="registered, ListAndWatch stream open")
        await eventually(
            lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE),
            within=30,
            what="the process registered the node",
        )

        with api_server_hung(sim):
            # Health flips: each is a new device list on the unread stream, and wakes the
            # registration loop, whose next request to the API server then hangs.
            for flip in range(1, 7):
                healthy = flip % 2 == 0
                write_devices(
                    devices,
                    [gpu(uuid, i, healthy=healthy or i > 0) for i, uuid in enumerate(GPU_UUIDS)],
                )
                await eventually(
                    partial(logged_at_least, lines, "GPU inventory changed", flip),
                    within=30,
                    what=f"health change {flip} seen",
                )

            took = await terminate(process, within=GRACE_S + SLACK_S + 10)

    assert process.returncode == 0, lines[-5:]
    assert took < GRACE_S + SLACK_S, f"stopped after {took:.1f}s; last lines: {lines[-8:]}"
    assert named(lines, "stop_signal_received")
    assert [line for line in named(lines, "device plugin stopped") if line.get("node") == NODE]
