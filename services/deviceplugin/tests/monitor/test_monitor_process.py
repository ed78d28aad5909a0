"""``python -m hami_deviceplugin.monitor`` as a real process: it serves its metrics from region
files on disk, and SIGTERM ends it within its grace period while the API server it watches has
stopped answering (kubesim's latency injection, its pod watch dropped so that the reconnect
hangs)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from hami_kubesim.hamicore import RegionWriter
from hami_kubesim.testing import RunningApiServer

from ..helpers import (
    NODE,
    UUIDS,
    api_server_hung,
    eventually,
    http_get,
    named,
    python_process,
    terminate,
)
from .monitor_helpers import GIB, Samples, add_pod, container_dir

pytestmark = pytest.mark.timeout(90)

GRACE_S = 3.0
SLACK_S = 2.0
"""Beyond the grace: the end of the event loop and the interpreter's exit."""


async def test_sigterm_ends_the_monitor_within_its_grace_period_while_the_api_server_hangs(
    sim: RunningApiServer, hook: Path, devices: Path
) -> None:
    uid = await add_pod(sim, "job", ["main"])
    path = container_dir(hook, uid, "main") / f"{uuid.uuid4()}.cache"
    with RegionWriter.create(path, devices=[(UUIDS[0], 2 * GIB, 0)]) as writer:
        writer.set_process(42, used_bytes=[GIB], sm_util=[20])
        async with python_process(
            "-m",
            "hami_deviceplugin.monitor",
            f"--node-name={NODE}",
            f"--hook-path={hook}",
            f"--kube-url={sim.url}",
            "--device-backend=fake",
            f"--fake-devices={devices}",
            "--metrics-bind-address=127.0.0.1:0",
            "--feedback-interval=50ms",
            f"--shutdown-grace-period={GRACE_S:g}s",
            "--log-format=json",
        ) as (process, lines):

            def started() -> bool:
                if process.returncode is not None:
                    raise AssertionError(f"the monitor exited with {process.returncode}")
                return bool(named(lines, "vgpu monitor started"))

            await eventually(started, within=30, what="monitor started")
            port = int(named(lines, "vgpu monitor started")[0]["metrics_port"])

            async def ready() -> bool:
                return (await http_get(port, "/readyz"))[0] == 200

            await eventually(ready, within=30, what="monitor ready")
            status, text = await http_get(port, "/metrics")
            assert status == 200
            assert Samples(text).get("hami_vgpu_memory_used_bytes", pod="job") == GIB

            with api_server_hung(sim):
                assert sim.server.drop_watches("pods") >= 1  # its reconnect now hangs
                took = await terminate(process, within=GRACE_S + SLACK_S + 10)

    assert process.returncode == 0, lines[-5:]
    assert took < GRACE_S + SLACK_S, f"stopped after {took:.1f}s; last lines: {lines[-8:]}"
    assert named(lines, "stop_signal_received")
    assert [line for line in named(lines, "vgpu monitor stopped") if line.get("node") == NODE]
