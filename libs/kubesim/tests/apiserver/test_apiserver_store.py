"""Store semantics without HTTP: resourceVersions, conflicts, defaults, deletion, binding."""

from __future__ import annotations

from typing import Any

import pytest

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.apiserver.selectors import parse_field_selector
from hami_kubesim.apiserver.store import BOOTSTRAP_NAMESPACES, Store
from hami_kubesim.objects.resources import (
    CONFIG_MAPS,
    LEASES,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITY_CLASSES,
)


def pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "img:1"}], **spec},
    }


@pytest.fixture
def store() -> Store:
    return Store(seed=1)


def error_of(call: Any) -> StatusError:
    with pytest.raises(StatusError) as info:
        call()
    return info.value


def test_bootstrap_namespaces_exist_and_one_counter(store: Store) -> None:
    names = [e.obj["metadata"]["name"] for e in store.select(NAMESPACES).entries]
    assert names == sorted(BOOTSTRAP_NAMESPACES)
    rvs = sorted(
        int(e.obj["metadata"]["resourceVersion"]) for e in store.select(NAMESPACES).entries
    )
    assert rvs == [1, 2, 3, 4]
    # Then the two system PriorityClasses (kube-apiserver's bootstrap hook).
    classes = [e.obj["metadata"]["name"] for e in store.select(PRIORITY_CLASSES).entries]
    assert classes == ["system-cluster-critical", "system-node-critical"]
    assert store.rv == 6


def test_create_fills_system_fields_and_pod_defaults(store: Store) -> None:
    body = pod()
    body["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1, "cpu": "500m"}}
    entry = store.create(PODS, body, namespace="default")
    obj = entry.obj
    meta = obj["metadata"]
    assert meta["namespace"] == "default"
    assert meta["resourceVersion"] == str(store.rv) == str(entry.rv)
    assert len(meta["uid"]) == 36
    assert meta["creationTimestamp"].endswith("Z")
    assert obj["spec"]["schedulerName"] == "default-scheduler"
    assert obj["status"] == {"phase": "Pending", "qosClass": "Burstable"}
    resources = obj["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/gpu": "1", "cpu": "500m"}
    assert resources["requests"] == {"nvidia.com/gpu": "1", "cpu": "500m"}
    assert "kind" not in obj
    assert "apiVersion" not in obj


@pytest.mark.parametrize(
    ("requests", "limits", "qos"),
    [
        ({}, {}, "BestEffort"),
        ({"cpu": "1"}, {}, "Burstable"),
        ({}, {"cpu": "1", "memory": "1Gi"}, "Guaranteed"),
        ({"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "1", "memory": "1Gi"}, "Guaranteed"),
        ({"cpu": "500m"}, {"cpu": "1", "memory": "1Gi"}, "Burstable"),
    ],
)
def test_qos_class(
    store: Store, requests: dict[str, str], limits: dict[str, str], qos: str
) -> None:
    body = pod()
    body["spec"]["containers"][0]["resources"] = {"requests": requests, "limits": limits}
    assert store.create(PODS, body, namespace="default").obj["status"]["qosClass"] == qos


def test_client_status_is_ignored_on_pod_create(store: Store) -> None:
    body = pod()
    body["status"] = {"phase": "Running"}
    assert store.create(PODS, body, namespace="default").obj["status"]["phase"] == "Pending"


def test_generate_name(store: Store) -> None:
    first = store.create(
        PODS, {**pod(""), "metadata": {"generateName": "web-"}}, namespace="default"
    )
    second = store.create(
        PODS, {**pod(""), "metadata": {"generateName": "web-"}}, namespace="default"
    )
    a, b = first.obj["metadata"]["name"], second.obj["metadata"]["name"]
    assert a.startswith("web-")
    assert len(a) == 9
    assert a != b


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"metadata": {}},
            'Pod "" is invalid: metadata.name: Required value: name or generateName is required',
        ),
        (
            pod("Bad_Name"),
            'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": '
            "a lowercase RFC 1123 subdomain",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {}},
            'Pod "x" is invalid: spec.containers: Required value',
        ),
    ],
)
def test_invalid_pods(store: Store, body: dict[str, Any], message: str) -> None:
    err = error_of(lambda: store.create(PODS, body, namespace="default"))
    assert err.code == 422
    assert err.reason == "Invalid"
    assert err.message.startswith(message)
    assert err.status()["details"]["kind"] == "Pod"


