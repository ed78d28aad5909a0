"""Allocation invariants under any sequence of placements and removals.

Whatever pods arrive, in whatever order, with whatever policies: placing the chosen decision
never over-commits a device (slots, memory, cores), an exclusive (100-core) holder is alone on
its device, the namespace quota holds, and removing pods restores the exact prior usage.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol.pod.devices import DeviceUsageSummary
from hami_protocol.vendor.table import NVIDIA
from hami_scheduler.core import (
    NodeUsage,
    QuotaLedger,
    QuotaLimits,
    SelectMemo,
    apply_usage,
    decision_usage,
    remove_usage,
    select_node,
)

from ..core_helpers import node_st, plan_st

NAMESPACE = "team"
LIMITS = QuotaLimits(memory=12000, cores=300)


def _check(
    nodes: dict[str, NodeUsage], placed: list[tuple[str, tuple[DeviceUsageSummary, ...]]]
) -> None:
    for n in nodes.values():
        for d in n.devices:
            assert 0 <= d.used <= max(d.count, 0), d
            assert 0 <= d.usedmem <= d.totalmem, d
            assert 0 <= d.usedcores <= d.totalcore, d
    holders: dict[tuple[str, str], list[DeviceUsageSummary]] = defaultdict(list)
    for name, usage in placed:
        for summary in usage:
            holders[(name, summary.uuid)].append(summary)
    for (name, uuid), held in holders.items():
        device = nodes[name].device(uuid)
        assert device is not None
        # Exclusive: one container asked for every core (a pod's summary adds its containers,
        # so two containers of 50 cores each read 100 too, and share the device legitimately).
        exclusive = device.totalcore == 100 and any(
            h.usedcores == 100 and h.slots == 1 for h in held
        )
        if exclusive:
            assert len(held) == 1, (uuid, held)


@settings(max_examples=120)
@given(st.data())
def test_no_sequence_of_decisions_over_commits(data: st.DataObject) -> None:
    nodes = {name: data.draw(node_st(name)) for name in ("n0", "n1")}
    initial = dict(nodes)
    ledger = QuotaLedger()
    memo = SelectMemo()
    placed: list[tuple[str, tuple[DeviceUsageSummary, ...]]] = []
    for _ in range(data.draw(st.integers(1, 12))):
        if placed and data.draw(st.integers(0, 3)) == 0:
            name, usage = placed.pop(data.draw(st.integers(0, len(placed) - 1)))
            nodes[name] = remove_usage(nodes[name], usage)
            ledger.remove(NAMESPACE, usage)
        else:
            quota = {NVIDIA: ledger.view(NAMESPACE, NVIDIA, LIMITS)}
            plan = data.draw(plan_st(quota=quota))
            selection = select_node(plan, nodes, memo=memo)
            if selection.node is None or selection.decision is None:
                continue
            usage = decision_usage(selection.decision, plan)
            before = nodes[selection.node]
            nodes[selection.node] = apply_usage(before, usage)
            assert remove_usage(nodes[selection.node], usage) == before
            ledger.add(NAMESPACE, usage)
            placed.append((selection.node, usage))
        _check(nodes, placed)
        memory, cores = ledger.used(NAMESPACE, NVIDIA)
        assert memory <= 12000
        assert cores <= 300
    for name, usage in reversed(placed):
        nodes[name] = remove_usage(nodes[name], usage)
    assert nodes == initial


@given(node_st(with_usage=True), st.data())
def test_remove_exactly_undoes_apply(n: NodeUsage, data: st.DataObject) -> None:
    uuids = [d.uuid for d in n.devices] + ["unknown"]
    usage = data.draw(
        st.lists(
            st.builds(
                DeviceUsageSummary,
                uuid=st.sampled_from(uuids),
                type=st.just(NVIDIA),
                usedmem=st.integers(0, 10_000),
                usedcores=st.integers(0, 200),
                slots=st.integers(1, 3),
            ),
            max_size=6,
        )
    )
    placed = apply_usage(n, usage)
    assert remove_usage(placed, usage) == n
    assert placed.totals.used - n.totals.used == sum(u.slots for u in usage if u.uuid != "unknown")
