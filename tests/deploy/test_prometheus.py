"""Prometheus: the scrape config and alert rules checked by promtool, the alerts' unit tests, the
metric names used by the rules and the dashboard, and a real Prometheus scraping the services
running as real processes (with kubesim as their API server)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from hami_kubesim.stack.system.ports import free_port

from .conftest import PrometheusTools
from .helpers import REPO, Process, http_get, python_module, running, wait_until

PROMETHEUS_DIR = REPO / "deploy" / "prometheus"
DASHBOARD = REPO / "deploy" / "grafana" / "hami-dashboard.json"
FAKE_DEVICES = REPO / "deploy" / "compose" / "fake-devices" / "gpu-node-a.yaml"
DEVICE_CONFIG = REPO / "deploy" / "charts" / "hami" / "files" / "device-config.yaml"
PROMQL_WORDS = {
    "sum", "by", "rate", "increase", "histogram_quantile", "and", "on", "count", "max", "le",
    "without", "ignoring", "group_left", "group_right", "or", "unless", "bool", "offset", "avg",
}  # fmt: skip


def promtool(tools: PrometheusTools, *args: str, stdin: bytes | None = None) -> str:
    result = subprocess.run(
        [str(tools.promtool), *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    output = (result.stdout + result.stderr).decode(errors="replace")
    assert result.returncode == 0, output
    return output


# What the vGPU monitor (hami-vgpu-monitor) exports, as series names: HAMi's vgpu-monitor names
# (the host GPU gauges too: the device plugin beside it exports none) and its own. Its
# per-container families exist only in a scrape's text, so the names are listed here.
MONITOR_METRICS = frozenset(
    {
        "hami_host_gpu_memory_used_bytes",
        "hami_host_gpu_utilization_ratio",
        "hami_host_gpu_memory_controller_utilization_ratio",
        "hami_vgpu_memory_used_bytes",
        "hami_container_device_memory_bytes",
        "hami_vgpu_memory_limit_bytes",
        "hami_container_device_utilization_ratio",
        "hami_vgpu_memory_context_bytes",
        "hami_vgpu_memory_module_bytes",
        "hami_vgpu_memory_buffer_bytes",
        "hami_container_last_kernel_elapsed_seconds",
        "hami_vgpu_monitor_region_errors_total",
        "hami_vgpu_monitor_regions",
        "hami_vgpu_monitor_feedback_writes_total",
        "hami_vgpu_monitor_feedback_paused",
        "hami_vgpu_monitor_scan_duration_seconds_bucket",
        "hami_vgpu_monitor_scan_duration_seconds_count",
        "hami_vgpu_monitor_scan_duration_seconds_sum",
    }
)
# Prefixes only the monitor exports (the scheduler has hami_vgpu_*_allocated_* of its own).
MONITOR_PREFIXES = ("hami_host_", "hami_container_", "hami_vgpu_monitor_")

# HAMi's own metric names, kept for compatibility although promtool's linter dislikes them.
HAMI_NAMES_PROMTOOL_FLAGS = {"hami_gpu_shared_count"}


def check_exposition(tools: PrometheusTools, body: bytes) -> None:
    """``promtool check metrics``: the text must parse (status 1 otherwise); lint findings
    (status 3) are allowed only for HAMi's compatibility names."""
    result = subprocess.run(
        [str(tools.promtool), "check", "metrics"],
        input=body,
        capture_output=True,
        timeout=60,
        check=False,
    )
    findings = (result.stdout + result.stderr).decode(errors="replace").strip().splitlines()
    if result.returncode == 3:
        flagged = {line.split(" ", 1)[0] for line in findings}
        assert flagged <= HAMI_NAMES_PROMTOOL_FLAGS, findings
    else:
        assert result.returncode == 0, findings


# --- static checks -------------------------------------------------------------------------------


