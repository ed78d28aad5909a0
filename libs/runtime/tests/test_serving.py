"""What the HTTP services share: converters, the serving settings and flags, metrics, TLS, main."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from hami_kubesim.certs import generate_ca
from hami_runtime import flags
from hami_runtime.entry import service_main
from hami_runtime.flags import (
    duration,
    number,
    positive_duration,
    positive_int,
    positive_number,
)
from hami_runtime.service_metrics import ServiceMetrics
from hami_runtime.serving import (
    ServingSettings,
    kube_settings,
    parse_or_exit,
    server_tls,
    serving_flags,
    serving_values,
)

BIND: Final = "0.0.0.0:9999"
METRICS: Final = ":9998"


@dataclass(frozen=True, slots=True)
class _Settings(ServingSettings):
    http_bind: str = BIND
    metrics_bind_address: str = METRICS
    extra: int = 1


@pytest.mark.parametrize(
    ("convert", "text", "value"),
    [
        (positive_int, "3", 3),
        (number, "-1.5", -1.5),
        (positive_number, "0.25", 0.25),
        (duration, "1m30s", 90.0),
        (duration, "0", 0.0),
        (duration, "45", 45.0),
        (positive_duration, "500ms", 0.5),
        (positive_duration, "5", 5.0),
    ],
)
def test_converters_accept(convert: Any, text: str, value: object) -> None:
    assert convert(text) == value


@pytest.mark.parametrize(
    ("convert", "text", "message"),
    [
        (positive_int, "0", "must be at least 1"),
        (positive_int, "1.5", "invalid integer"),
        (number, "inf", "invalid number"),
        (number, "x", "invalid number"),
        (positive_number, "0", "must be a positive number"),
        (positive_number, "inf", "must be a positive number"),
        (positive_number, "nan", "must be a positive number"),
        (duration, "soon", "invalid duration"),
        (positive_duration, "0s", "must be positive"),
        (positive_duration, "-1s", "must be positive"),
    ],
)
def test_converters_refuse_with_a_message(convert: Any, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        convert(text)


def _parser(environ: dict[str, str] | None = None) -> argparse.ArgumentParser:
    return flags.build_parser(
        prog="svc",
        description="d",
        flags=serving_flags(default_bind=BIND, metrics_bind=METRICS, what="svc"),
        environ=environ,
    )


def _settings(args: argparse.Namespace) -> _Settings:
    return _Settings(**serving_values(args), kube=kube_settings(args, user_agent="svc", qps=5))


def test_serving_flags_defaults_and_hami_names() -> None:
    assert parse_or_exit(_parser(), [], _settings) == _Settings(
        kube=kube_settings(_parser().parse_args([]), user_agent="svc", qps=5)
    )
    settings = parse_or_exit(
        _parser({"HAMI_LOG_LEVEL": "warning"}),
        [
            "--http_bind=127.0.0.1:1",
            "--cert_file=/c",
            "--key-file=/k",
            "--metrics-bind-address=127.0.0.1:2",
            "--tls-reload-interval=500ms",
            "--shutdown-grace-period=3s",
            "--kube-url=http://127.0.0.1:3",
            "--log-format=console",
        ],
        _settings,
    )
    assert (settings.http_bind, settings.metrics_bind_address) == ("127.0.0.1:1", "127.0.0.1:2")
    assert (settings.cert_file, settings.key_file, settings.tls) == ("/c", "/k", True)
    assert (settings.tls_reload_interval_s, settings.shutdown_grace_s) == (0.5, 3.0)
    assert (settings.log_format, settings.log_level) == ("console", "warning")
    assert (settings.kube.kube_url, settings.kube.qps, settings.kube.user_agent) == (
        "http://127.0.0.1:3",
        5,
        "svc",
    )
    assert parse_or_exit(_parser(), ["--debug"], _settings).log_level == "debug"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cert_file=/c"], "--cert_file and --key_file must be given together"),
        (["--http_bind=nowhere"], "has no port"),
        (["--metrics-bind-address=:x"], "non-numeric port"),
        (["--tls-reload-interval=0"], "must be positive"),
        (["--shutdown-grace-period=never"], "invalid duration"),
        (["--log-format=xml"], "invalid choice"),
    ],
)
def test_invalid_serving_flags_exit_2_with_the_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_or_exit(_parser(), argv, _settings)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_settings_checks_apply_to_subclasses() -> None:
    with pytest.raises(ValueError, match="--shutdown-grace-period"):
        _Settings(shutdown_grace_s=0)
    with pytest.raises(ValueError, match="--tls-reload-interval"):
        _Settings(tls_reload_interval_s=-1)
    with pytest.raises(AttributeError):
        _Settings().extra = 2  # type: ignore[misc]


def test_service_metrics_export_build_info_and_certificate_reloads() -> None:
    metrics = ServiceMetrics("hami_x", distribution="hami-x")
    reloads = [0]
    metrics.track_tls_reloads(lambda: reloads[0])
    reloads[0] = 3
    registry = metrics.registry
    assert registry.get_sample_value("hami_x_tls_certificate_reloads") == 3
    families = {family.name: family for family in registry.collect()}
    (build,) = families["hami_build_info"].samples
    assert build.value == 1
    assert set(build.labels) >= {"version", "python_version", "platform"}


def test_server_tls_only_with_a_pair(tmp_path: Path) -> None:
    metrics = ServiceMetrics("hami_x", distribution="hami-x")
    assert server_tls(_Settings(), metrics) is None
    files = generate_ca().issue(["127.0.0.1"]).write(tmp_path)
    settings = _Settings(
        cert_file=str(files.cert), key_file=str(files.key), tls_reload_interval_s=0.5
    )
    tls = server_tls(settings, metrics)
    assert tls is not None
    assert (tls.cert_file, tls.poll_interval) == (str(files.cert), 0.5)
    tls.reloads = 2
    assert metrics.registry.get_sample_value("hami_x_tls_certificate_reloads") == 2
    with pytest.raises(FileNotFoundError, match="No such file"):
        server_tls(_Settings(cert_file=str(tmp_path / "no"), key_file=str(files.key)), metrics)


def test_service_main_exits_2_on_invalid_flags_before_anything_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    served: list[object] = []

    async def serve(settings: _Settings) -> None:
        served.append(settings)

    def parse(argv: Any, environ: Any) -> _Settings:
        return parse_or_exit(_parser(dict(environ)), argv, _settings)

    with pytest.raises(SystemExit) as exited:
        service_main("svc", ["--http_bind=nowhere"], parse=parse, serve=serve)
    assert exited.value.code == 2
    assert "has no port" in capsys.readouterr().err
    assert served == []
