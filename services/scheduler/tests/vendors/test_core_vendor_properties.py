"""Allocation invariants across vendors, through ``select_node`` / ``decide_node``.

Random mixed nodes (NVIDIA and one to three other vendors, devices shaped as each vendor's
plugin registers them) and random pods asking one or two vendors, placed one after another with
their usage applied, and now and then removed: no device is over-committed (slots, memory,
cores; an exclusive holder alone; whole cards held once; AWS Neuron core masks disjoint), every
device granted is the asked vendor's, a refused pod changes nothing, and removal undoes apply.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from hypothesis import event, given, settings
from hypothesis import strategies as st

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.pod.devices import DeviceUsageSummary
from hami_protocol.request.containers import PodDeviceRequests, pod_device_requests
from hami_protocol.vendor.table import vendors_from_config
from hami_scheduler.core import (
    NodeUsage,
    apply_usage,
    decide_node,
    decision_usage,
    pod_plan,
    remove_usage,
    select_node,
)
from hami_scheduler.core.usage.device import DeviceUsage

from ..core_helpers import dev, node


@dataclass(frozen=True, slots=True)
class Shape:
    """How a vendor's plugin registers its devices, and what its pods ask."""

    model: str
    count: int
    """Slots per device (1: a whole card)."""
    memory: int
    cores: int
    devices: tuple[int, int]
    cores_asked: tuple[int, ...] = (0, 10, 30, 50, 100)
    """Values of the cores resource a user may write (where the vendor has one)."""


SHAPES: dict[str, Shape] = {
    "NVIDIA": Shape("NVIDIA-Tesla T4", 10, 16000, 100, (1, 4)),
    "MLU": Shape("MLU", 100, 24576, 100, (1, 4)),
    "DCU": Shape("DCU", 4, 16000, 100, (1, 4)),
    "Mthreads": Shape("Mthreads", 100, 49152, 16, (1, 4), cores_asked=(0, 4, 16)),
    "Metax-GPU": Shape("Metax-GPU", 1, 65536, 100, (1, 4), cores_asked=(100,)),
    "Metax-SGPU": Shape("MXC500", 16, 65536, 100, (1, 4)),
    "AMD": Shape("AMD", 4, 16000, 100, (1, 4)),
    "Biren": Shape("Biren-BR106", 4, 0, 100, (1, 4)),
    "Vastai": Shape("Vastai-VA1L", 4, 0, 100, (1, 4)),
    "kunlun": Shape("kunlun", 1, 98304, 100, (8, 8), cores_asked=(100,)),
    "XPU": Shape("KunlunXPU-P800", 4, 98304, 100, (2, 8)),
    "AWSNeuron": Shape("AWSNeuron", 2, 0, 0b11, (2, 4), cores_asked=(1, 2)),
    "GCU": Shape("GCU", 1, 49152, 100, (1, 4), cores_asked=(100,)),
    "Ascend910B3": Shape("Ascend910B3", 4, 65536, 100, (1, 8)),
}
OTHERS = sorted(set(SHAPES) - {"NVIDIA"})


@st.composite
def mixed_node(draw: st.DrawFn, name: str) -> NodeUsage:
    words = [
        "NVIDIA",
        *draw(st.lists(st.sampled_from(OTHERS), min_size=1, max_size=3, unique=True)),
    ]
    devices: list[DeviceUsage] = []
    for word in words:
        shape = SHAPES[word]
        for i in range(draw(st.integers(*shape.devices))):
            devices.append(
                dev(
                    f"{name}-{word}-{i}",
                    vendor=word,
                    model=shape.model,
                    count=shape.count,
                    mem=shape.memory,
                    cores=shape.cores,
                    index=i,
                    health=draw(st.sampled_from([True] * 9 + [False])),
                )
            )
    return node(name, devices)


VENDORS = vendors_from_config(
    parse_device_config(DEFAULT_DEVICE_CONFIG_YAML), enable_ascend=True, enable_iluvatar=True
)
ROWS = {row.common_word: row for row in VENDORS}


