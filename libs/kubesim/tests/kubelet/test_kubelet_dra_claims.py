"""Claim resolution and the kubelet's checks on claims (pure), plus the pure helpers the DRA
side of the kubelet stand-in adds: the service choice at registration, the container records
and the status of a pod whose claims are not prepared."""

from __future__ import annotations

from typing import Any

import pytest

from hami_kube.objects import PodView
from hami_kubesim import dra_objects as dra
from hami_kubesim.kubelet.dra.claims import (
    ClaimError,
    ContainerClaim,
    PodClaim,
    PreparedDevice,
    claim_drivers,
    container_claims,
    devices_for_request,
    pod_claims,
)
from hami_kubesim.kubelet.dra.watcher import choose_service
from hami_kubesim.kubelet.status import (
    ContainerAllocation,
    PodAllocation,
    ResourceAllocation,
    creating_status,
)

POD_UID = "pod-uid-1"


def _pod(claims: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None) -> PodView:
    return PodView(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": POD_UID},
            "spec": {
                "resourceClaims": claims,
                "initContainers": [
                    {"name": "init", "resources": {"claims": [dra.container_claim("gpu")]}}
                ],
                "containers": [
                    {"name": "main", "resources": {"claims": [dra.container_claim("gpu", "a")]}},
                    {"name": "side", "resources": {"claims": [dra.container_claim("other")]}},
                    {"name": "none"},
                ],
            },
            "status": {} if statuses is None else {"resourceClaimStatuses": statuses},
        }
    )


def _claim(
    *, reserved: bool = True, allocated: bool = True, owner: str | None = None
) -> dict[str, Any]:
    claim = dra.resource_claim("c1", namespace="ns")
    claim["metadata"]["uid"] = "claim-uid"
    if owner is not None:
        claim["metadata"]["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner, "controller": True}
        ]
    status: dict[str, Any] = {}
    if allocated:
        results = [
            dra.allocation_result("gpu", "gpu-0", pool="n"),
            dra.allocation_result("gpu", "gpu-1", pool="n"),
            dra.allocation_result("nic", "nic-0", pool="n", driver="net.example.com"),
        ]
        status["allocation"] = dra.allocation(results, node="n")
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": POD_UID}]
    claim["status"] = status
    return claim


def test_pod_claims_direct_and_from_templates() -> None:
    pod = _pod(
        [
            dra.pod_claim("gpu", claim="c1"),
            dra.pod_claim("other", template="t"),
            dra.pod_claim("unneeded", template="t"),
        ],
        [
            {"name": "other", "resourceClaimName": "p-other-x7k2q"},
            {"name": "unneeded"},  # the controller decided no claim is needed
        ],
    )
    assert pod_claims(pod) == (
        PodClaim("gpu", "c1", must_check_owner=False),
        PodClaim("other", "p-other-x7k2q", must_check_owner=True),
    )


def test_template_claim_not_created_yet() -> None:
    pod = _pod([dra.pod_claim("gpu", template="t")])
    with pytest.raises(ClaimError, match=r'^pod "ns/p": ResourceClaim not created yet$'):
        pod_claims(pod)


def test_claim_checks_and_drivers() -> None:
    pod = _pod([dra.pod_claim("gpu", claim="c1")])
    direct = PodClaim("gpu", "c1", must_check_owner=False)
    assert claim_drivers(pod, direct, _claim()) == ("gpu.hami.io", "net.example.com")
    with pytest.raises(ClaimError) as caught:
        claim_drivers(pod, direct, _claim(reserved=False))
    assert str(caught.value) == (
        f"pod p ({POD_UID}) is not allowed to use ResourceClaim c1 (claim-uid)"
    )
    with pytest.raises(ClaimError, match=r"^ResourceClaim c1: not allocated$"):
        claim_drivers(pod, direct, _claim(allocated=False))
    templated = PodClaim("gpu", "c1", must_check_owner=True)
    assert claim_drivers(pod, templated, _claim(owner=POD_UID))
    with pytest.raises(ClaimError) as caught:
        claim_drivers(pod, templated, _claim(owner="someone-else"))
    assert str(caught.value) == (
        "ResourceClaim ns/c1 was not created for pod ns/p (pod is not owner)"
    )


def test_container_claims_in_start_order() -> None:
    pod = _pod([dra.pod_claim("gpu", claim="c1"), dra.pod_claim("other", template="t")])
    refs = (PodClaim("gpu", "c1", False),)  # "other" needs no claim: skipped
    entries = container_claims(pod, refs)
    assert entries == (
        ContainerClaim("init", "gpu", "c1"),
        ContainerClaim("main", "gpu", "c1", "a"),
    )
    assert [e.resource for e in entries] == ["claim:gpu", "claim:gpu/a"]


def test_devices_for_a_request() -> None:
    a = PreparedDevice("d", "p", "gpu-0", ("a",), ("k/c=1",))
    sub = PreparedDevice("d", "p", "gpu-1", ("b/fast",), ("k/c=2",))
    every = PreparedDevice("d", "p", "gpu-2", (), ("k/c=3",))
    devices = (a, sub, every)
    assert devices_for_request(devices, "") == devices
    assert devices_for_request(devices, "a") == (a, every)
    assert devices_for_request(devices, "b") == (sub, every)  # subrequests count for b
    assert a.resource_id == "d/p/gpu-0"


def test_service_choice() -> None:
    assert choose_service("d", "/e", ("v1beta1.DRAPlugin", "v1.DRAPlugin")) == "v1.DRAPlugin"
    with pytest.raises(ValueError, match="none of services") as caught:
        choose_service("d", "/e", ("v1beta1.DRAPlugin",))
    assert str(caught.value) == (
        "invalid supported gRPC versions of DRA driver plugin d at endpoint /e: none of "
        'services supported by the plugin (["v1beta1.DRAPlugin"]) are supported by the kubelet '
        '(["v1.DRAPlugin"])'
    )
    with pytest.raises(ValueError, match=r"empty list of supported gRPC services \(aka"):
        choose_service("d", "/e", ())


def test_claim_records_follow_each_containers_plugin_records() -> None:
    plugin = ResourceAllocation("nvidia.com/gpu", ("g0",), envs={"A": "1"})
    claim = ResourceAllocation("claim:gpu", ("d/p/gpu-0",), envs={"A": "2", "B": "3"})
    allocation = PodAllocation(
        "ns", "p", POD_UID, "n", (ContainerAllocation("main", "app", (plugin,)),)
    )
    merged = allocation.with_resources({"main": (claim,), "gone": (claim,)})
    container = merged.containers[0]
    assert container.resources == (plugin, claim)
    assert container.envs == {"A": "2", "B": "3"}
    assert merged.has_devices


def test_status_of_a_pod_waiting_for_its_claims() -> None:
    pod = _pod([dra.pod_claim("gpu", claim="c1")])
    status = creating_status(pod, now="2026-01-01T00:00:00Z")
    assert status["phase"] == "Pending"
    assert status["conditions"][0]["type"] == "PodReadyToStartContainers"
    assert status["conditions"][0]["status"] == "False"
    assert {s["state"]["waiting"]["reason"] for s in status["containerStatuses"]} == {
        "ContainerCreating"
    }
