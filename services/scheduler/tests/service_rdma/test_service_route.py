"""One rule decides "HAMi's path or the joint GPU + NIC path?" for the filter, the autoscaler's
full-``Nodes`` path and ``--filter-mode all`` bind: the same pod gets the same answer from each.

In the first tests node ``n`` carries another pod's exclusive PCIe claim on one switch's two
GPUs; node ``m`` has no claim.  A plain pod asking for 7 whole GPUs fits HAMi's fit on ``n`` (7
GPUs are free), but the rule sends it through the joint decision there, which keeps it off the
claimed switch: only 6 GPUs are left to it.  On ``m`` the rule keeps it on HAMi's path.  The
last two show the rule's refusals before deciding: no NICs for a NIC pod, and no GPUs needed by
a NIC-only pod.
"""

from __future__ import annotations

from typing import Any

import pytest

from hami_protocol import keys
from hami_protocol.topology.layout import encode_rdma_register
from hami_scheduler.core.joint.route import NO_NIC_REASON

from ..service_helpers import (
    Harness,
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    pod_object,
    refused,
)
from .rdma_helpers import (
    PCIE_LEVEL_BOTH,
    SAME_PCIE,
    gpu_indices,
    rdma_pod,
    switch_of_gpu,
    topo_annotations,
    topo_nics,
)

pytestmark = pytest.mark.timeout(60)

CLAIM_REASON = "another pod's exclusive (PCIeLevel) claim on their PCIe switch"


async def claimed_cluster(h: Harness) -> int:
    """Nodes ``n`` and ``m``; pod ``a`` placed and bound on ``n`` with an exclusive claim (in
    either filter mode); the claimed GPU's index."""
    for name in ("n", "m"):
        await h.add_node(name, annotations=topo_annotations(name))
        await h.synced_node(name)
    exclusive = await h.add_pod(
        rdma_pod("a", gpus=1, mem=8000, hint=PCIE_LEVEL_BOTH, joint=SAME_PCIE)
    )
    assert (await h.filter(exclusive, ["n"]))["Error"] == ""
    assert await h.bind(exclusive, "n") == ""
    # The device plugin has allocated for pod a: it releases the node lock.
    unlock = {"metadata": {"annotations": {keys.NODE_LOCK: None}}}
    await h.api.patch("nodes", "n", unlock, patch_type="merge")
    assert h.scheduler.cache.gpu_claimed == {"n"}
    (claimed,) = gpu_indices(annotations_of(h.pod("a"))[keys.NVIDIA_DEVICES_ALLOCATED])
    return claimed


def plain_pod(name: str, count: int) -> dict[str, Any]:
    return pod_object(name, container(limits=gpu_limits(count)))


async def simulated(h: Harness, pod: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """The autoscaler's call: full Node objects, no node names."""
    items = [h.node(name) for name in nodes]
    status, reply = await h.post("filter", {"Pod": pod, "Nodes": {"items": items}})
    assert status == 200
    assert isinstance(reply, dict)
    return reply


async def test_filter_nodes_path_and_bind_refuse_a_claimed_node_with_one_reason() -> None:
    async with harness(filter_mode="all") as h:
        await claimed_cluster(h)
        pod = await h.add_pod(plain_pod("b", 7))
        filtered = await h.filter(pod, ["n", "m"])
        assert filtered["NodeNames"] == ["m"]
        reason = refused(filtered)["n"]
        assert CLAIM_REASON in reason
        nodes_path = await simulated(h, pod, ["n", "m"])
        assert [node["metadata"]["name"] for node in nodes_path["Nodes"]["items"]] == ["m"]
        assert refused(nodes_path) == {"n": reason}
        assert await h.bind(pod, "n") == f"node n no longer fits: {reason}"
        # HAMi's path on the unclaimed node, through bind too.
        assert await h.bind(h.pod("b"), "m") == ""
        assert annotations_of(h.pod("b"))[keys.VGPU_NODE] == "m"


async def test_filter_nodes_path_and_bind_place_a_fitting_pod_off_the_claimed_switch() -> None:
    async with harness(filter_mode="all") as h:
        claimed = await claimed_cluster(h)
        pod = await h.add_pod(plain_pod("b", 6))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        nodes_path = await simulated(h, pod, ["n"])
        assert [node["metadata"]["name"] for node in nodes_path["Nodes"]["items"]] == ["n"]
        assert await h.bind(pod, "n") == ""
        given = gpu_indices(annotations_of(h.pod("b"))[keys.NVIDIA_DEVICES_ALLOCATED])
        assert len(given) == 6
        assert switch_of_gpu(claimed) not in {switch_of_gpu(index) for index in given}


async def test_single_mode_filter_takes_the_same_rule() -> None:
    async with harness() as h:
        await claimed_cluster(h)
        pod = await h.add_pod(plain_pod("b", 7))
        reply = await h.filter(pod, ["n", "m"])
        assert reply["NodeNames"] == ["m"]
        assert CLAIM_REASON in refused(reply)["n"]
        assert refused(await simulated(h, pod, ["n"])) == {"n": refused(reply)["n"]}


async def test_a_node_without_nics_is_refused_for_a_nic_pod_with_one_reason() -> None:
    async with harness(filter_mode="all") as h:
        await h.add_node("plain", gpus("plain", 2))
        await h.synced_node("plain")
        pod = await h.add_pod(rdma_pod("p", gpus=1))
        assert refused(await h.filter(pod, ["plain"])) == {"plain": NO_NIC_REASON}
        assert refused(await simulated(h, pod, ["plain"])) == {"plain": NO_NIC_REASON}
        assert await h.bind(pod, "plain") == f"node plain: {NO_NIC_REASON}"


async def test_a_nic_only_pod_may_take_a_node_without_gpus_on_every_path() -> None:
    async with harness(filter_mode="all") as h:
        nics_only = {keys.RDMA_REGISTER: encode_rdma_register(topo_nics())}
        await h.add_node("nics", annotations=nics_only)
        await eventually(lambda: "nics" in h.scheduler.cache.nics, what="nics seen")
        pod = await h.add_pod(rdma_pod("p", hint=None, joint=None))
        assert (await h.filter(pod, ["nics"]))["NodeNames"] == ["nics"]
        nodes_path = await simulated(h, pod, ["nics"])
        assert [node["metadata"]["name"] for node in nodes_path["Nodes"]["items"]] == ["nics"]
        assert await h.bind(pod, "nics") == ""
        assert keys.RDMA_DEVICES_ALLOCATED in annotations_of(h.pod("p"))