def test_extended_resources_need_equal_requests_and_limits(store: Store) -> None:
    body = pod()
    body["spec"]["containers"][0]["resources"] = {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "1"},
    }
    err = error_of(lambda: store.create(PODS, body, namespace="default"))
    assert err.code == 422
    assert "must be equal to nvidia.com/gpu limit of 1" in err.message


def test_already_exists_and_not_found_shapes(store: Store) -> None:
    store.create(PODS, pod("x"), namespace="default")
    err = error_of(lambda: store.create(PODS, pod("x"), namespace="default"))
    assert err.status() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "x" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "x", "kind": "pods"},
        "code": 409,
    }
    err = error_of(lambda: store.entry(LEASES, "default", "nope"))
    assert err.status()["message"] == 'leases.coordination.k8s.io "nope" not found'
    assert err.status()["details"] == {
        "name": "nope",
        "group": "coordination.k8s.io",
        "kind": "leases",
    }


def test_create_with_resource_version_is_refused(store: Store) -> None:
    body = pod()
    body["metadata"]["resourceVersion"] = "12"
    err = error_of(lambda: store.create(PODS, body, namespace="default"))
    assert (err.code, err.message) == (
        500,
        "resourceVersion should not be set on objects to be created",
    )


def test_missing_namespace_is_not_found(store: Store) -> None:
    err = error_of(lambda: store.create(PODS, pod(), namespace="ghost"))
    assert (err.code, err.message) == (404, 'namespaces "ghost" not found')


def test_namespace_mismatch_is_bad_request(store: Store) -> None:
    body = pod()
    body["metadata"]["namespace"] = "kube-system"
    err = error_of(lambda: store.create(PODS, body, namespace="default"))
    assert err.code == 400
    assert "does not match the namespace" in err.message


def test_update_conflict_and_success(store: Store) -> None:
    created = store.create(
        CONFIG_MAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, namespace="default"
    )
    rv = created.obj["metadata"]["resourceVersion"]
    updated = store.update(
        CONFIG_MAPS,
        "default",
        "c",
        {"metadata": {"name": "c", "resourceVersion": rv}, "data": {"a": "2"}},
    )
    assert int(updated.obj["metadata"]["resourceVersion"]) > int(rv)
    assert updated.obj["metadata"]["uid"] == created.obj["metadata"]["uid"]
    err = error_of(
        lambda: store.update(
            CONFIG_MAPS,
            "default",
            "c",
            {"metadata": {"name": "c", "resourceVersion": rv}, "data": {}},
        )
    )
    assert err.code == 409
    assert err.message == (
        'Operation cannot be fulfilled on configmaps "c": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


def test_unconditional_update_allowed_for_pods_not_leases(store: Store) -> None:
    store.create(PODS, pod("x"), namespace="default")
    body = pod("x")
    body["metadata"]["labels"] = {"a": "b"}
    assert store.update(PODS, "default", "x", body).obj["metadata"]["labels"] == {"a": "b"}
    store.create(LEASES, {"metadata": {"name": "l"}, "spec": {}}, namespace="default")
    err = error_of(
        lambda: store.update(LEASES, "default", "l", {"metadata": {"name": "l"}, "spec": {}})
    )
    assert err.code == 422
    assert err.message == (
        'Lease.coordination.k8s.io "l" is invalid: metadata.resourceVersion: Invalid value: 0x0: '
        "must be specified for an update"
    )


def test_noop_writes_keep_resource_version(store: Store) -> None:
    created = store.create(
        CONFIG_MAPS, {"metadata": {"name": "c"}, "data": {"a": "1"}}, namespace="default"
    )
    before = store.rv
    again = store.patch(
        CONFIG_MAPS, "default", "c", "application/merge-patch+json", {"data": {"a": "1"}}
    )
    assert again is created
    assert store.rv == before
    put = store.update(CONFIG_MAPS, "default", "c", {"metadata": {"name": "c"}, "data": {"a": "1"}})
    assert put is created
    assert store.rv == before
    assert len(store.history(CONFIG_MAPS)) == 1


def test_patch_with_stale_resource_version_conflicts(store: Store) -> None:
    created = store.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace="default")
    rv = created.obj["metadata"]["resourceVersion"]
    store.patch(CONFIG_MAPS, "default", "c", "application/merge-patch+json", {"data": {"x": "1"}})
    err = error_of(
        lambda: store.patch(
            CONFIG_MAPS,
            "default",
            "c",
            "application/merge-patch+json",
            {"metadata": {"resourceVersion": rv}, "data": {"x": "2"}},
        )
    )
    assert err.code == 409