def test_promtool_accepts_the_scrape_config(prometheus_tools: PrometheusTools) -> None:
    output = promtool(prometheus_tools, "check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))
    assert "SUCCESS" in output


def test_promtool_accepts_the_alert_rules(prometheus_tools: PrometheusTools) -> None:
    output = promtool(prometheus_tools, "check", "rules", str(PROMETHEUS_DIR / "alerts.yml"))
    assert "SUCCESS" in output


def test_alerts_fire_as_intended(prometheus_tools: PrometheusTools) -> None:
    output = promtool(
        prometheus_tools, "test", "rules", str(Path(__file__).with_name("alerts_test.yml"))
    )
    assert "SUCCESS" in output


def alert_rules() -> list[dict[str, Any]]:
    document = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def test_alerts_cover_what_operators_need() -> None:
    rules = {rule["alert"]: rule for rule in alert_rules()}
    for needed in (
        "HamiExtenderErrors",
        "HamiUnhealthyDevices",
        "HamiNodeLockStuck",
        "HamiWebhookErrors",
        "HamiAllocateFailures",
        "HamiContainerNearGpuMemoryLimit",
        "HamiVgpuMonitorBadRegionFiles",
    ):
        assert needed in rules
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["description"]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (identifiers outside label matchers and strings)."""
    stripped = re.sub(r"\{[^}]*\}|\"[^\"]*\"|\[[^\]]*\]", " ", expr)
    stripped = re.sub(r"\bby\s*\([^)]*\)|\bon\s*\([^)]*\)", " ", stripped)
    words = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped))
    return {w for w in words if w not in PROMQL_WORDS and not re.fullmatch(r"e\d*", w)}


def exported_names(registry: Any) -> set[str]:
    """Series names a prometheus-client registry exposes, from its metric families."""
    names: set[str] = set()
    for family in registry.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_count", "_sum"),
            "summary": ("_count", "_sum", ""),
        }.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


def service_metric_names() -> dict[str, set[str]]:
    from hami_deviceplugin.metrics import PluginMetrics
    from hami_webhook.metrics import WebhookMetrics

    return {
        "webhook": exported_names(WebhookMetrics().registry),
        "deviceplugin": exported_names(PluginMetrics(node="n").registry),
        "vgpu-monitor": set(MONITOR_METRICS),
    }


def referenced_names() -> set[str]:
    exprs = [rule["expr"] for rule in alert_rules()] + dashboard_exprs()
    return set().union(*(metric_names(e) for e in exprs)) - {"up"}


def test_rules_and_dashboard_use_the_names_webhook_and_plugin_export() -> None:
    exported = service_metric_names()
    for prefix, service in (("hami_webhook_", "webhook"), ("hami_deviceplugin_", "deviceplugin")):
        used = {n for n in referenced_names() if n.startswith(prefix)}
        assert used, prefix
        assert used <= exported[service], used - exported[service]


def test_rules_and_dashboard_use_the_names_the_vgpu_monitor_exports() -> None:
    used = referenced_names()
    monitor = {n for n in used if n.startswith(MONITOR_PREFIXES)} | (used & MONITOR_METRICS)
    assert monitor <= MONITOR_METRICS, monitor - MONITOR_METRICS
    # Memory used against the limit, utilisation, last kernel, rejected region files.
    assert {
        "hami_vgpu_memory_used_bytes",
        "hami_vgpu_memory_limit_bytes",
        "hami_container_device_utilization_ratio",
        "hami_container_last_kernel_elapsed_seconds",
        "hami_vgpu_monitor_region_errors_total",
    } <= monitor


def test_the_monitor_exports_every_name_of_the_list() -> None:
    metrics = pytest.importorskip("hami_deviceplugin.monitor.metrics")
    from prometheus_client.parser import text_string_to_metric_families

    # Per-container families are built at each scrape, so read a scrape's text (no regions).
    text = metrics.MonitorMetrics(node="n").render([], now=0.0).decode()
    families = list(text_string_to_metric_families(text))
    exported = exported_names(SimpleNamespace(collect=lambda: families))
    assert exported >= MONITOR_METRICS, MONITOR_METRICS - exported


def test_only_the_monitor_exports_the_host_gpu_gauges() -> None:
    # Both processes of a node are scraped: a name both exported would be a duplicate series.
    exported = service_metric_names()
    assert {n for n in exported["vgpu-monitor"] if n.startswith("hami_host_gpu_")}
    plugin = exported["deviceplugin"]
    assert not {n for n in plugin if n.startswith(MONITOR_PREFIXES)}
    assert not plugin & exported["vgpu-monitor"]


def test_alert_leaves_out_reasons_the_monitor_counts() -> None:
    problems = pytest.importorskip("hami_deviceplugin.monitor.problems")
    rule = next(r for r in alert_rules() if r["alert"] == "HamiVgpuMonitorBadRegionFiles")
    (pattern,) = re.findall(r'reason!~"([^"]+)"', rule["expr"])
    assert set(pattern.split("|")) < set(problems.REASONS)


def test_rules_and_dashboard_use_the_names_the_scheduler_exports() -> None:
    metrics = pytest.importorskip("hami_scheduler.metrics")
    caches = pytest.importorskip("hami_scheduler.cache.view")
    owner = metrics.SchedulerMetrics()
    # HAMi's device, quota and per-pod families come from the cache, read at scrape time.
    owner.track_cache(caches.SchedulerCache(()), lambda: True)
    exported = exported_names(owner.registry)
    others = set().union(*service_metric_names().values())
    used = {n for n in referenced_names() if n not in others}
    assert {n for n in used if n.startswith("hami_scheduler_")}
    assert {n for n in used if n.startswith("hami_gpu_")}
    assert used <= exported, used - exported


def test_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "node", "namespace", "pod"} <= variables
    titles = " ".join(panel["title"] for panel in dashboard["panels"]).lower()
    for topic in (
        "memory allocated",
        "latency",
        "allocate failures",
        "health",
        "memory used vs limit per container",
        "utilisation per container",
        "last kernel",
        "bad region files",
    ):
        assert topic in titles
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        assert panel["targets"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24


def test_container_panels_follow_the_namespace_and_pod_variables() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    per_container = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if metric_names(target["expr"]) & MONITOR_METRICS
        and "namespace" in target.get("legendFormat", "")
    ]
    assert len(per_container) >= 4
    for expr in per_container:
        for selector in re.findall(r"\{([^}]*)\}", expr):
            assert 'namespace=~"$namespace"' in selector, expr
            assert 'pod=~"$pod"' in selector, expr
    pod_variable = next(v for v in dashboard["templating"]["list"] if v["name"] == "pod")
    assert 'namespace=~"$namespace"' in pod_variable["definition"]


# --- live: real processes, real Prometheus -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Service:
    job: str
    metrics_url: str
    process: Process


def monitor_script() -> Path:
    """The vGPU monitor's console script in this environment (absent until it is installed)."""
    return Path(sys.executable).parent / "hami-vgpu-monitor"


def scheduler_runnable() -> bool:
    return importlib.util.find_spec("hami_scheduler.__main__") is not None


@pytest.fixture(scope="module")
def stack() -> Iterator[dict[str, Service]]:
    """kubesim with one GPU node, and each service whose ``python -m`` exists, on loopback."""
    root = Path(tempfile.mkdtemp(prefix="hp-"))  # short: unix socket paths are limited
    try:
        with running_stack(root) as services:
            yield services
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _wait_healthy(service: Service) -> None:
    wait_until(
        lambda: http_get(service.metrics_url.replace("/metrics", "/healthz"))[0] == 200,
        timeout=30,
        what=f"{service.job} /healthz",
        proc=service.process,
    )


@contextlib.contextmanager
def running_stack(root: Path) -> Iterator[dict[str, Service]]:
    api_port = free_port()
    plugin_dir = root / "gpu-node-a"
    cluster = {
        "apiServer": {"host": "127.0.0.1", "port": api_port},
        "nodes": [{"name": "gpu-node-a", "labels": {"gpu": "on"}, "pluginDir": str(plugin_dir)}],
        "admission": {"enabled": False},
        "scheduling": {"enabled": False},
    }
    (root / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    api = f"http://127.0.0.1:{api_port}"
    with contextlib.ExitStack() as stack:
        kubesim = stack.enter_context(
            running(
                "kubesim",
                python_module("hami_kubesim", "cluster", "--config", str(root / "cluster.yaml")),
                log_dir=root,
            )
        )
        wait_until(
            lambda: http_get(f"{api}/healthz")[0] == 200,
            timeout=30,
            what="kubesim",
            proc=kubesim,
        )
        services: dict[str, Service] = {}
        webhook_metrics = free_port()
        services["hami-webhook"] = Service(
            "hami-webhook",
            f"http://127.0.0.1:{webhook_metrics}/metrics",
            stack.enter_context(
                running(
                    "webhook",
                    python_module(
                        "hami_webhook",
                        f"--kube-url={api}",
                        f"--http_bind=127.0.0.1:{free_port()}",
                        f"--metrics-bind-address=127.0.0.1:{webhook_metrics}",
                        f"--device-config-file={DEVICE_CONFIG}",
                    ),
                    log_dir=root,
                )
            ),
        )
        plugin_metrics = free_port()
        services["hami-deviceplugin"] = Service(
            "hami-deviceplugin",
            f"http://127.0.0.1:{plugin_metrics}/metrics",
            stack.enter_context(
                running(
                    "deviceplugin",
                    python_module(
                        "hami_deviceplugin",
                        "--node-name=gpu-node-a",
                        f"--kube-url={api}",
                        f"--kubelet-socket={plugin_dir}/kubelet.sock",
                        "--device-backend=fake",
                        f"--fake-devices={FAKE_DEVICES}",
                        f"--config-file={DEVICE_CONFIG}",
                        f"--host-root={root / 'host'}",
                        f"--metrics-bind-address=127.0.0.1:{plugin_metrics}",
                    ),
                    log_dir=root,
                )
            ),
        )
        if scheduler_runnable():
            scheduler_metrics = free_port()
            services["hami-scheduler"] = Service(
                "hami-scheduler",
                f"http://127.0.0.1:{scheduler_metrics}/metrics",
                stack.enter_context(
                    running(
                        "scheduler",
                        python_module(
                            "hami_scheduler",
                            f"--kube-url={api}",
                            f"--http_bind=127.0.0.1:{free_port()}",
                            f"--metrics-bind-address=127.0.0.1:{scheduler_metrics}",
                            "--gpumap-bind-address=127.0.0.1:0",
                            "--scheduler-name=hami-scheduler",
                            f"--device-config-file={DEVICE_CONFIG}",
                        ),
                        log_dir=root,
                    )
                ),
            )
        monitor = monitor_script()
        if monitor.exists():
            hook_path = root / "host" / "usr" / "local" / "vgpu"
            (hook_path / "containers").mkdir(parents=True)
            monitor_metrics = free_port()
            services["hami-vgpu-monitor"] = Service(
                "hami-vgpu-monitor",
                f"http://127.0.0.1:{monitor_metrics}/metrics",
                stack.enter_context(
                    running(
                        "vgpu-monitor",
                        [
                            str(monitor),
                            f"--kube-url={api}",
                            "--device-backend=fake",
                            f"--fake-devices={FAKE_DEVICES}",
                            f"--metrics-bind-address=127.0.0.1:{monitor_metrics}",
                        ],
                        log_dir=root,
                        env={"HOOK_PATH": str(hook_path), "NODE_NAME": "gpu-node-a"},
                    )
                ),
            )
        for service in services.values():
            _wait_healthy(service)
        yield services


@pytest.mark.slow
def test_every_service_exposition_passes_promtool(
    prometheus_tools: PrometheusTools, stack: Mapping[str, Service]
) -> None:
    assert {"hami-webhook", "hami-deviceplugin"} <= set(stack)
    for service in stack.values():
        status, body = http_get(service.metrics_url)
        assert status == 200
        assert b"hami_build_info" in body
        check_exposition(prometheus_tools, body)


def prometheus_config(stack: Mapping[str, Service], root: Path) -> Path:
    """deploy/prometheus/prometheus.yml with each job's targets moved to the loopback ports."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"]["scrape_interval"] = "1s"
    config["global"]["evaluation_interval"] = "1s"
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
    jobs = []
    for job in config["scrape_configs"]:
        service = stack.get(job["job_name"])
        if service is None:
            continue
        address = service.metrics_url.split("/")[2]
        labels = job["static_configs"][0].get("labels", {})
        job["static_configs"] = [{"targets": [address], "labels": labels}]
        job["scrape_timeout"] = "1s"
        jobs.append(job)
    config["scrape_configs"] = jobs
    path = root / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_prometheus_scrapes_every_service(
    prometheus_tools: PrometheusTools, stack: Mapping[str, Service], tmp_path: Path
) -> None:
    port = free_port()
    config = prometheus_config(stack, tmp_path)
    argv = [
        str(prometheus_tools.prometheus),
        f"--config.file={config}",
        f"--storage.tsdb.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    base = f"http://127.0.0.1:{port}"
    with running("prometheus", argv, log_dir=tmp_path) as prometheus:

        def targets() -> list[dict[str, Any]]:
            status, body = http_get(f"{base}/api/v1/targets")
            assert status == 200
            active: list[dict[str, Any]] = json.loads(body)["data"]["activeTargets"]
            return active

        def all_up() -> bool:
            # Prometheus answers 503 to its API until its storage is open (/-/ready).
            if http_get(f"{base}/-/ready")[0] != 200:
                return False
            active = targets()
            return len(active) == len(stack) and all(t["health"] == "up" for t in active)

        wait_until(all_up, timeout=30, what="every target up", proc=prometheus)
        assert {t["labels"]["job"] for t in targets()} == set(stack)

        _status, body = http_get(f"{base}/api/v1/rules")
        groups = {g["name"]: g for g in json.loads(body)["data"]["groups"]}
        assert set(groups) == {
            "hami-scheduler",
            "hami-webhook",
            "hami-device-plugin",
            "hami-vgpu-monitor",
        }
        assert all(r["health"] != "err" for g in groups.values() for r in g["rules"])

        def query(promql: str) -> list[dict[str, Any]]:
            from urllib.parse import quote

            status, body = http_get(f"{base}/api/v1/query?query={quote(promql)}")
            assert status == 200, body
            result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
            return result

        # The series the dashboard and alerts read are in Prometheus, from the real processes.
        wait_until(
            lambda: bool(query('hami_deviceplugin_devices{health="healthy"}')),
            timeout=15,
            what="device plugin series",
            proc=prometheus,
        )
        (healthy,) = query('hami_deviceplugin_devices{health="healthy"}')
        assert healthy["value"][1] == "4"  # the four GPUs of the fake devices file
        assert healthy["metric"]["node_name"] == "gpu-node-a"
        if "hami-vgpu-monitor" in stack:
            # The monitor's own series, labelled with its node by the scrape job.
            wait_until(
                lambda: bool(query('hami_vgpu_monitor_regions{state="valid"}')),
                timeout=15,
                what="the vGPU monitor's series",
                proc=prometheus,
            )
            (regions,) = query('hami_vgpu_monitor_regions{state="valid"}')
            assert regions["metric"]["node_name"] == "gpu-node-a"
            assert regions["metric"]["job"] == "hami-vgpu-monitor"
            assert regions["metric"]["zone"] == "vGPU"
        # The webhook updates this gauge when /readyz is asked, as a readiness probe would.
        readyz = stack["hami-webhook"].metrics_url.replace("/metrics", "/readyz")
        wait_until(
            lambda: (
                http_get(readyz)[0] == 200
                and query("hami_webhook_quota_cache_synced")[0]["value"][1] == "1"
            ),
            timeout=15,
            what="the webhook's quota cache synced, as scraped",
            proc=prometheus,
        )
