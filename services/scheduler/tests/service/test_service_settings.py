"""Flags, environment variables, durations and the device config file → Settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_protocol.durations import format_go_duration, parse_go_duration
from hami_scheduler.settings import parse_settings


def test_hami_defaults() -> None:
    settings = parse_settings([], {})
    assert settings.http_bind == "127.0.0.1:8080"
    assert settings.metrics_bind_address == ":9395"
    assert (settings.cert_file, settings.key_file, settings.tls) == (None, None, False)
    assert settings.scheduler_name == ""
    assert settings.component == "hami-scheduler"
    assert settings.node_policy == "binpack"
    assert settings.gpu_policy.entries == ("spread",)
    assert settings.node_lock_timeout_s == 300
    assert settings.node_lock_retry_timeout_s == 28
    assert settings.node_lock_wait_s == 20
    assert settings.filter_mode == "single"
    assert settings.handshake_timeout_s == 300
    assert settings.handshake_interval_s == 15
    assert settings.leader.enabled is False
    assert settings.node_label_selector == ""
    assert settings.max_body_bytes == 1024 * 1024
    assert settings.vendors[0].common_word == "NVIDIA"
    # HAMi's monitor port on each node's address; the chart passes its monitor Service instead.
    assert settings.gpumap_monitors == "http://{node_ip}:9394/metrics"
    assert settings.gpumap_monitor_timeout_s == 2


def test_flags_with_hami_names() -> None:
    settings = parse_settings(
        [
            "--http_bind=0.0.0.0:443",
            "--cert_file=/tls/tls.crt",
            "--key_file",
            "/tls/tls.key",
            "--scheduler-name=hami-scheduler",
            "--node-scheduler-policy=spread",
            "--gpu-scheduler-policy=binpack,numa",
            "--metrics-bind-address=:9999",
            "--node-label-selector=gpu=on,zone!=b",
            "--node-lock-timeout=2m30s",
            "--node-lock-retry-timeout=0",
            "--leader-elect",
            "--leader-elect-resource-name=lease",
            "--leader-elect-resource-namespace=hami",
            "--leader-elect-identity=me",
            "--filter-mode=all",
            "--handshake-timeout=90s",
            "--default-mem=1024",
            "--default-cores=20",
            "--resource-name=example.com/vgpu",
            "--kube-url=http://127.0.0.1:8001",
            "--kube-qps=50",
            "--kube-burst=100",
            "--log-format=console",
        ],
        {},
    )
    assert settings.tls
    assert settings.node_policy == "spread"
    assert settings.gpu_policy.entries == ("binpack", "numa")
    assert settings.node_label_selector == "gpu=on,zone!=b"
    assert settings.node_lock_timeout_s == 150
    assert settings.node_lock_retry_timeout_s == 0
    leader = settings.leader
    assert (leader.enabled, leader.mode, leader.name, leader.namespace, leader.identity) == (
        True,
        "follow",
        "lease",
        "hami",
        "me",
    )
    assert settings.filter_mode == "all"
    assert settings.handshake_timeout_s == 90
    nvidia = settings.vendors[0]
    assert nvidia.count_resource == "example.com/vgpu"
    assert (nvidia.default_memory, nvidia.default_cores) == (1024, 20)
    assert (settings.kube.kube_url, settings.kube.qps, settings.kube.burst) == (
        "http://127.0.0.1:8001",
        50,
        100,
    )


def test_node_lock_wait() -> None:
    assert parse_settings(["--node-lock-wait=29s"], {}).node_lock_wait_s == 29
    assert parse_settings([], {"HAMI_NODE_LOCK_WAIT": "0"}).node_lock_wait_s == 0


def test_environment_and_pod_identity() -> None:
    settings = parse_settings(
        ["--leader-elect=true"],
        {
            "HAMI_FILTER_MODE": "all",
            "HAMI_SCHEDULER_NAME": "gpu-sched",
            "POD_NAME": "sched-0",
            "POD_NAMESPACE": "hami-system",
        },
    )
    assert settings.filter_mode == "all"
    assert (settings.pod_name, settings.pod_namespace) == ("sched-0", "hami-system")
    assert settings.leader.identity == "sched-0"
    assert settings.leader.name == "gpu-sched"
    assert settings.leader.namespace == "hami-system"


def test_device_config_file_overrides_flags(tmp_path: Path) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  resourceCountName: hami.io/gpu\n  defaultMemory: 2048\n")
    settings = parse_settings([f"--device-config-file={config}", "--default-mem=1"], {})
    assert settings.vendors[0].count_resource == "hami.io/gpu"
    assert settings.vendors[0].default_memory == 2048


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cert_file=/a"], "--cert_file and --key_file must be given together"),
        (["--filter-mode=some"], "invalid choice"),
        (["--node-lock-timeout=soon"], "invalid duration"),
        (["--gpu-scheduler-policy=fastest"], "unknown GPU policy"),
        (["--node-label-selector=a in"], "--node-label-selector"),
        (["--handshake-timeout=0s"], "--handshake-timeout must be positive"),
        (
            ["--node-lock-wait=30s"],
            "--node-lock-wait must be at least 0 and below 30s: kube-scheduler gives up on a "
            "bind after the extender's httpTimeout",
        ),
        (["--node-lock-wait=-1s"], "--node-lock-wait"),
        (
            ["--leader-elect", "--leader-elect-renew-deadline=20s"],
            "lease duration > renew deadline",
        ),
        (["--device-config-file=/does/not/exist"], "cannot read"),
        (["--gpumap-monitors=hami-system"], "--gpumap-monitors must be empty, a URL template"),
        (["--gpumap-monitors=http://{host}:9394/"], "may use only {node} and {node_ip}"),
        (["--gpumap-monitor-timeout=0s"], "--gpumap-monitor-timeout must be above 0"),
    ],
)
def test_invalid_flags_exit_with_usage(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings(argv, {})
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("5m", 300),
        ("30s", 30),
        ("1h30m", 5400),
        ("500ms", 0.5),
        ("1.5s", 1.5),
        ("0", 0),
        ("45", 45),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(300, "5m0s"), (28, "28s"), (3600, "1h0m0s"), (1.5, "1.5s"), (0.5, "500ms"), (0, "0s")],
)
def test_go_duration_text(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
    assert parse_go_duration(text) == pytest.approx(seconds)
