"""The resourceclaim controller stand-in against the API server: claims made from templates
(name, owner, annotation, labels), the pod's ``status.resourceClaimStatuses``, adoption of an
orphan, ``reservedFor`` cleanup with deallocation and finalizer removal, and generated claims
going with their pod (kubesim has no garbage collector: the controller deletes them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from hami_kubesim.controllers.claims import (
    FINALIZER,
    POD_CLAIM_NAME_ANNOTATION,
    claim_from_template,
    generate_name,
    sync_claim,
)
from hami_kubesim.controllers.resourceclaim import ResourceClaimController
from hami_kubesim.dra_objects import (
    allocation,
    allocation_result,
    claim_template,
    container_claim,
    exact_request,
    pod_claim,
    pod_reference,
    resource_claim,
)
from hami_kubesim.testing import RunningApiServer, eventually

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def controller(sim: RunningApiServer) -> AsyncIterator[ResourceClaimController]:
    async with ResourceClaimController(sim.url) as running:
        yield running


def pod(name: str, *claims: dict[str, Any]) -> dict[str, Any]:
    refs = [container_claim(c["name"]) for c in claims]
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "resourceClaims": list(claims),
            "containers": [{"name": "c", "image": "img:1", "resources": {"claims": refs}}],
        },
    }


def claims_of(sim: RunningApiServer) -> list[dict[str, Any]]:
    return sim.server.list("resourceclaims", namespace="default")


def stored_pod(sim: RunningApiServer, name: str) -> dict[str, Any]:
    found = sim.server.try_get("pods", name, namespace="default")
    return found or {}


# -- the decisions ---------------------------------------------------------------------------


def test_generate_name_cuts_both_parts_proportionally() -> None:
    assert generate_name("train", "gpu") == "train-gpu-"
    long = generate_name("p" * 60, "c" * 30)
    assert long == "p" * 37 + "-" + "c" * 18
    assert len(long) <= 57


def test_claim_from_template_copies_spec_and_metadata() -> None:
    template = claim_template(
        "t", exact_request(count=2), labels={"a": "1"}, annotations={"b": "2"}
    )
    owner = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}}
    made = claim_from_template(owner, "gpu", template)
    assert made["metadata"] == {
        "generateName": "p-gpu-",
        "namespace": "ns",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "p",
                "uid": "u1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "annotations": {"b": "2", POD_CLAIM_NAME_ANNOTATION: "gpu"},
        "labels": {"a": "1"},
    }
    assert made["spec"] == template["spec"]["spec"]


def _claim(*refs: dict[str, Any], finalized: bool = True) -> dict[str, Any]:
    claim = resource_claim("c")
    claim["metadata"]["finalizers"] = [FINALIZER] if finalized else []
    claim["status"] = {
        "allocation": allocation([allocation_result("gpu", "gpu-0", pool="n")]),
        "reservedFor": list(refs),
    }
    return claim


def _pod(name: str, uid: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"nodeName": "n"},
        "status": {"phase": phase},
    }


def test_sync_claim_keeps_running_pods_and_drops_others() -> None:
    running, done = _pod("a", "ua"), _pod("b", "ub", phase="Succeeded")
    refs = [
        pod_reference(running),
        pod_reference(done),
        {"resource": "pods", "name": "c", "uid": "uc"},
    ]
    decision = sync_claim(_claim(*refs), {"a": running, "b": done})
    assert decision.status is not None
    assert decision.status["reservedFor"] == [pod_reference(running)]
    assert "allocation" in decision.status
    assert not decision.remove_finalizer
    assert not decision.delete


def test_sync_claim_deallocates_with_the_last_pod() -> None:
    gone = _pod("a", "ua")
    decision = sync_claim(_claim(pod_reference(gone)), {"a": _pod("a", "another-uid")})
    assert decision.status == {}
    assert decision.remove_finalizer
    unfinalized = sync_claim(_claim(pod_reference(gone), finalized=False), {})
    assert unfinalized.status is not None
    assert "allocation" in unfinalized.status
    assert not unfinalized.remove_finalizer


# -- against the API server ------------------------------------------------------------------


async def test_template_claim_is_made_owned_and_recorded(
    sim: RunningApiServer, controller: ResourceClaimController
) -> None:
    await sim.server.create("resourceclaimtemplates", claim_template("gpus", labels={"team": "ml"}))
    created = await sim.server.create("pods", pod("train", pod_claim("gpu", template="gpus")))
    uid = created["metadata"]["uid"]

    def recorded() -> bool:
        return bool(stored_pod(sim, "train").get("status", {}).get("resourceClaimStatuses"))

    await eventually(recorded, what="pod status names the generated claim")
    [claim] = claims_of(sim)
    name = claim["metadata"]["name"]
    assert name.startswith("train-gpu-")
    assert len(name) == len("train-gpu-") + 5
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "train",
            "uid": uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["metadata"]["annotations"] == {POD_CLAIM_NAME_ANNOTATION: "gpu"}
    assert claim["metadata"]["labels"] == {"team": "ml"}
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    statuses = stored_pod(sim, "train")["status"]["resourceClaimStatuses"]
    assert statuses == [{"name": "gpu", "resourceClaimName": name}]

    await sim.server.delete("pods", "train", namespace="default")
    await eventually(lambda: not claims_of(sim), what="the generated claim goes with its pod")


async def test_template_created_later_and_orphan_adopted(
    sim: RunningApiServer, controller: ResourceClaimController
) -> None:
    created = await sim.server.create("pods", pod("p1", pod_claim("gpu", template="late")))
    orphan = claim_from_template(created, "gpu", claim_template("any"))
    made = await sim.server.create("resourceclaims", orphan)
    await sim.server.create("pods", pod("p2", pod_claim("gpu", template="late")))
    await sim.server.create("resourceclaimtemplates", claim_template("late"))

    def both_recorded() -> bool:
        return all(
            stored_pod(sim, p).get("status", {}).get("resourceClaimStatuses") for p in ("p1", "p2")
        )

    await eventually(both_recorded, what="both pods get their claims")
    [entry] = stored_pod(sim, "p1")["status"]["resourceClaimStatuses"]
    assert entry["resourceClaimName"] == made["metadata"]["name"]  # adopted, not made again
    assert len(claims_of(sim)) == 2


async def test_reserved_for_cleanup_deallocates_and_releases_a_shared_claim(
    sim: RunningApiServer, controller: ResourceClaimController
) -> None:
    claim = await sim.server.create("resourceclaims", resource_claim("shared"))
    users = [
        await sim.server.create("pods", pod(n, pod_claim("gpu", claim="shared")))
        for n in ("a", "b")
    ]
    meta = {**claim["metadata"], "finalizers": [FINALIZER]}
    claim = await sim.server.update("resourceclaims", {**claim, "metadata": meta})
    status = {
        "allocation": allocation([allocation_result("gpu", "gpu-0", pool="n")], node="n"),
        "reservedFor": [pod_reference(u) for u in users],
    }
    await sim.server.update("resourceclaims", {**claim, "status": status}, subresource="status")

    await sim.server.delete("pods", "a", namespace="default")

    def reserved() -> list[Any]:
        found = sim.server.get("resourceclaims", "shared", namespace="default")
        return list(found["status"].get("reservedFor") or [])

    await eventually(lambda: reserved() == [pod_reference(users[1])], what="a leaves reservedFor")
    await sim.server.delete("pods", "b", namespace="default")

    def released() -> bool:
        found = sim.server.get("resourceclaims", "shared", namespace="default")
        return found["status"] == {} and not found["metadata"].get("finalizers")

    await eventually(released, what="the last pod gone: deallocated, finalizer removed")
    assert sim.server.try_get("resourceclaims", "shared", namespace="default") is not None