def test_uid_change(store: Store) -> None:
    store.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace="default")
    err = error_of(
        lambda: store.patch(
            CONFIG_MAPS,
            "default",
            "c",
            "application/merge-patch+json",
            {"metadata": {"uid": "other"}},
        )
    )
    assert err.code == 422
    assert 'metadata.uid: Invalid value: "other": field is immutable' in err.message
    err = error_of(
        lambda: store.update(
            CONFIG_MAPS, "default", "c", {"metadata": {"name": "c", "uid": "other"}}
        )
    )
    assert err.code == 409
    assert "Precondition failed: UID in precondition: other" in err.message


def test_main_resource_keeps_status_and_status_keeps_spec(store: Store) -> None:
    store.create(
        NODES, {"metadata": {"name": "n"}, "status": {"capacity": {"cpu": 4}}}, namespace=None
    )
    node = store.patch(
        NODES, None, "n", "application/merge-patch+json", {"status": {"capacity": {"cpu": "8"}}}
    )
    assert node.obj["status"]["capacity"] == {"cpu": "4"}
    node = store.patch(
        NODES,
        None,
        "n",
        "application/merge-patch+json",
        {"spec": {"unschedulable": True}, "status": {"capacity": {"cpu": "8"}}},
        subresource="status",
    )
    assert node.obj["status"]["capacity"] == {"cpu": "8"}
    assert "unschedulable" not in node.obj.get("spec", {})


def test_pod_spec_is_immutable_except_allowed_fields(store: Store) -> None:
    store.create(PODS, pod("x"), namespace="default")
    err = error_of(
        lambda: store.patch(
            PODS, "default", "x", "application/merge-patch+json", {"spec": {"nodeName": "n1"}}
        )
    )
    assert err.code == 422
    assert "pod updates may not change fields" in err.message
    image = store.patch(
        PODS,
        "default",
        "x",
        "application/strategic-merge-patch+json",
        {"spec": {"containers": [{"name": "c", "image": "img:2"}]}},
    )
    assert image.obj["spec"]["containers"][0]["image"] == "img:2"


def test_bind_sets_node_condition_and_annotations(store: Store) -> None:
    store.create(PODS, pod("x"), namespace="default")
    binding = {
        "metadata": {"name": "x", "annotations": {"a": "1"}},
        "target": {"kind": "Node", "name": "n1"},
    }
    bound = store.bind("default", "x", binding)
    assert bound.obj["spec"]["nodeName"] == "n1"
    assert bound.obj["metadata"]["annotations"] == {"a": "1"}
    (condition,) = bound.obj["status"]["conditions"]
    assert condition["type"] == "PodScheduled"
    assert condition["status"] == "True"
    err = error_of(lambda: store.bind("default", "x", binding))
    assert err.code == 409
    assert err.message == (
        'Operation cannot be fulfilled on pods/binding "x": pod x is already assigned to node "n1"'
    )
    assert err.status()["details"] == {"name": "x", "kind": "pods/binding"}


@pytest.mark.parametrize(
    ("binding", "code"),
    [
        ({"metadata": {"name": "other"}, "target": {"name": "n"}}, 400),
        ({"metadata": {"name": "x", "uid": "wrong"}, "target": {"name": "n"}}, 409),
        ({"metadata": {"name": "x"}, "target": {}}, 422),
    ],
)
def test_bind_refusals(store: Store, binding: dict[str, Any], code: int) -> None:
    store.create(PODS, pod("x"), namespace="default")
    assert error_of(lambda: store.bind("default", "x", binding)).code == code
    assert (
        error_of(
            lambda: store.bind("default", "missing", {**binding, "metadata": {"name": "missing"}})
        ).code
        == 404
    )


def test_bind_refused_while_gated_or_deleting(store: Store) -> None:
    store.create(PODS, pod("g", schedulingGates=[{"name": "wait"}]), namespace="default")
    err = error_of(
        lambda: store.bind("default", "g", {"metadata": {"name": "g"}, "target": {"name": "n"}})
    )
    assert "has non-empty .spec.schedulingGates" in err.message
    body = pod("d")
    body["metadata"]["finalizers"] = ["example.com/keep"]
    store.create(PODS, body, namespace="default")
    store.delete(PODS, "default", "d")
    err = error_of(
        lambda: store.bind("default", "d", {"metadata": {"name": "d"}, "target": {"name": "n"}})
    )
    assert "pod d is being deleted, cannot be assigned to a host" in err.message


