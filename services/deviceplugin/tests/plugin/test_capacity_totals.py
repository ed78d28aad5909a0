"""``--advertise-capacity-totals``: the node's status capacity carries the GPU totals the register
annotation says, kept current through device health changes and the kubelet zeroing them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hami_deviceplugin.node.register import capacity_to_write
from hami_deviceplugin.settings import parse_settings
from hami_kube.objects import NodeView
from hami_kubesim.testing import RunningApiServer, eventually
from hami_protocol.totals import NVIDIA_CORES, NVIDIA_MEMORY, Totals

from ..helpers import NODE, UUIDS, gpu, node_stack, write_devices

pytestmark = pytest.mark.timeout(60)


def test_what_to_write() -> None:
    wanted = Totals(32768, 200)
    assert capacity_to_write({}, wanted) == {NVIDIA_MEMORY: "32768", NVIDIA_CORES: "200"}
    # Equal quantities in another spelling are left alone; a zeroed one is written again.
    assert capacity_to_write({NVIDIA_MEMORY: "32Ki", NVIDIA_CORES: "0"}, wanted) == {
        NVIDIA_CORES: "200"
    }
    assert capacity_to_write({NVIDIA_MEMORY: "garbage", NVIDIA_CORES: "200"}, wanted) == {
        NVIDIA_MEMORY: "32768"
    }
    # Mode off: whatever a previous run left is removed, nothing else is touched.
    assert capacity_to_write({NVIDIA_MEMORY: "1", "cpu": "4"}, None) == {NVIDIA_MEMORY: None}
    assert capacity_to_write({"cpu": "4"}, None) == {}


def test_flag_is_off_by_default() -> None:
    assert not parse_settings(["--node-name", "n"], environ={}).advertise_capacity_totals
    on = parse_settings(["--node-name", "n", "--advertise-capacity-totals"], environ={})
    assert on.advertise_capacity_totals


def _status(sim: RunningApiServer, section: str) -> dict[str, Any]:
    view = NodeView(sim.server.get("nodes", NODE))
    return dict(view.capacity if section == "capacity" else view.allocatable)


async def _set_capacity(sim: RunningApiServer, values: dict[str, str]) -> None:
    """Patch the node's status capacity as a kubelet or an earlier run would leave it."""
    body = {"status": {"capacity": values}}
    await sim.server.patch("nodes", NODE, body, patch_type="merge", subresource="status")


def _totals(sim: RunningApiServer, section: str = "capacity") -> tuple[Any, Any]:
    values = _status(sim, section)
    return values.get(NVIDIA_MEMORY), values.get(NVIDIA_CORES)


async def test_totals_follow_the_devices_and_survive_the_kubelet(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, tmp_path: Path
) -> None:
    devices = tmp_path / "gpus.yaml"
    write_devices(devices, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1, memory_mib=24576)])
    async with node_stack(
        sim, plugin_dir, host_root, devices, pod_resources=False, advertise_capacity_totals=True
    ):
        # 16384 + 24576 MiB and 2 × 100 cores; the kubelet copies them into allocatable.
        await eventually(lambda: _totals(sim) == ("40960", "200"), what="totals advertised")
        await eventually(lambda: _totals(sim, "allocatable") == ("40960", "200"), what="alloc")
        # A GPU turns unhealthy: the register and the totals drop it.
        write_devices(devices, [gpu(UUIDS[0], 0), gpu(UUIDS[1], 1, healthy=False)])
        await eventually(lambda: _totals(sim) == ("16384", "100"), what="unhealthy GPU dropped")
        # The kubelet zeroes extended resources when the node object is re-created.
        await _set_capacity(sim, {NVIDIA_MEMORY: "0", NVIDIA_CORES: "0"})
        await eventually(lambda: _totals(sim) == ("16384", "100"), what="totals written again")


async def test_mode_off_removes_totals_a_previous_run_left(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    await _set_capacity(sim, {NVIDIA_MEMORY: "99999", NVIDIA_CORES: "800"})
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=False):
        await eventually(lambda: _totals(sim) == (None, None), what="stale totals removed")
        await eventually(lambda: _totals(sim, "allocatable") == (None, None), what="alloc too")


async def test_mode_off_without_the_right_gives_up_the_removal_once(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, devices: Path
) -> None:
    await _set_capacity(sim, {NVIDIA_MEMORY: "99999"})
    # The chart grants nodes/status only with the mode on.
    sim.server.inject_error("patch", "nodes/status", code=403)
    async with node_stack(sim, plugin_dir, host_root, devices, pod_resources=False) as (_, plugin):
        syncs = plugin.metrics.register_syncs
        await eventually(
            lambda: syncs.labels(outcome="patched")._value.get() >= 1, what="a pass succeeded"
        )
        # One refused removal, then no more tries: no pass failed, no second PATCH was sent.
        await plugin.registrar.sync_once()
        assert syncs.labels(outcome="error")._value.get() == 0
        assert _status(sim, "capacity")[NVIDIA_MEMORY] == "99999"
        counts = sim.server.requests.counts()
        mine = counts.count(client="hami-deviceplugin", verb="PATCH", subresource="status")
        assert mine == 1
