"""Flags, environment variables and the device config file → Settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_webhook.__main__ import main
from hami_webhook.settings import Settings, parse_settings


def test_defaults() -> None:
    settings = parse_settings([])
    assert settings.http_bind == "0.0.0.0:9443"
    assert settings.metrics_bind_address == ":9396"
    assert (settings.cert_file, settings.key_file, settings.tls) == (None, None, False)
    assert settings.rules.scheduler_name == "hami-scheduler"
    assert settings.rules.force_overwrite_default_scheduler is True
    assert settings.enable_quota is True
    assert settings.dra_claims is False
    nvidia = settings.rules.nvidia
    assert (nvidia.resource_count_name, nvidia.default_gpu_num, nvidia.overwrite_env) == (
        "nvidia.com/gpu",
        1,
        False,
    )
    assert settings.log_format == "json"
    assert settings.rules.vendors[0].common_word == "NVIDIA"


def test_hami_flag_names() -> None:
    settings = parse_settings(
        [
            "--http_bind=127.0.0.1:8443",
            "--cert_file=/tls/tls.crt",
            "--key_file",
            "/tls/tls.key",
            "--metrics-bind-address=127.0.0.1:9999",
            "--scheduler-name=my-scheduler",
            "--force-overwrite-default-scheduler=false",
            "--default-mem=1024",
            "--default-cores=20",
            "--default-gpu=2",
            "--resource-name=example.com/vgpu",
            "--resource-mem=example.com/vmem",
            "--resource-mem-percentage=example.com/vmem-pct",
            "--resource-cores=example.com/vcores",
            "--resource-priority=example.com/prio",
            "--overwrite-env",
            "--log-format=console",
            "--kube-url=http://127.0.0.1:8001",
            "--enable-quota=false",
        ]
    )
    assert settings.http_bind == "127.0.0.1:8443"
    assert (settings.cert_file, settings.key_file) == ("/tls/tls.crt", "/tls/tls.key")
    assert settings.rules.scheduler_name == "my-scheduler"
    assert settings.rules.force_overwrite_default_scheduler is False
    nvidia = settings.rules.nvidia
    assert (nvidia.default_memory, nvidia.default_cores, nvidia.default_gpu_num) == (1024, 20, 2)
    assert (
        nvidia.resource_count_name,
        nvidia.resource_memory_name,
        nvidia.resource_memory_percentage_name,
        nvidia.resource_core_name,
        nvidia.resource_priority_name,
    ) == (
        "example.com/vgpu",
        "example.com/vmem",
        "example.com/vmem-pct",
        "example.com/vcores",
        "example.com/prio",
    )
    assert nvidia.overwrite_env is True
    row = settings.rules.vendors[0]
    assert (row.count_resource, row.default_memory) == ("example.com/vgpu", 1024)
    assert settings.log_format == "console"
    assert settings.kube.kube_url == "http://127.0.0.1:8001"
    assert settings.enable_quota is False


def test_environment_then_flags() -> None:
    env = {
        "HAMI_SCHEDULER_NAME": "from-env",
        "HAMI_OVERWRITE_ENV": "true",
        "HAMI_DEFAULT_GPU": "3",
        "HAMI_HTTP_BIND": "127.0.0.1:1",
    }
    settings = parse_settings(["--http_bind=127.0.0.1:2"], env)
    assert settings.rules.scheduler_name == "from-env"
    assert settings.rules.nvidia.overwrite_env is True
    assert settings.rules.nvidia.default_gpu_num == 3
    assert settings.http_bind == "127.0.0.1:2"


def test_device_config_file_overrides_flags(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(
        "nvidia:\n"
        "  resourceCountName: cfg.com/gpu\n"
        "  defaultMemory: 2048\n"
        "  gpuCorePolicy: force\n"
        "  runtimeClassName: nvidia\n"
        "  memoryFactor: 2\n"
        "cambricon:\n"
        "  resourceCountName: cfg.com/mlu\n"
    )
    settings = parse_settings(
        [
            f"--device-config-file={path}",
            "--resource-name=flag.com/gpu",
            "--default-mem=1",
            "--default-cores=5",
        ]
    )
    nvidia = settings.rules.nvidia
    assert nvidia.resource_count_name == "cfg.com/gpu"
    assert nvidia.default_memory == 2048
    assert nvidia.default_cores == 5  # not in the file: the flag stays
    assert (nvidia.gpu_core_policy, nvidia.runtime_class_name, nvidia.memory_factor) == (
        "force",
        "nvidia",
        2,
    )
    words = {row.common_word: row for row in settings.rules.vendors}
    assert words["MLU"].count_resource == "cfg.com/mlu"
    assert words["NVIDIA"].memory_factor == 2


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--cert_file=/a"], "--cert_file and --key_file"),
        (["--http_bind=nowhere"], "bind address"),
        (["--default-gpu=-1"], "must not be negative"),
        (["--overwrite-env=maybe"], "invalid boolean"),
        (["--log-format=xml"], "invalid choice"),
        (["--default-cores=150"], "defaultCores"),
        (["--device-config-file=/does/not/exist"], "cannot read"),
        (["--shutdown-grace-period=0s"], "must be positive"),
        (["--shutdown-grace-period=soon"], "soon"),
    ],
)
def test_invalid_input_exits_with_a_message(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_settings(argv)
    assert info.value.code == 2
    assert fragment in capsys.readouterr().err


def test_shutdown_grace_period_is_a_go_duration() -> None:
    assert parse_settings([]).shutdown_grace_s == 10.0
    assert parse_settings(["--shutdown-grace-period=1m30s"]).shutdown_grace_s == 90.0
    assert parse_settings([], {"HAMI_SHUTDOWN_GRACE_PERIOD": "3s"}).shutdown_grace_s == 3.0


def test_main_reads_the_process_environment_and_exits_2_on_invalid_flags(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HAMI_CERT_FILE", "/only/one")
    with pytest.raises(SystemExit) as info:
        main(["--enable-quota=false"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: hami-webhook")
    assert "--cert_file and --key_file must be given together" in err


def test_bad_device_config_content(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("nvidia:\n  gpuCorePolicy: sometimes\n")
    with pytest.raises(SystemExit):
        parse_settings([f"--device-config-file={path}"])
    assert "gpuCorePolicy" in capsys.readouterr().err


def test_settings_is_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.http_bind = "x"  # type: ignore[misc]


def test_vendor_rules_follow_the_device_config_and_enable_flags(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(
        "mthreads: {memoryPerCard: [160]}\n"
        "vnpus: {configs: [{commonWord: Ascend910C, superPod: true, runtimeClassName: ascend}]}\n"
        "iluvatars: [{chipName: BI-V150, commonWord: BI-V150}]\n"
    )
    plain = parse_settings([f"--device-config-file={path}"]).rules.rule_set
    assert (plain.ascend, plain.iluvatar) == ((), ())
    assert plain.mthreads_memory_per_card == (160,)
    enabled = parse_settings(
        [f"--device-config-file={path}", "--enable-ascend=true", "--enable-iluvatar=true"]
    ).rules.rule_set
    assert [rule.chip.common_word for rule in enabled.ascend] == ["Ascend910C"]
    assert enabled.ascend[0].chip.runtime_class_name == "ascend"
    assert [row.common_word for row in enabled.iluvatar] == ["BI-V150"]


def test_dra_claims_flag_and_environment() -> None:
    assert parse_settings(["--dra-claims"]).dra_claims is True
    assert parse_settings(["--dra-claims=false"], {"HAMI_DRA_CLAIMS": "true"}).dra_claims is False
    assert parse_settings([], {"HAMI_DRA_CLAIMS": "true"}).dra_claims is True
