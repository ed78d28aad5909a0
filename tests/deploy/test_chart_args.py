"""The command lines the chart renders, parsed by each service's own flag parser with the
rendered ConfigMaps in place of the mounted files."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import RenderFn
from .helpers import Manifest, Rendered

ENV = {"POD_NAME": "demo-hami-scheduler-0", "POD_NAMESPACE": "hami-system"}
VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "tuned": {
        "scheduler": {
            "nodeLabelSelector": {"gpu": "on", "pool": "a"},
            "filterMode": "all",
            "leaderElect": False,
            "defaultSchedulerPolicy": {"nodeSchedulerPolicy": "spread"},
            "nodeLockExpire": "90s",
        },
        "webhook": {"enableQuota": False, "forceOverwriteDefaultScheduler": False},
        "devicePlugin": {"disablecorelimit": True, "deviceSplitCount": 4},
        "global": {"schedulerName": "gpu-scheduler"},
    },
    "campaign": {"scheduler": {"kubeScheduler": {"enabled": False}}},
    "capacity-totals": {"global": {"capacityTotals": True}},
}


def capacity_totals(values: dict[str, Any] | None) -> bool:
    return bool((values or {}).get("global", {}).get("capacityTotals", False))


@pytest.fixture
def root() -> Iterator[Path]:
    """Where the pod's mounted files are recreated (short: the plugin socket path is limited)."""
    path = Path(tempfile.mkdtemp(prefix="ha-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def materialise(rendered: Rendered, workload: Manifest, root: Path, container: str) -> list[str]:
    """The container's args with every mount path moved under ``root``, and the ConfigMaps'
    data written there (Secrets get placeholder files)."""
    spec = workload["spec"]["template"]["spec"]
    (found,) = [c for c in spec["containers"] if c["name"] == container]
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {}
    for mount in found.get("volumeMounts", []):
        local = root / mount["mountPath"].lstrip("/")
        local.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = local
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            data = rendered.one("ConfigMap", volume["configMap"]["name"])["data"]
            for key, text in data.items():
                (local / key).write_text(text)
        elif "secret" in volume:
            for key in ("tls.crt", "tls.key"):
                (local / key).write_text("placeholder")
    args = []
    for arg in found["args"]:
        name, eq, value = arg.partition("=")
        for path in sorted(mounts, key=len, reverse=True):
            if eq and (value == path or value.startswith(path + "/")):
                value = str(mounts[path]) + value[len(path) :]
                break
        args.append(f"{name}={value}" if eq else arg)
    return args


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_webhook_args_parse(render: RenderFn, root: Path, values: dict[str, Any] | None) -> None:
    from hami_webhook.settings import parse_settings

    rendered = render(values)
    deployment = next(
        d for d in rendered.find("Deployment") if d["metadata"]["name"].endswith("-webhook")
    )
    args = materialise(rendered, deployment, root, "webhook")
    settings = parse_settings(args, environ={})
    expected = (values or {}).get("global", {}).get("schedulerName", "hami-scheduler")
    assert settings.rules.scheduler_name == expected
    assert settings.tls
    assert settings.http_bind == "0.0.0.0:9443"
    assert settings.metrics_bind_address == ":9396"
    webhook_values = (values or {}).get("webhook", {})
    assert settings.enable_quota is webhook_values.get("enableQuota", True)
    assert settings.rules.force_overwrite_default_scheduler is webhook_values.get(
        "forceOverwriteDefaultScheduler", True
    )
    assert settings.rules.capacity_totals is capacity_totals(values)


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_device_plugin_args_parse(
    render: RenderFn, root: Path, values: dict[str, Any] | None
) -> None:
    from hami_deviceplugin.settings import parse_settings

    rendered = render(values)
    daemonset = rendered.one("DaemonSet")
    args = materialise(rendered, daemonset, root, "device-plugin")
    args = [a.replace("$(NODE_NAME)", "gpu-node-1") for a in args]
    settings = parse_settings(args, environ={})
    plugin_values = (values or {}).get("devicePlugin", {})
    assert settings.node_name == "gpu-node-1"
    assert settings.device_backend == "nvml"
    assert settings.kubelet_socket.name == "kubelet.sock"
    assert settings.node.device_split_count == plugin_values.get("deviceSplitCount", 10)
    assert settings.disable_core_limit is plugin_values.get("disablecorelimit", False)
    assert settings.hook_path == "/usr/local"
    assert settings.metrics_bind_address == ":9397"
    assert settings.advertise_capacity_totals is capacity_totals(values)


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_scheduler_args_parse(render: RenderFn, root: Path, values: dict[str, Any] | None) -> None:
    settings_module = pytest.importorskip("hami_scheduler.settings")
    rendered = render(values)
    deployment = next(
        d for d in rendered.find("Deployment") if d["metadata"]["name"].endswith("-scheduler")
    )
    args = materialise(rendered, deployment, root, "extender")
    settings = settings_module.parse_settings(args, environ=ENV)
    scheduler_values = (values or {}).get("scheduler", {})
    expected_name = (values or {}).get("global", {}).get("schedulerName", "hami-scheduler")
    assert settings.scheduler_name == expected_name
    assert settings.tls
    assert settings.http_bind == "0.0.0.0:443"
    assert settings.metrics_bind_address == ":9395"
    assert settings.filter_mode == scheduler_values.get("filterMode", "single")
    assert settings.node_policy == scheduler_values.get("defaultSchedulerPolicy", {}).get(
        "nodeSchedulerPolicy", "binpack"
    )
    assert (
        settings.node_lock_timeout_s
        == {"5m": 300.0, "90s": 90.0}[scheduler_values.get("nodeLockExpire", "5m")]
    )
    leader = settings.leader
    assert leader.enabled is scheduler_values.get("leaderElect", True)
    if leader.enabled:
        assert (leader.name, leader.namespace) == (expected_name, "hami-system")
        kube_scheduler = scheduler_values.get("kubeScheduler", {}).get("enabled", True)
        assert leader.mode == ("follow" if kube_scheduler else "campaign")
    if "nodeLabelSelector" in scheduler_values:
        assert settings.node_label_selector == "gpu=on,pool=a"


MONITOR_VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "tuned": {
        "global": {"gpuHookPath": "/opt/hami"},
        "devicePlugin": {
            "logFormat": "console",
            "monitor": {"legacyMetrics": True, "resyncInterval": "90s", "metricsPort": 9500},
        },
    },
}


@pytest.mark.parametrize("values", list(MONITOR_VALUE_SETS.values()), ids=list(MONITOR_VALUE_SETS))
def test_vgpu_monitor_args_and_env_parse(
    render: RenderFn, root: Path, values: dict[str, Any] | None
) -> None:
    settings_module = pytest.importorskip("hami_deviceplugin.monitor.settings")
    rendered = render(values)
    daemonset = rendered.one("DaemonSet")
    args = materialise(rendered, daemonset, root, "vgpu-monitor")
    (monitor,) = [
        c
        for c in daemonset["spec"]["template"]["spec"]["containers"]
        if c["name"] == "vgpu-monitor"
    ]
    # spec.nodeName from the downward API; HOOK_PATH is a mount, recreated under root.
    env = {e["name"]: e.get("value", "gpu-node-1") for e in monitor["env"]}
    mounts = {m["mountPath"] for m in monitor["volumeMounts"]}
    assert env["HOOK_PATH"] in mounts
    env["HOOK_PATH"] = str(root / env["HOOK_PATH"].lstrip("/"))
    settings = settings_module.parse_settings(args, environ=env)
    tuned = values is not None
    assert settings.node_name == "gpu-node-1"
    assert settings.hook_path == root / ("opt/hami/vgpu" if tuned else "usr/local/vgpu")
    assert settings.containers_dir.parent.is_dir()
    assert settings.resync_interval_s == (90.0 if tuned else 300.0)
    assert settings.legacy_metrics is tuned
    assert settings.device_backend == "nvml"
    assert settings.log_format == ("console" if tuned else "json")
    assert settings.metrics_bind_address == (":9500" if tuned else ":9394")
    # In the cluster: the service account, no URL or kubeconfig.
    assert settings.kube.kube_url is None
    assert settings.kube.kubeconfig is None
    # The default MIG lock file lies in the mounted host /tmp/hami.
    assert str(settings.mig_lock_file.parent) in mounts