@st.composite
def limits_st(draw: st.DrawFn, word: str) -> dict[str, str]:
    """What a user writes in ``resources.limits`` to ask for ``word``'s devices."""
    row, shape = ROWS[word], SHAPES[word]
    limits = {row.count_resource: str(draw(st.sampled_from([1, 1, 1, 2])))}
    if row.memory_resource and draw(st.booleans()):
        mib = draw(st.sampled_from([1000, 4000, 8000, 16000]))
        limits[row.memory_resource] = str(max(mib // row.memory_scale, 1))
    if row.cores_resource and draw(st.booleans()):
        limits[row.cores_resource] = str(draw(st.sampled_from(shape.cores_asked)))
    return limits


@st.composite
def pod_st(draw: st.DrawFn, words: list[str]) -> PodDeviceRequests:
    asked = draw(st.lists(st.sampled_from(words), min_size=1, max_size=2, unique=True))
    containers = []
    for c in range(draw(st.integers(1, 2))):
        limits: dict[str, str] = {}
        for word in asked:
            if c == 0 or draw(st.booleans()):
                limits.update(draw(limits_st(word)))
        containers.append({"name": f"c{c}", "resources": {"limits": limits}})
    return pod_device_requests({"spec": {"containers": containers}}, vendors=VENDORS)


def _check(
    nodes: dict[str, NodeUsage],
    placed: list[tuple[str, tuple[DeviceUsageSummary, ...], dict[str, list[int]]]],
) -> None:
    for n in nodes.values():
        for d in n.devices:
            assert 0 <= d.used <= d.count, d
            assert 0 <= d.usedmem <= d.totalmem, d
            assert 0 <= d.usedcores <= d.totalcore, d
    holders: dict[tuple[str, str], list[DeviceUsageSummary]] = defaultdict(list)
    masks: dict[tuple[str, str], list[int]] = defaultdict(list)
    for name, usage, granted in placed:
        for summary in usage:
            holders[name, summary.uuid].append(summary)
        for uuid, handed in granted.items():
            masks[name, uuid].extend(handed)
    for (name, uuid), held in holders.items():
        device = nodes[name].device(uuid)
        assert device is not None
        if device.count == 1:
            assert len(held) == 1, (uuid, held)  # a whole card has one holder
        if device.totalcore == 100 and any(h.usedcores == 100 for h in held):
            assert len(held) == 1, (uuid, held)  # an exclusive holder is alone
    for (name, uuid), handed in masks.items():
        device = nodes[name].device(uuid)
        assert device is not None
        seen = 0
        for mask in handed:
            assert mask & ~device.totalcore == 0, (uuid, handed)
            assert mask & seen == 0, (uuid, handed)  # AWS core masks never overlap
            seen |= mask


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_no_sequence_of_vendor_placements_over_commits(data: st.DataObject) -> None:
    nodes = {name: data.draw(mixed_node(name)) for name in ("n0", "n1")}
    words = sorted({d.vendor for n in nodes.values() for d in n.devices})
    placed: list[tuple[str, tuple[DeviceUsageSummary, ...], dict[str, list[int]]]] = []
    for _ in range(data.draw(st.integers(1, 10))):
        if placed and data.draw(st.integers(0, 3)) == 0:
            name, usage, _ = placed.pop(data.draw(st.integers(0, len(placed) - 1)))
            nodes[name] = remove_usage(nodes[name], usage)
            continue
        plan = pod_plan(data.draw(pod_st(words)))
        before = dict(nodes)
        selection = select_node(plan, nodes)
        assert nodes == before
        if selection.node is None or selection.decision is None:
            for name, usage_node in nodes.items():
                refused = decide_node(usage_node, plan)
                assert not refused.fits
                assert nodes[name] == before[name]
            continue
        decision = selection.decision
        event(f"placed {'+'.join(word for word, _ in decision.devices.entries)}")
        target = nodes[selection.node]
        granted: dict[str, list[int]] = defaultdict(list)
        for word, containers in decision.devices.entries:
            own = {d.uuid for d in target.vendor_devices(word)}
            for container in containers:
                for device in container:
                    assert device.uuid in own, (word, device)
                    if word == "AWSNeuron":
                        granted[device.uuid].append(device.usedcores)
        usage = decision_usage(decision, plan)
        nodes[selection.node] = apply_usage(target, usage)
        assert remove_usage(nodes[selection.node], usage) == target
        placed.append((selection.node, usage, granted))
        _check(nodes, placed)
