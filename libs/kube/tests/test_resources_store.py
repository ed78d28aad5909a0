"""Resource paths and the indexed store."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube import resources
from hami_kube.objects import ObjectView, object_key
from hami_kube.store import Store, index_by_namespace, index_by_node_name


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (resources.PODS.collection_path(), "/api/v1/pods"),
        (resources.PODS.collection_path("ns"), "/api/v1/namespaces/ns/pods"),
        (resources.PODS.object_path("p", "ns"), "/api/v1/namespaces/ns/pods/p"),
        (
            resources.PODS.object_path("p", "ns", "binding"),
            "/api/v1/namespaces/ns/pods/p/binding",
        ),
        (resources.NODES.object_path("n1"), "/api/v1/nodes/n1"),
        (resources.NODES.object_path("n1", "ignored"), "/api/v1/nodes/n1"),
        (
            resources.LEASES.object_path("l", "kube-system"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        ),
        (
            resources.MUTATING_WEBHOOK_CONFIGURATIONS.collection_path(),
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        ),
        (resources.PODS.object_path("a/b", "ns"), "/api/v1/namespaces/ns/pods/a%2Fb"),
    ],
)
def test_paths(path: str, expected: str) -> None:
    assert path == expected


def test_path_errors() -> None:
    with pytest.raises(ValueError, match="namespace"):
        resources.PODS.object_path("p")
    with pytest.raises(ValueError, match="cluster-scoped"):
        resources.NODES.collection_path("ns")
    with pytest.raises(ValueError, match="name"):
        resources.NODES.object_path("")


def test_api_version() -> None:
    assert resources.PODS.api_version == "v1"
    assert resources.LEASES.api_version == "coordination.k8s.io/v1"


def pod(name: str, node: str | None = None, rv: str = "1", ns: str = "default") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
        "spec": {},
    }
    if node:
        obj["spec"]["nodeName"] = node
    return obj


def test_keys() -> None:
    assert object_key(pod("p", ns="a")) == "a/p"
    assert object_key({"metadata": {"name": "n"}}) == "n"
    assert object_key({}) == ""


def test_index_follows_updates_and_deletes() -> None:
    store = Store(indexers={"node": index_by_node_name, "ns": index_by_namespace})
    store.upsert(pod("a", "n1"))
    store.upsert(pod("b", "n1"))
    store.upsert(pod("c"))
    assert {ObjectView(p).name for p in store.by_index("node", "n1")} == {"a", "b"}
    assert store.by_index("node", "n2") == []
    store.upsert(pod("a", "n2", rv="2"))
    assert store.keys_by_index("node", "n1") == {"default/b"}
    assert store.keys_by_index("node", "n2") == {"default/a"}
    store.remove("default/b")
    assert store.index_values("node") == ["n2"]
    assert store.keys_by_index("ns", "default") == {"default/a", "default/c"}
    with pytest.raises(KeyError, match="nope"):
        store.by_index("nope", "x")


def test_index_survives_callers_mutating_cached_objects() -> None:
    store = Store(indexers={"node": index_by_node_name})
    obj = pod("a", "n1")
    store.upsert(obj)
    obj["spec"]["nodeName"] = "elsewhere"  # a careless reader
    store.remove("default/a")
    assert store.index_values("node") == []


def test_replace_reports_the_difference() -> None:
    store = Store()
    store.replace([pod("a"), pod("b"), pod("c")])
    delta = store.replace([pod("a"), pod("b", rv="2"), pod("d")])
    assert [ObjectView(o).name for o in delta.added] == ["d"]
    assert [(ObjectView(o).name, ObjectView(n).name) for o, n in delta.updated] == [("b", "b")]
    assert [ObjectView(o).name for o in delta.deleted] == ["c"]
    assert sorted(store.keys()) == ["default/a", "default/b", "default/d"]


_names = st.sampled_from(["a", "b", "c", "d", "e"])
_nodes = st.sampled_from([None, "n1", "n2"])
_ops = st.lists(st.tuples(st.booleans(), _names, _nodes), max_size=40)


@given(_ops)
def test_index_equals_a_full_scan(ops: list[tuple[bool, str, str | None]]) -> None:
    store = Store(indexers={"node": index_by_node_name})
    for version, (insert, name, node) in enumerate(ops):
        if insert:
            store.upsert(pod(name, node, rv=str(version)))
        else:
            store.remove(f"default/{name}")
    for node in ("n1", "n2"):
        scanned = {object_key(o) for o in store.objects() if o["spec"].get("nodeName") == node}
        assert store.keys_by_index("node", node) == scanned
    assert set(store.index_values("node")) <= {"n1", "n2"}