def test_finalizers_defer_deletion(store: Store) -> None:
    store.create(
        CONFIG_MAPS, {"metadata": {"name": "c", "finalizers": ["x/y"]}}, namespace="default"
    )
    marked = store.delete(CONFIG_MAPS, "default", "c")
    assert marked.obj["metadata"]["deletionTimestamp"]
    assert store.find(CONFIG_MAPS, "default", "c") is not None
    final = store.patch(
        CONFIG_MAPS,
        "default",
        "c",
        "application/merge-patch+json",
        {"metadata": {"finalizers": None}},
    )
    assert store.find(CONFIG_MAPS, "default", "c") is None
    assert final.obj["metadata"].get("finalizers") is None


def test_delete_preconditions(store: Store) -> None:
    store.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace="default")
    err = error_of(
        lambda: store.delete(
            CONFIG_MAPS, "default", "c", options={"preconditions": {"uid": "nope"}}
        )
    )
    assert err.code == 409
    deleted = store.delete(CONFIG_MAPS, "default", "c")
    assert int(deleted.obj["metadata"]["resourceVersion"]) == store.rv
    assert error_of(lambda: store.delete(CONFIG_MAPS, "default", "c")).code == 404


def test_namespace_delete_cascades(store: Store) -> None:
    store.create(NAMESPACES, {"metadata": {"name": "team"}}, namespace=None)
    store.create(PODS, pod("x"), namespace="team")
    store.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace="team")
    store.delete(NAMESPACES, None, "team")
    assert store.select(PODS, namespace="team").entries == []
    assert store.select(CONFIG_MAPS, namespace="team").entries == []
    ns = store.create(NAMESPACES, {"metadata": {"name": "team"}}, namespace=None)
    assert ns.obj["metadata"]["labels"] == {"kubernetes.io/metadata.name": "team"}


def test_dry_run_stores_nothing(store: Store) -> None:
    before = store.rv
    with store.dry_run():
        entry = store.create(CONFIG_MAPS, {"metadata": {"name": "c"}}, namespace="default")
    assert entry.obj["metadata"]["name"] == "c"
    assert store.find(CONFIG_MAPS, "default", "c") is None
    assert store.rv == before


def test_list_is_sorted_paged_and_indexed(store: Store) -> None:
    for i in (3, 1, 2):
        store.create(PODS, pod(f"p{i}"), namespace="default")
    store.bind("default", "p2", {"metadata": {"name": "p2"}, "target": {"name": "n1"}})
    page = store.select(PODS, limit=2)
    assert [e.obj["metadata"]["name"] for e in page.entries] == ["p1", "p2"]
    assert page.continue_token
    assert page.remaining == 1
    rest = store.select(PODS, limit=2, continue_token=page.continue_token)
    assert [e.obj["metadata"]["name"] for e in rest.entries] == ["p3"]
    assert rest.rv == page.rv
    assert rest.continue_token == ""
    on_node = store.select(PODS, fields=parse_field_selector("spec.nodeName=n1", PODS.field_labels))
    assert [e.obj["metadata"]["name"] for e in on_node.entries] == ["p2"]
    unbound = store.select(PODS, fields=parse_field_selector("spec.nodeName=", PODS.field_labels))
    assert [e.obj["metadata"]["name"] for e in unbound.entries] == ["p1", "p3"]


def test_webhook_configuration_defaults_and_validation(store: Store) -> None:
    hook = {
        "name": "vgpu.example.com",
        "clientConfig": {"service": {"namespace": "kube-system", "name": "w", "path": "/m"}},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    entry = store.create(
        MUTATING_WEBHOOKS, {"metadata": {"name": "m"}, "webhooks": [hook]}, namespace=None
    )
    stored = entry.obj["webhooks"][0]
    assert stored["failurePolicy"] == "Fail"
    assert stored["timeoutSeconds"] == 10
    assert stored["clientConfig"]["service"]["port"] == 443
    assert stored["rules"][0]["scope"] == "*"
    bad = {**hook, "sideEffects": "Unknown"}
    err = error_of(
        lambda: store.create(
            MUTATING_WEBHOOKS, {"metadata": {"name": "b"}, "webhooks": [bad]}, namespace=None
        )
    )
    assert err.code == 422
    assert "webhooks[0].sideEffects" in err.message
