"""Object views: every component reads pods and nodes the same way, and garbage never raises."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hami_kube.objects import (
    ContainerView,
    NodeView,
    ObjectView,
    PodView,
    key_for,
    object_key,
    string_map,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-0",
        "namespace": "ml",
        "uid": "u-1",
        "resourceVersion": "42",
        "creationTimestamp": "2026-11-25T10:00:00Z",
        "labels": {"app": "train", "bad": 3},
        "annotations": {"hami.io/bind-phase": "allocating"},
    },
    "spec": {
        "nodeName": "gpu-1",
        "schedulerName": "hami-scheduler",
        "initContainers": [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "containers": [
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "2"}, "requests": {}}},
            "not a container",
        ],
    },
    "status": {"phase": "Pending"},
}


def test_a_pod_reads_as_its_fields() -> None:
    pod = PodView(POD)
    assert (pod.name, pod.namespace, pod.key, pod.uid) == ("train-0", "ml", "ml/train-0", "u-1")
    assert pod.resource_version == "42"
    assert pod.creation_timestamp == "2026-11-25T10:00:00Z"
    assert pod.labels == {"app": "train"}
    assert pod.annotations["hami.io/bind-phase"] == "allocating"
    assert pod.node_name == "gpu-1"
    assert pod.scheduler_name == "hami-scheduler"
    assert pod.phase == "Pending"
    assert not pod.terminal
    assert not pod.deleting
    assert [c.name for c in pod.containers] == ["main"]
    assert [c.name for c in pod.all_containers()] == ["init", "main"]
    assert pod.containers[0].limits == {"nvidia.com/gpu": "2"}
    assert pod.containers[0].requests == {}
    assert repr(pod) == "PodView('ml/train-0')"


def test_terminal_and_deleting_pods() -> None:
    done = PodView({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Succeeded"}})
    assert done.terminal
    assert done.deleting
    assert PodView({"status": {"phase": "Failed"}}).terminal


def test_a_node_reads_as_its_fields() -> None:
    node = NodeView(
        {
            "metadata": {"name": "gpu-1"},
            "spec": {"unschedulable": True},
            "status": {"capacity": {"nvidia.com/gpu": "40"}, "allocatable": {"cpu": "8"}},
        }
    )
    assert node.key == "gpu-1"
    assert node.unschedulable
    assert node.capacity == {"nvidia.com/gpu": "40"}
    assert node.allocatable == {"cpu": "8"}
    assert not NodeView({"spec": {"unschedulable": "yes"}}).unschedulable


def test_keys() -> None:
    assert key_for("ns", "a") == "ns/a"
    assert key_for(None, "n") == "n"
    assert key_for("", "n") == "n"
    assert object_key(POD) == "ml/train-0"
    assert object_key({"metadata": {"name": "node-a"}}) == "node-a"


def test_string_map_keeps_only_strings_and_copies_only_when_it_must() -> None:
    clean = {"a": "1"}
    assert string_map(clean) is clean
    assert string_map({"a": "1", "b": None, "c": 2}) == {"a": "1"}
    assert string_map(["a"]) == {}
    assert string_map(None) == {}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = st.sampled_from(["metadata", "spec", "status", "name", "resources", "containers"])


@given(
    st.dictionaries(FIELDS | st.text(max_size=6), JSON, max_size=5),
    st.dictionaries(st.sampled_from(list(POD["metadata"])) | st.text(max_size=4), JSON),
)
def test_garbage_reads_as_empty_never_raises(raw: dict[str, Any], meta: dict[str, Any]) -> None:
    for obj in (raw, {**raw, "metadata": meta}, {"spec": raw, "status": meta}):
        pod = PodView(obj)
        texts = (pod.name, pod.namespace, pod.key, pod.uid, pod.resource_version, pod.node_name)
        assert all(isinstance(t, str) for t in texts)
        assert all(isinstance(v, str) for v in pod.labels.values())
        assert all(isinstance(v, str) for v in pod.annotations.values())
        assert isinstance(pod.phase, str)
        assert isinstance(pod.terminal, bool)
        for container in pod.all_containers():
            assert isinstance(container, ContainerView)
            assert isinstance(container.name, str)
            assert isinstance(dict(container.limits), dict)
        node = NodeView(obj)
        assert isinstance(node.unschedulable, bool)
        assert isinstance(dict(node.allocatable), dict)
        assert isinstance(ObjectView(obj).deleting, bool)


def test_generate_name_and_env() -> None:
    pod = PodView(
        {
            "metadata": {"generateName": "job-"},
            "spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}, 3]}]},
        }
    )
    assert pod.generate_name == "job-"
    assert pod.containers[0].env == ({"name": "A", "value": "1"},)
    assert PodView({}).generate_name == ""
    assert ContainerView({"env": "x"}).env == ()


def test_status_and_scheduling_fields() -> None:
    pod = PodView(
        {
            "spec": {
                "priority": 7,
                "initContainers": [{"name": "side", "restartPolicy": "Always", "image": "i"}],
            },
            "status": {
                "nominatedNodeName": "n1",
                "conditions": [{"type": "PodScheduled", "status": "False"}, "junk"],
                "containerStatuses": [{"name": "c", "ready": True}],
                "initContainerStatuses": [{"name": "side"}],
            },
        }
    )
    assert pod.priority == 7
    assert pod.nominated_node_name == "n1"
    assert pod.condition("PodScheduled") == {"type": "PodScheduled", "status": "False"}
    assert pod.condition("Ready") is None
    assert len(pod.conditions) == 1
    assert pod.container_statuses[0]["name"] == "c"
    assert pod.init_container_statuses[0]["name"] == "side"
    assert pod.init_containers[0].restart_policy == "Always"
    assert pod.init_containers[0].image == "i"
    assert PodView({"spec": {"priority": True}}).priority == 0
    node = NodeView(
        {
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]},
        }
    )
    assert node.taints[0]["key"] == "k"
    assert node.addresses[0]["address"] == "10.0.0.1"


def test_a_container_that_is_not_an_object_reads_as_empty() -> None:
    for raw in (None, "x", 3, ["a"]):
        view = ContainerView(raw)
        assert (view.name, dict(view.limits), view.env) == ("", {}, ())
