"""Topology scoring: the registration loop writes ``hami.io/node-nvidia-score`` from the
backend's links, only when it changed, and warns about asymmetric pairs at most hourly."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_deviceplugin.app import EVENT_COMPONENT, serving
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.backends.fake import FakeBackend
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.metrics import PluginMetrics
from hami_deviceplugin.node.register import annotations_to_write, pair_score_value
from hami_deviceplugin.node.registrar import ASYMMETRY_WARNING_EVERY_S, Registrar
from hami_kube.events import EventRecorder
from hami_kube.rest import KubeClient
from hami_kubesim.testing import RunningApiServer, eventually
from hami_protocol.config.node import FilterDevices, NodeSettings
from hami_protocol.keys import NVIDIA_REGISTER, NVIDIA_SCORE
from hami_protocol.node.pairscore import decode_pair_scores
from hami_protocol.topology.links import ASYMMETRIC_LINK_REASON, PairLinks, PcieLink

from ..helpers import NODE, annotations_of, gpu, plugin_settings, write_atomically

REGISTER = "[]"


def test_score_written_when_it_differs_and_left_alone_when_off() -> None:
    now = datetime(2026, 5, 1, tzinfo=UTC)
    said = {NVIDIA_REGISTER: REGISTER, "hami.io/node-handshake": "Reported 2026-05-01"}
    assert annotations_to_write(said, register=REGISTER, now=now, score="[]") == {
        NVIDIA_SCORE: "[]"
    }
    with_score = {**said, NVIDIA_SCORE: "[]"}
    assert annotations_to_write(with_score, register=REGISTER, now=now, score="[]") == {}
    # Scoring off: whatever the node says stays (HAMi does not remove it either).
    assert annotations_to_write(with_score, register=REGISTER, now=now) == {}


def test_pair_score_value_follows_the_registered_order() -> None:
    first, second = Gpu("GPU-b", 0, "T", 1), Gpu("GPU-a", 1, "T", 1)
    links = {
        ("GPU-a", "GPU-b"): PairLinks(PcieLink.SAME_CPU, 2),
        ("GPU-b", "GPU-a"): PairLinks(PcieLink.SAME_CPU, 2),
    }
    value, asymmetric = pair_score_value([first, second], links)
    assert (
        value == '[{"uuid":"GPU-b","score":{"GPU-a":220}},{"uuid":"GPU-a","score":{"GPU-b":220}}]'
    )
    assert asymmetric == ()


UUIDS = ("GPU-0", "GPU-1", "GPU-2", "GPU-3")


def write(path: Path, links: list[dict[str, Any]]) -> None:
    gpus = [gpu(uuid, n, numa=n // 2) for n, uuid in enumerate(UUIDS)]
    write_atomically(path, yaml.safe_dump({"gpus": gpus, "links": links}))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def registrar_for(
    kube: KubeClient, path: Path, *, scoring: bool = True
) -> AsyncIterator[tuple[Registrar, FakeBackend, Clock]]:
    backend = FakeBackend(path, sysfs_root=path.parent / "sys", poll_interval=0.01)
    gpus = await backend.open()
    recorder = EventRecorder(kube, component=EVENT_COMPONENT, host=NODE)
    clock = Clock()
    registrar = Registrar(
        client=kube,
        node_name=NODE,
        inventory=Inventory(gpus, filters=FilterDevices(), split=2),
        node=NodeSettings(),
        metrics=PluginMetrics(node=NODE),
        links=backend.links if scoring else None,
        recorder=recorder,
        clock=clock,
    )
    events = asyncio.create_task(recorder.run(), name="test-events")
    try:
        yield registrar, backend, clock
        await recorder.flush()
    finally:
        events.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await events
        await backend.close()


def scores_on_node(sim: RunningApiServer) -> dict[str, dict[str, int]]:
    value = annotations_of(sim, "nodes", NODE)[NVIDIA_SCORE]
    return {entry.uuid: dict(entry.scores) for entry in decode_pair_scores(value)}


def warnings(sim: RunningApiServer) -> list[dict[str, Any]]:
    return [e for e in sim.server.list("events") if e.get("reason") == ASYMMETRIC_LINK_REASON]


async def test_scores_reach_the_node_once(
    sim: RunningApiServer, kube: KubeClient, tmp_path: Path
) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, [{"from": "GPU-0", "to": "GPU-1", "nvlinks": 4}])
    async with registrar_for(kube, path) as (registrar, _, _):
        assert await registrar.sync_once()
        assert scores_on_node(sim) == {
            "GPU-0": {"GPU-1": 420, "GPU-2": 10, "GPU-3": 10},
            "GPU-1": {"GPU-0": 420, "GPU-2": 10, "GPU-3": 10},
            "GPU-2": {"GPU-0": 10, "GPU-1": 10, "GPU-3": 20},
            "GPU-3": {"GPU-0": 10, "GPU-1": 10, "GPU-2": 20},
        }
        patches = registrar.patches
        assert await registrar.sync_once()
        assert registrar.patches == patches  # unchanged scores cost no write
        assert warnings(sim) == []


async def test_changed_links_are_read_at_the_next_pass(
    sim: RunningApiServer, kube: KubeClient, tmp_path: Path
) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, [])
    async with registrar_for(kube, path) as (registrar, backend, _):
        assert await registrar.sync_once()
        assert scores_on_node(sim)["GPU-2"]["GPU-3"] == 20

        async def follow_file() -> None:
            async for _ in backend.updates():
                pass

        follow = asyncio.create_task(follow_file(), name="test-follow")
        try:
            write(path, [{"from": "GPU-2", "to": "GPU-3", "pcie": "SameBoard", "nvlinks": 2}])

            async def rescored() -> bool:
                await registrar.sync_once()
                return scores_on_node(sim)["GPU-3"]["GPU-2"] == 260

            await eventually(rescored, what="the new links scored")
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow


async def test_asymmetric_pair_scores_zero_and_is_warned_hourly(
    sim: RunningApiServer, kube: KubeClient, tmp_path: Path
) -> None:
    path = tmp_path / "gpus.yaml"
    write(
        path,
        [
            {"from": "GPU-0", "to": "GPU-1", "nvlinks": 4, "symmetric": False},
            {"from": "GPU-1", "to": "GPU-0", "nvlinks": 2, "symmetric": False},
        ],
    )
    async with registrar_for(kube, path) as (registrar, _, clock):
        assert await registrar.sync_once()
        assert await registrar.sync_once()
        clock.now += ASYMMETRY_WARNING_EVERY_S - 1
        assert await registrar.sync_once()
    assert scores_on_node(sim)["GPU-0"]["GPU-1"] == 0
    assert scores_on_node(sim)["GPU-1"]["GPU-0"] == 0
    assert scores_on_node(sim)["GPU-0"]["GPU-2"] == 10
    (event,) = warnings(sim)
    assert event["type"] == "Warning"
    assert event["count"] == 1
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == NODE
    assert event["source"]["component"] == "hami-device-plugin"
    assert "GPU-0" in event["message"]
    assert "GPU-1" in event["message"]

    async with registrar_for(kube, path) as (registrar, _, clock):
        assert await registrar.sync_once()
        clock.now += ASYMMETRY_WARNING_EVERY_S
        assert await registrar.sync_once()
    # A new registrar warns at once; an hour later it warns again.
    assert sum(int(e["count"]) for e in warnings(sim)) == 3


async def test_scoring_off_leaves_the_annotation_alone(
    sim: RunningApiServer, kube: KubeClient, tmp_path: Path
) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, [{"from": "GPU-0", "to": "GPU-1", "nvlinks": 4}])
    await sim.server.patch(
        "nodes", NODE, {"metadata": {"annotations": {NVIDIA_SCORE: "[]"}}}, patch_type="merge"
    )
    async with registrar_for(kube, path, scoring=False) as (registrar, _, _):
        assert registrar.score is None
        assert await registrar.sync_once()
    annotations = annotations_of(sim, "nodes", NODE)
    assert annotations[NVIDIA_SCORE] == "[]"
    assert NVIDIA_REGISTER in annotations


@pytest.mark.parametrize("scoring", [True, False])
async def test_the_plugin_flag_turns_scoring_on(
    sim: RunningApiServer, plugin_dir: Path, host_root: Path, tmp_path: Path, scoring: bool
) -> None:
    path = tmp_path / "gpus.yaml"
    write(path, [{"from": "GPU-2", "to": "GPU-3", "nvlinks": 1}])
    settings = plugin_settings(
        url=sim.url,
        plugin_dir=plugin_dir,
        devices=path,
        host_root=host_root,
        enable_topology_score=scoring,
    )
    async with serving(settings) as plugin:
        await eventually(
            lambda: NVIDIA_REGISTER in annotations_of(sim, "nodes", NODE), what="registered"
        )
        assert (plugin.registrar.score is not None) is scoring
    if scoring:
        assert scores_on_node(sim)["GPU-2"]["GPU-3"] == 120
    else:
        assert NVIDIA_SCORE not in annotations_of(sim, "nodes", NODE)
