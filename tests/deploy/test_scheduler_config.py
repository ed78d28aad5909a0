"""One KubeSchedulerConfiguration: the file in the chart is what the chart renders and what
kubesim's scheduling loop reads (the end-to-end tests and docker-compose.yml)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from hami_kubesim.scheduler.config import (
    ManagedResource,
    load_scheduler_config,
    parse_scheduler_config,
)
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.totals import NVIDIA_CORES, NVIDIA_MEMORY
from hami_protocol.vendor.table import vendors_from_config

from .conftest import RenderFn
from .helpers import CHART, REPO

CONFIG_FILE = CHART / "charts" / "scheduler" / "files" / "kube-scheduler-config.yaml"


def rendered_config(render: RenderFn, values: dict[str, Any] | None = None, **kw: Any) -> str:
    config_map = render(values, **kw).one("ConfigMap", "demo-hami-scheduler-config")
    text: str = config_map["data"]["config.yaml"]
    return text


def test_the_old_location_is_gone() -> None:
    assert not (REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml").exists()
    assert CONFIG_FILE.is_file()
    assert "{{" not in CONFIG_FILE.read_text()  # plain YAML: kubesim reads it as it is


def test_rendered_configmap_is_the_file_kubesim_reads(render: RenderFn) -> None:
    text = rendered_config(render, namespace="kube-system")
    assert parse_scheduler_config(text) == load_scheduler_config(CONFIG_FILE)
    # With the default values, in the namespace the file names, the document itself is unchanged.
    assert yaml.safe_load(text) == yaml.safe_load(CONFIG_FILE.read_text())


def test_release_specific_fields_are_the_only_changes(render: RenderFn) -> None:
    values = {"global": {"schedulerName": "gpu-sched"}, "scheduler": {"leaderElect": False}}
    document = yaml.safe_load(rendered_config(render, values, namespace="gpu-system"))
    original = yaml.safe_load(CONFIG_FILE.read_text())
    assert document["leaderElection"] == {
        "leaderElect": False,
        "resourceName": "gpu-sched",
        "resourceNamespace": "gpu-system",
    }
    assert document["profiles"] == [{"schedulerName": "gpu-sched"}]
    for key in ("leaderElection", "profiles"):
        document.pop(key)
        original.pop(key)
    assert document == original
    parsed = parse_scheduler_config(rendered_config(render, values, namespace="gpu-system"))
    assert parsed.scheduler_names == frozenset({"gpu-sched"})
    assert parsed.extenders == load_scheduler_config(CONFIG_FILE).extenders


def test_extender_url_follows_the_extender_port(render: RenderFn) -> None:
    text = rendered_config(render, {"scheduler": {"extender": {"port": 8443}}})
    (extender,) = parse_scheduler_config(text).extenders
    assert extender.url_prefix == "https://127.0.0.1:8443"
    assert extender.url_for("filter") == "https://127.0.0.1:8443/filter"


def test_file_has_hamis_extender_shape() -> None:
    kube_config = load_scheduler_config(CONFIG_FILE)
    (extender,) = kube_config.extenders
    assert extender.filter_verb == "filter"
    assert extender.bind_verb == "bind"
    assert extender.preempt_verb == "preempt"
    assert extender.node_cache_capable is True
    assert extender.enable_https is True
    assert extender.tls is not None
    assert extender.tls.insecure is True
    assert all(r.ignored_by_scheduler for r in extender.managed_resources)
    # Every resource of every vendor of the shipped device-config.yaml (Ascend and Iluvatar
    # included) is managed by the extender, so kube-scheduler's own fit check ignores them all.
    config = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
    nvidia = config.nvidia
    vendors = vendors_from_config(config, enable_ascend=True, enable_iluvatar=True)
    names = [
        nvidia.resource_count_name,
        nvidia.resource_memory_name,
        nvidia.resource_memory_percentage_name,
        nvidia.resource_core_name,
        nvidia.resource_priority_name,
        *(name for vendor in vendors[1:] for name in vendor.managed_resources),
        # RDMA NICs for joint GPU + NIC allocation (koordinator.sh/rdma, served by the plugin).
        "koordinator.sh/rdma",
    ]
    assert extender.managed_resources == tuple(ManagedResource(n, True) for n in names if n)
    assert kube_config.profiles[0].ignored_resources == frozenset(n for n in names if n)


def test_kube_scheduler_reads_the_rendered_file(render: RenderFn) -> None:
    rendered = render()
    deployment = rendered.one("Deployment", "demo-hami-scheduler")
    spec = deployment["spec"]["template"]["spec"]
    (kube,) = [c for c in spec["containers"] if c["name"] == "kube-scheduler"]
    (config_arg,) = [a for a in kube["command"] if a.startswith("--config=")]
    path = config_arg.split("=", 1)[1]
    (mount,) = [m for m in kube["volumeMounts"] if path.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    config_map = rendered.one("ConfigMap", volume["configMap"]["name"])
    assert path.removeprefix(mount["mountPath"] + "/") in config_map["data"]


@pytest.mark.parametrize(
    "path",
    ["libs/kubesim/tests/scheduling/test_scheduling_config.py", "docker-compose.yml"],
)
def test_users_of_the_file_point_at_the_chart(path: str) -> None:
    text = (REPO / path).read_text()
    assert "deploy/charts/hami/charts/scheduler/files/kube-scheduler-config.yaml" in text


def test_filter_mode_all_asks_the_extender_to_prioritize(render: RenderFn) -> None:
    default = yaml.safe_load(rendered_config(render))
    assert "prioritizeVerb" not in default["extenders"][0]
    values = {"scheduler": {"filterMode": "all"}}
    document = yaml.safe_load(rendered_config(render, values))
    assert document["extenders"][0]["prioritizeVerb"] == "prioritize"
    parsed = parse_scheduler_config(rendered_config(render, values))
    assert parsed.extenders[0].prioritize_verb == "prioritize"


def test_capacity_totals_make_kube_scheduler_count_gpus_and_totals(render: RenderFn) -> None:
    on = {"global": {"capacityTotals": True}}
    document = yaml.safe_load(rendered_config(render, on, namespace="kube-system"))
    original = yaml.safe_load(CONFIG_FILE.read_text())
    (extender,) = document["extenders"]
    (before,) = original["extenders"]
    counted = {r["name"] for r in extender["managedResources"] if r["ignoredByScheduler"] is False}
    assert counted == {"nvidia.com/gpu", NVIDIA_MEMORY, NVIDIA_CORES}
    # Every other resource as in the file, in its order, the two totals last.
    names = [r["name"] for r in extender["managedResources"]]
    assert names == [r["name"] for r in before["managedResources"]] + [NVIDIA_MEMORY, NVIDIA_CORES]
    extender.pop("managedResources")
    before.pop("managedResources")
    assert document == original
    parsed = parse_scheduler_config(rendered_config(render, on))
    (parsed_extender,) = parsed.extenders
    gpu = ManagedResource("nvidia.com/gpu", ignored_by_scheduler=False)
    assert gpu in parsed_extender.managed_resources
    (profile,) = parsed.profiles
    assert profile.ignored_resources.isdisjoint({"nvidia.com/gpu", NVIDIA_MEMORY, NVIDIA_CORES})
    assert "nvidia.com/gpumem" in profile.ignored_resources


def test_kubesim_stack_runs_what_the_chart_renders_in_the_mode(render: RenderFn) -> None:
    from hami_kubesim.stack.system.spec import capacity_totals_document

    on = {"global": {"capacityTotals": True}}
    rendered = yaml.safe_load(rendered_config(render, on, namespace="kube-system"))
    assert rendered == capacity_totals_document(yaml.safe_load(CONFIG_FILE.read_text()))
