"""The vGPU monitor's flags and environment → Settings; bad values exit 2 naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_deviceplugin.monitor.__main__ import main
from hami_deviceplugin.monitor.settings import Settings, parse_settings

BASE = ["--node-name", "n1", "--hook-path", "/usr/local/vgpu"]


def test_defaults_are_hamis() -> None:
    settings = parse_settings(BASE, {})
    assert settings == Settings(
        node_name="n1", hook_path=Path("/usr/local/vgpu"), kube=settings.kube
    )
    assert settings.containers_dir == Path("/usr/local/vgpu/containers")
    assert settings.resync_interval_s == 300.0
    assert settings.feedback_interval_s == 5.0
    assert settings.metrics_bind_address == ":9394"
    assert settings.mig_lock_file == Path("/tmp/hami/hami-mig-apply.lock")
    assert settings.legacy_metrics is False
    assert settings.device_backend == "nvml"
    assert settings.shutdown_grace_s == 10.0
    assert settings.kube.user_agent == "hami-vgpu-monitor"


def test_hamis_environment_variables() -> None:
    env = {
        "HOOK_PATH": "/opt/vgpu",
        "NODE_NAME": "gpu-7",
        "HAMI_RESYNC_INTERVAL": "1m30s",
        "HAMI_LEGACY_METRICS": "true",
        "HAMI_METRICS_BIND_ADDRESS": "127.0.0.1:9500",
        "HAMI_FEEDBACK_INTERVAL": "250ms",
        "HAMI_MIG_LOCK_FILE": "/run/mig.lock",
        "HAMI_KUBE_URL": "http://127.0.0.1:8001",
    }
    settings = parse_settings([], env)
    assert settings.hook_path == Path("/opt/vgpu")
    assert settings.node_name == "gpu-7"
    assert settings.resync_interval_s == 90.0
    assert settings.legacy_metrics is True
    assert settings.metrics_bind_address == "127.0.0.1:9500"
    assert settings.feedback_interval_s == 0.25
    assert settings.mig_lock_file == Path("/run/mig.lock")
    assert settings.kube.kube_url == "http://127.0.0.1:8001"


def test_flags_win_over_the_environment(tmp_path: Path) -> None:
    devices = tmp_path / "gpus.yaml"
    settings = parse_settings(
        [
            *BASE,
            "--resync-interval=10s",
            "--legacy-metrics",
            "--device-backend=fake",
            f"--fake-devices={devices}",
            "--log-format=console",
            "--log-level=debug",
            "--shutdown-grace-period=3s",
        ],
        {"HOOK_PATH": "/elsewhere", "HAMI_RESYNC_INTERVAL": "1h", "HAMI_LEGACY_METRICS": "false"},
    )
    assert settings.hook_path == Path("/usr/local/vgpu")
    assert settings.resync_interval_s == 10.0
    assert settings.legacy_metrics is True
    assert settings.device_backend == "fake"
    assert settings.fake_devices == devices
    assert (settings.log_format, settings.log_level) == ("console", "debug")
    assert settings.shutdown_grace_s == 3.0


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["--node-name", "n1"], {}, "--hook-path"),
        (["--hook-path", "/x"], {}, "--node-name"),
        (["--node-name", "n1", "--hook-path", "relative/dir"], {}, "relative/dir"),
        ([*BASE, "--resync-interval", "soon"], {}, "soon"),
        (BASE, {"HAMI_RESYNC_INTERVAL": "-5m"}, "-5m"),
        ([*BASE, "--feedback-interval", "0s"], {}, "0s"),
        ([*BASE, "--legacy-metrics", "maybe"], {}, "maybe"),
        ([*BASE, "--metrics-bind-address", "nowhere"], {}, "nowhere"),
        ([*BASE, "--device-backend", "cuda"], {}, "cuda"),
        ([*BASE, "--device-backend", "fake"], {}, "--fake-devices"),
        ([*BASE, "--log-level", "loud"], {}, "loud"),
        ([*BASE, "--log-format", "xml"], {}, "xml"),
    ],
)
def test_bad_values_exit_2_naming_them(
    argv: list[str], env: dict[str, str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings(argv, env)
    assert exited.value.code == 2
    assert named in capsys.readouterr().err


def test_main_exits_2_on_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--node-name", "n1"])
    assert exited.value.code == 2
    assert "HOOK_PATH" in capsys.readouterr().err
