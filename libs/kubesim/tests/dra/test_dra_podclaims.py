"""DynamicResources' pod-level decisions (PreFilter, allocated claims' node check, usage)."""

from __future__ import annotations

from typing import Any

import pytest

from hami_kube.objects import NodeView, PodView
from hami_kubesim.dra.model import DeviceId
from hami_kubesim.dra.podclaims import (
    ClaimsNotReady,
    allocated_fits,
    in_use,
    pod_claims,
)
from hami_kubesim.dra_objects import (
    DRIVER,
    allocation,
    allocation_result,
    pod_claim,
    resource_claim,
)

POD = PodView(
    {
        "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
        "spec": {"resourceClaims": [pod_claim("a", claim="plain"), pod_claim("t", template="x")]},
        "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-abc"}]},
    }
)
OWNER = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
SHARE = allocation_result("gpu", "gpu-0", pool="node-a", share_id="s1", consumed={"memory": "4Gi"})


def claims(**extra: dict[str, Any]) -> dict[str, dict[str, Any]]:
    plain = resource_claim("plain")
    templated = resource_claim("p-t-abc")
    templated["metadata"]["ownerReferences"] = [OWNER]
    found = {"default/plain": plain, "default/p-t-abc": templated}
    found.update(extra)
    return found


def test_claims_split_into_to_allocate_and_allocated() -> None:
    store = claims()
    store["default/plain"]["status"] = {"allocation": allocation([SHARE], node="node-a")}
    split = pod_claims(POD, store.get)
    assert split is not None
    assert [c["metadata"]["name"] for c in split.to_allocate] == ["p-t-abc"]
    assert [c["metadata"]["name"] for c in split.allocated] == ["plain"]
    assert allocated_fits(split, NodeView({"metadata": {"name": "node-a"}}))
    assert not allocated_fits(split, NodeView({"metadata": {"name": "node-b"}}))


def test_a_pod_without_claims_needs_no_plugin() -> None:
    assert pod_claims(PodView({"metadata": {"name": "q"}, "spec": {}}), claims().get) is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.pop("default/plain"), 'resourceclaim.resource.k8s.io "plain" not found'),
        (
            lambda s: s["default/plain"]["metadata"].update(
                deletionTimestamp="2026-01-01T00:00:00Z"
            ),
            'resourceclaim "plain" is being deleted',
        ),
        (
            lambda s: s["default/p-t-abc"]["metadata"].pop("ownerReferences"),
            "ResourceClaim default/p-t-abc was not created for Pod default/p (Pod is not owner)",
        ),
    ],
)
def test_claims_not_ready(change: Any, message: str) -> None:
    store = claims()
    change(store)
    with pytest.raises(ClaimsNotReady, match=message.replace("(", r"\(").replace(")", r"\)")):
        pod_claims(POD, store.get)


def test_a_template_claim_not_created_yet_and_one_allocated_elsewhere_in_flight() -> None:
    waiting = PodView({**POD.raw, "status": {}})
    with pytest.raises(ClaimsNotReady, match='pod "default/p": ResourceClaim not created yet'):
        pod_claims(waiting, claims().get)
    with pytest.raises(ClaimsNotReady, match="is in the process of being allocated"):
        pod_claims(POD, claims().get, in_flight=["default/plain"])


def test_usage_counts_a_stored_allocation_once_and_in_flight_ones_until_stored() -> None:
    stored = claims()
    stored["default/plain"]["status"] = {"allocation": allocation([SHARE])}
    gpu0 = DeviceId(DRIVER, "node-a", "gpu-0")
    flying = {"default/plain": allocation([SHARE]), "default/other": allocation([SHARE])}
    held = in_use(stored.values(), flying)
    assert held.consumed[gpu0] == {"memory": 8 << 30}  # plain (stored) + other (in flight)
    assert in_use(stored.values(), flying, exclude=["default/other"]).consumed[gpu0] == {
        "memory": 4 << 30
    }
