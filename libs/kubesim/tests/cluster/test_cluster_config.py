"""Parsing of the cluster file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.cluster.config import (
    DEFAULT_NAMESPACES,
    ClusterConfigError,
    load_cluster_config,
    parse_cluster_config,
)
from hami_kubesim.cluster.simulated import scheduler_config_for

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def test_example_file_parses() -> None:
    config = load_cluster_config(EXAMPLE)
    assert [n.name for n in config.nodes] == ["gpu-node-1", "gpu-node-2", "cpu-node-1"]
    gpu1 = config.nodes[0]
    assert gpu1.capacity["cpu"] == "32"
    assert gpu1.allocatable["cpu"] == "31"
    assert gpu1.allocatable["pods"] == "110"  # not overridden: equals capacity
    assert config.nodes[2].taints[0]["effect"] == "PreferNoSchedule"
    assert "hami-system" in config.namespaces
    assert config.admission.service_urls[("hami-system", "hami-webhook")].startswith("https://")
    assert config.kubelet.plugin_root == Path("/tmp/kubesim")
    assert config.objects[0]["kind"] == "ResourceQuota"


def test_defaults_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "more.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: default}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: default}\n"
    )
    config = parse_cluster_config(
        {
            "nodes": [
                {"name": "n1"},
                {"name": "n2", "kubelet": False, "pluginDir": "dp/n2", "podResourcesDir": "pr"},
            ],
            "scheduling": {
                "config": "sched.yaml",
                "extenderURLs": ["http://127.0.0.1:1"],
                "preemptionBehaviour": "1.38",
                "dynamicResources": False,
            },
            "objectFiles": ["more.yaml"],
        },
        base_dir=tmp_path,
    )
    assert (config.host, config.port) == ("127.0.0.1", 0)
    assert config.namespaces == DEFAULT_NAMESPACES
    n1, n2 = config.nodes
    assert n1.kubelet
    assert n1.plugin_dir is None
    assert n1.pod_resources_dir is None
    assert n1.address != n2.address
    assert n1.pod_cidr != n2.pod_cidr
    assert not n2.kubelet
    assert n2.plugin_dir == tmp_path / "dp/n2"
    assert n2.pod_resources_dir == tmp_path / "pr"
    assert config.scheduling.config == tmp_path / "sched.yaml"
    assert config.scheduling.extender_urls == ("http://127.0.0.1:1",)
    assert config.scheduling.preemption_behaviour == "1.38"
    assert parse_cluster_config({}, base_dir=tmp_path).scheduling.preemption_behaviour == "1.37"
    assert not config.scheduling.dynamic_resources
    assert parse_cluster_config({}, base_dir=tmp_path).scheduling.dynamic_resources
    assert [o["metadata"]["name"] for o in config.objects] == ["a", "b"]
    assert config.admission.enabled
    assert config.kubelet.grace_period == 300.0


def test_node_object_shape() -> None:
    config = parse_cluster_config(
        {
            "nodes": [
                {
                    "name": "n1",
                    "labels": {"gpu": "on"},
                    "annotations": {"a": 1},
                    "taints": [{"key": "k", "effect": "NoSchedule"}],
                    "address": "192.168.1.5",
                }
            ]
        },
        base_dir=Path(),
    )
    node = config.nodes[0].to_object()
    assert node["kind"] == "Node"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "n1"
    assert node["metadata"]["labels"]["gpu"] == "on"
    assert node["metadata"]["annotations"] == {"a": "1"}
    assert node["spec"]["taints"] == [{"key": "k", "effect": "NoSchedule"}]
    assert {"type": "InternalIP", "address": "192.168.1.5"} in node["status"]["addresses"]
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"


def test_hami_core_switch(tmp_path: Path) -> None:
    default = parse_cluster_config({}, base_dir=tmp_path).kubelet
    assert (default.hami_core, default.hami_core_interval) == (False, 1.0)
    config = parse_cluster_config(
        {"kubelet": {"hamiCore": True, "hamiCoreIntervalSeconds": 0.25}}, base_dir=tmp_path
    )
    assert (config.kubelet.hami_core, config.kubelet.hami_core_interval) == (True, 0.25)


def test_dra_directories_and_intervals(tmp_path: Path) -> None:
    default = parse_cluster_config({"nodes": [{"name": "n"}]}, base_dir=tmp_path)
    assert (default.nodes[0].plugins_registry_dir, default.nodes[0].cdi_dirs) == (None, None)
    assert (default.kubelet.plugin_watch_interval, default.kubelet.dra_retry_interval) == (1, 10)
    config = parse_cluster_config(
        {
            "nodes": [{"name": "n", "pluginsRegistryDir": "reg", "cdiDirs": ["a", "b"]}],
            "kubelet": {"pluginWatchIntervalSeconds": 0.2, "draRetryIntervalSeconds": 1},
        },
        base_dir=tmp_path,
    )
    (node,) = config.nodes
    assert node.plugins_registry_dir == tmp_path / "reg"
    assert node.cdi_dirs == (tmp_path / "a", tmp_path / "b")
    assert (config.kubelet.plugin_watch_interval, config.kubelet.dra_retry_interval) == (0.2, 1)


def test_default_scheduler_beside_the_configured_profile(tmp_path: Path) -> None:
    (tmp_path / "sched.yaml").write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
        "profiles: [{schedulerName: hami-scheduler}]\n"
    )
    only = parse_cluster_config({"scheduling": {"config": "sched.yaml"}}, base_dir=tmp_path)
    assert not only.scheduling.default_scheduler
    assert scheduler_config_for(only.scheduling).scheduler_names == {"hami-scheduler"}
    both = parse_cluster_config(
        {"scheduling": {"config": "sched.yaml", "defaultScheduler": True}}, base_dir=tmp_path
    )
    config = scheduler_config_for(both.scheduling)
    assert config.scheduler_names == {"hami-scheduler", "default-scheduler"}
    assert config.profiles[0].scheduler_name == "hami-scheduler"
    # The built-in configuration has the default profile already: nothing added.
    builtin = parse_cluster_config({"scheduling": {"defaultScheduler": True}}, base_dir=tmp_path)
    assert len(scheduler_config_for(builtin.scheduling).profiles) == 1


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ([], "cluster"),
        ({"nodes": {}}, "nodes"),
        ({"nodes": [{}]}, "nodes[0].name"),
        ({"nodes": [{"name": "a"}, {"name": "a"}]}, "nodes"),
        ({"nodes": [{"name": "a", "kubelet": "yes"}]}, "nodes[0].kubelet"),
        ({"nodes": [{"name": "a", "capacity": {"cpu": [1]}}]}, "nodes[0].capacity.cpu"),
        (
            {"nodes": [{"name": "a", "taints": [{"key": "k", "effect": "Bad"}]}]},
            "nodes[0].taints[0]",
        ),
        ({"nodes": [{"name": "a", "address": "not-an-ip"}]}, "nodes[0].address/podCIDR"),
        ({"apiServer": {"port": 70000}}, "apiServer.port"),
        ({"kubelet": {"gracePeriodSeconds": -1}}, "kubelet.gracePeriodSeconds"),
        ({"kubelet": {"hamiCore": "yes"}}, "kubelet.hamiCore"),
        ({"kubelet": {"hamiCoreIntervalSeconds": 0}}, "kubelet.hamiCoreIntervalSeconds"),
        ({"admission": {"serviceURLs": [{"name": "x"}]}}, "admission.serviceURLs[0]"),
        ({"objects": [{"kind": "ConfigMap", "metadata": {"name": "a"}}]}, "objects[0].apiVersion"),
        ({"objects": [{"apiVersion": "v1", "kind": "ConfigMap"}]}, "objects[0].metadata.name"),
        ({"objectFiles": ["does-not-exist.yaml"]}, "objectFiles[0]"),
        ({"scheduling": {"preemptionBehaviour": "latest"}}, "scheduling.preemptionBehaviour"),
        ({"scheduling": {"dynamicResources": "yes"}}, "scheduling.dynamicResources"),
        ({"scheduling": {"defaultScheduler": 1}}, "scheduling.defaultScheduler"),
        ({"nodes": [{"name": "a", "cdiDirs": "x"}]}, "nodes[0].cdiDirs"),
        ({"kubelet": {"draRetryIntervalSeconds": 0}}, "kubelet.draRetryIntervalSeconds"),
    ],
)
def test_invalid_documents_name_the_key(doc: Any, key: str) -> None:
    with pytest.raises(ClusterConfigError) as caught:
        parse_cluster_config(doc, base_dir=Path("/nonexistent-dir"))
    assert caught.value.key == key
    assert str(caught.value).startswith(f"{key}: ")


def test_unreadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nodes: [unclosed\n")
    with pytest.raises(ClusterConfigError):
        load_cluster_config(bad)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    st.dictionaries(
        st.sampled_from(
            ["nodes", "namespaces", "apiServer", "kubelet", "admission", "scheduling", "objects"]
        ),
        json_values,
        max_size=4,
    )
)
def test_garbage_gives_only_config_errors(doc: dict[str, Any]) -> None:
    try:
        config = parse_cluster_config(doc, base_dir=Path("/nonexistent-dir"))
    except ClusterConfigError as error:
        key = error.key
    else:
        key = "ok"
        assert all(node.name for node in config.nodes)
    assert key


def test_yaml_round_trip_of_a_written_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"name": "x", "capacity": {"cpu": 4}}]}))
    config = load_cluster_config(path)
    assert config.nodes[0].capacity["cpu"] == "4"
