"""Pure registration: devices + settings → register annotation, handshake answers, replicas."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.inventory import Inventory
from hami_deviceplugin.gpu.replicas import PluginDevice, plugin_devices, replica_owners
from hami_deviceplugin.metrics import PluginMetrics
from hami_deviceplugin.node.register import (
    annotations_to_write,
    device_infos,
    device_type,
    handshake_needs_answer,
    register_value,
    visible_gpus,
)
from hami_deviceplugin.node.registrar import Registrar
from hami_kube.config import KubeSettings
from hami_kube.rest import open_client
from hami_kubesim.testing import RunningApiServer, eventually
from hami_protocol.config.node import FilterDevices, NodeSettings
from hami_protocol.keys import (
    ALLOCATE_IDENTITY_POD_RESOURCES,
    NODE_ALLOCATE_IDENTITY,
    NVIDIA_HANDSHAKE,
    NVIDIA_REGISTER,
)
from hami_protocol.node.identity import IDENTITY_REFRESH, format_identity
from hami_protocol.node.registry import decode_node_devices

from ..helpers import NODE

NOW = datetime(2026, 5, 1, 12, 30, 15, tzinfo=UTC)
T4 = Gpu("GPU-a", 0, "Tesla T4", 15360, numa=1, pci_bus_id="0000:1b:00.0")
A30 = Gpu("GPU-b", 1, "NVIDIA A30", 24576, healthy=False, reason="critical Xid 79")


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("Tesla V100-PCIE-32GB", "NVIDIA-Tesla V100-PCIE-32GB"),
        ("NVIDIA A30", "NVIDIA A30"),
        ("NVIDIA-H100", "NVIDIA-H100"),
        ("GeForce RTX 4090", "NVIDIA-GeForce RTX 4090"),
    ],
)
def test_device_type(model: str, expected: str) -> None:
    assert device_type(model) == expected


def test_register_value_is_hamis_json() -> None:
    node = NodeSettings(device_split_count=10, device_memory_scaling=1.5, device_core_scaling=2.0)
    value = register_value([T4, A30], node)
    assert json.loads(value) == [
        {
            "id": "GPU-a",
            "count": 10,
            "devmem": 23040,
            "devcore": 200,
            "type": "NVIDIA-Tesla T4",
            "numa": 1,
            "mode": "hami-core",
            "health": True,
            "pciBusId": "0000:1b:00.0",
        },
        # index 1 is kept; health false is omitted as Go's omitempty does
        {
            "id": "GPU-b",
            "index": 1,
            "count": 10,
            "devmem": 36864,
            "devcore": 200,
            "type": "NVIDIA A30",
            "mode": "hami-core",
        },
    ]
    decoded = decode_node_devices(value)
    assert [d.health for d in decoded] == [True, False]


@pytest.mark.parametrize(
    ("memory", "scaling", "devmem"),
    [(15360, 1.0, 15360), (15360, 0.5, 7680), (100, 1.33, 133), (32768, 3.0, 98304)],
)
def test_memory_scaling_floors(memory: int, scaling: float, devmem: int) -> None:
    gpu = Gpu("GPU-x", 0, "T", memory)
    (info,) = device_infos([gpu], NodeSettings(device_memory_scaling=scaling))
    assert info.devmem == devmem


def test_core_scaling_and_negative_numa() -> None:
    gpu = Gpu("GPU-x", 0, "T", 1, numa=-1)
    (info,) = device_infos([gpu], NodeSettings(device_core_scaling=0.5))
    assert info.devcore == 50
    assert info.numa == 0


def test_filter_devices_by_uuid_and_index() -> None:
    gpus = [Gpu(f"GPU-{i}", i, "T", 1) for i in range(4)]
    kept = visible_gpus(reversed(gpus), FilterDevices(uuids=("GPU-1",), indexes=(3,)))
    assert [g.uuid for g in kept] == ["GPU-0", "GPU-2"]


@pytest.mark.parametrize(
    ("handshake", "needed"),
    [
        (None, True),
        ("", True),
        ("Requesting_2026-05-01 12:00:00", True),
        ("Deleted_2026-05-01 12:00:00", True),
        ("garbage", True),
        ("Reported 2026-05-01 12:00:00", False),
        ("Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895", False),
    ],
)
def test_handshake_needs_answer(handshake: str | None, needed: bool) -> None:
    assert handshake_needs_answer(handshake) is needed


def test_annotations_to_write() -> None:
    register = register_value([T4], NodeSettings())
    assert annotations_to_write({}, register=register, now=NOW) == {
        NVIDIA_REGISTER: register,
        NVIDIA_HANDSHAKE: "Reported 2026-05-01 12:30:15",
    }
    current = {NVIDIA_REGISTER: register, NVIDIA_HANDSHAKE: "Reported 2026-05-01 12:00:00"}
    assert annotations_to_write(current, register=register, now=NOW) == {}
    requesting = {**current, NVIDIA_HANDSHAKE: "Requesting_2026-05-01 12:30:00"}
    assert annotations_to_write(requesting, register=register, now=NOW) == {
        NVIDIA_HANDSHAKE: "Reported 2026-05-01 12:30:15"
    }
    changed = {**current, NVIDIA_REGISTER: "[]"}
    assert annotations_to_write(changed, register=register, now=NOW) == {NVIDIA_REGISTER: register}


def test_the_identity_annotation_follows_what_the_plugin_can_tell() -> None:
    register = register_value([T4], NodeSettings())
    current = {NVIDIA_REGISTER: register, NVIDIA_HANDSHAKE: "Reported 2026-05-01 12:00:00"}
    stamped = format_identity(NOW)
    assert stamped == f"{ALLOCATE_IDENTITY_POD_RESOURCES} {NOW:%Y-%m-%d %H:%M:%S}"
    said = {**current, NODE_ALLOCATE_IDENTITY: stamped}
    assert annotations_to_write(
        current, register=register, now=NOW, identity=ALLOCATE_IDENTITY_POD_RESOURCES
    ) == {NODE_ALLOCATE_IDENTITY: stamped}
    # Written a moment ago: nothing to write until the stamp is a refresh period old.
    for later in (NOW, NOW + IDENTITY_REFRESH - timedelta(seconds=1)):
        assert (
            annotations_to_write(
                said, register=register, now=later, identity=ALLOCATE_IDENTITY_POD_RESOURCES
            )
            == {}
        )
    due = NOW + IDENTITY_REFRESH
    assert annotations_to_write(
        said, register=register, now=due, identity=ALLOCATE_IDENTITY_POD_RESOURCES
    ) == {NODE_ALLOCATE_IDENTITY: format_identity(due)}
    # What an earlier release wrote (no stamp) is restamped at once.
    bare = {**current, NODE_ALLOCATE_IDENTITY: ALLOCATE_IDENTITY_POD_RESOURCES}
    assert annotations_to_write(
        bare, register=register, now=NOW, identity=ALLOCATE_IDENTITY_POD_RESOURCES
    ) == {NODE_ALLOCATE_IDENTITY: stamped}
    # The kubelet stopped answering: the node must not say so any more.
    assert annotations_to_write(said, register=register, now=NOW) == {NODE_ALLOCATE_IDENTITY: None}


def test_plugin_devices_are_split_replicas() -> None:
    devices = plugin_devices([T4, A30], split=2, numa_topology=True)
    assert devices == (
        PluginDevice("GPU-a-0", True, 1),
        PluginDevice("GPU-a-1", True, 1),
        PluginDevice("GPU-b-0", False, 0),
        PluginDevice("GPU-b-1", False, 0),
    )
    assert [d.numa for d in plugin_devices([T4], split=1, numa_topology=False)] == [None]
    assert replica_owners([T4], split=3) == {
        "GPU-a-0": "GPU-a",
        "GPU-a-1": "GPU-a",
        "GPU-a-2": "GPU-a",
    }


@given(
    st.lists(
        st.builds(
            Gpu,
            uuid=st.from_regex(r"GPU-[0-9a-f]{4}", fullmatch=True),
            index=st.integers(0, 16),
            model=st.sampled_from(["Tesla T4", "NVIDIA A100-SXM4-80GB", "H100"]),
            memory_mib=st.integers(0, 200_000),
            numa=st.integers(-1, 3),
            healthy=st.booleans(),
        ),
        max_size=6,
        unique_by=lambda g: g.uuid,
    ),
    st.integers(1, 20),
)
def test_register_round_trips_through_the_scheduler_codec(gpus: list[Gpu], split: int) -> None:
    node = NodeSettings(device_split_count=split)
    decoded = decode_node_devices(register_value(gpus, node))
    assert [(d.id, d.index, d.count, d.health) for d in decoded] == [
        (g.uuid, g.index, split, g.healthy) for g in gpus
    ]
    assert len(plugin_devices(gpus, split=split, numa_topology=False)) == split * len(gpus)


async def test_inventory_notifies_only_on_visible_changes() -> None:
    seen: list[int] = []
    inventory = Inventory([T4], filters=FilterDevices(indexes=(5,)), split=2)
    inventory.subscribe(lambda gpus: seen.append(len(gpus)))
    event = inventory.changed
    assert not inventory.replace([T4, Gpu("GPU-hidden", 5, "T", 1)])
    assert not event.is_set()
    assert inventory.replace([T4, A30])
    assert event.is_set()
    assert inventory.changed is not event
    assert seen == [1, 2]
    assert inventory.version == 1
    assert inventory.replica_owners["GPU-b-1"] == "GPU-b"
    assert inventory.uuids() == {"GPU-a", "GPU-b"}


def passes_finished(metrics: PluginMetrics) -> bool:
    """At least one pass of the registration loop has succeeded."""
    return any(
        metrics.register_syncs.labels(outcome=outcome)._value.get() > 0
        for outcome in ("unchanged", "patched")
    )


async def test_the_registration_loop_stops_when_cancelled_as_it_is_woken(
    sim: RunningApiServer,
) -> None:
    """The root cause of the plugin that hung on SIGTERM: Python 3.11's ``asyncio.wait_for``
    swallowed a cancel that arrived as the wake event fired, and the loop ran on."""
    async with open_client(KubeSettings(kube_url=sim.url)) as client:
        for _ in range(20):
            metrics = PluginMetrics(node=NODE)
            registrar = Registrar(
                client=client,
                node_name=NODE,
                inventory=Inventory([T4], filters=FilterDevices(), split=2),
                node=NodeSettings(),
                metrics=metrics,
                interval=3600.0,
            )
            task = asyncio.create_task(registrar.run())
            # A finished pass is counted as the pass returns; the loop then goes straight to
            # waiting for its wake event, with no await in between.
            await eventually(partial(passes_finished, metrics), what="the first pass")
            registrar.wake()
            task.cancel()
            # A loop that ignores the cancel waits an hour; one that takes it ends at once.
            done, _ = await asyncio.wait({task}, timeout=30)
            assert done, "the registration loop ignored its cancellation"
            assert task.cancelled()
