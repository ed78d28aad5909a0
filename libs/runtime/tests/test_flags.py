"""The shared flag table: env names, booleans, both parser kinds, device-config precedence."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.errors import ConfigError
from hami_runtime.flags import (
    DEVICE_CONFIG_FLAG,
    Flag,
    build_explicit_parser,
    build_parser,
    default_value,
    env_name,
    explicit_values,
    flag_env,
    load_device_config,
    non_negative,
    parse_bool,
    read_flag_file,
)


def _tristate(text: str) -> bool | str:
    return "auto" if text == "auto" else parse_bool(text)


FLAGS = (
    Flag(("--split-count",), "split_count", "10", "tasks per GPU", non_negative, env="SPLIT"),
    Flag(("--mode",), "mode", "a", "mode", choices=("a", "b")),
    Flag(("--strict",), "strict", "true", "strict", is_bool=True),
    Flag(("--rdma",), "rdma", "auto", "rdma", _tristate, is_bool=True),
    Flag(("--name", "--alias"), "name", None, "a name"),
)


def test_env_names() -> None:
    assert env_name("--node-lock-timeout") == "HAMI_NODE_LOCK_TIMEOUT"
    assert env_name("--device-split-count", prefix="") == "DEVICE_SPLIT_COUNT"
    assert [flag_env(flag) for flag in FLAGS] == [
        "SPLIT",
        "HAMI_MODE",
        "HAMI_STRICT",
        "HAMI_RDMA",
        "HAMI_NAME",
    ]


GO_TRUE = ["1", "t", "T", "TRUE", "true", "True"]
GO_FALSE = ["0", "f", "F", "FALSE", "false", "False"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [(text, True) for text in [*GO_TRUE, "yes", "Y", "on", " true "]]
    + [(text, False) for text in [*GO_FALSE, "no", "N", "off"]],
)
def test_parse_bool_takes_go_spellings_and_more(text: str, expected: bool) -> None:
    assert parse_bool(text) is expected


@given(st.text(max_size=8))
def test_parse_bool_raises_only_argparse_errors_naming_the_text(text: str) -> None:
    if text.strip().lower() in {
        "1",
        "t",
        "true",
        "yes",
        "y",
        "on",
        "0",
        "f",
        "false",
        "no",
        "n",
        "off",
    }:
        assert isinstance(parse_bool(text), bool)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="invalid boolean") as raised:
            parse_bool(text)
        assert repr(text) in str(raised.value)


def test_default_value_converts_like_a_given_value() -> None:
    assert [default_value(flag) for flag in FLAGS] == [10, "a", True, "auto", None]


def test_env_fills_defaults_and_the_command_line_wins() -> None:
    env = {"SPLIT": "4", "HAMI_STRICT": "off", "HAMI_ALIAS": "ignored", "HAMI_NAME": "env"}
    parser = build_parser(prog="p", description="d", flags=FLAGS, environ=env)
    args = parser.parse_args([])
    assert (args.split_count, args.mode, args.strict, args.rdma, args.name) == (
        4,
        "a",
        False,
        "auto",
        "env",
    )
    args = parser.parse_args(["--split-count", "2", "--strict", "--rdma=false", "--alias", "x"])
    assert (args.split_count, args.strict, args.rdma, args.name) == (2, True, False, "x")


def test_help_names_the_env_var_and_a_default_only_when_there_is_one() -> None:
    text = build_explicit_parser(prog="p", description="d", flags=FLAGS).format_help()
    assert "(env SPLIT; default '10')" in text
    assert "(env HAMI_NAME)" in text
    assert "default None" not in text
    assert text == build_parser(prog="p", description="d", flags=FLAGS).format_help()


def _explicit(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    parser = build_explicit_parser(prog="p", description="d", flags=FLAGS)
    return explicit_values(parser, parser.parse_args(argv), FLAGS, env)


def test_explicit_values_hold_only_what_was_given() -> None:
    assert _explicit([], {}) == {}
    assert _explicit(["--mode", "b", "--rdma"], {"SPLIT": "3", "HAMI_RDMA": "auto"}) == {
        "mode": "b",
        "rdma": True,
        "split_count": 3,
    }
    assert _explicit(["--split-count", "5"], {"SPLIT": "3", "HAMI_STRICT": "F"}) == {
        "split_count": 5,
        "strict": False,
    }
    assert _explicit([], {"HAMI_NAME": ""}) == {"name": ""}


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        ([], {"SPLIT": "many"}, "SPLIT='many': invalid integer 'many'"),
        ([], {"SPLIT": "-1"}, "SPLIT='-1': must not be negative"),
        ([], {"HAMI_MODE": "c"}, "HAMI_MODE='c': choose from a, b"),
        ([], {"HAMI_RDMA": "sometimes"}, "HAMI_RDMA='sometimes': invalid boolean"),
        (["--mode", "c"], {}, "argument --mode: invalid choice"),
        (["--strict=maybe"], {}, "argument --strict: invalid boolean 'maybe'"),
    ],
)
def test_bad_values_exit_2_naming_them(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _explicit(argv, env)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: p")
    assert message in err


@pytest.fixture
def device_config(tmp_path: Path) -> Path:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia:\n  resourceCountName: file.com/gpu\n  deviceSplitCount: 5\n")
    return path


def test_device_config_precedence(device_config: Path) -> None:
    defaults = {"resourceCountName": "flag.com/gpu", "defaultMemory": 7}
    plain = load_device_config(None).nvidia
    assert (plain.resource_count_name, plain.default_memory) == ("nvidia.com/gpu", 0)
    assert load_device_config(None, defaults).nvidia.resource_count_name == "flag.com/gpu"
    under = load_device_config(str(device_config), defaults).nvidia
    assert (under.resource_count_name, under.default_memory) == ("file.com/gpu", 7)
    assert under.node_defaults.device_split_count == 5
    over = load_device_config(
        str(device_config), defaults, nvidia_overrides={"deviceSplitCount": 3}
    ).nvidia
    assert (over.resource_count_name, over.node_defaults.device_split_count) == ("file.com/gpu", 3)
    only_over = load_device_config(
        str(device_config), nvidia_overrides={"resourceCountName": "over.com/gpu"}
    ).nvidia
    assert only_over.resource_count_name == "over.com/gpu"
    assert only_over.node_defaults.device_split_count == 5


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (None, "cannot read"),
        ("a: [\n", "not valid YAML"),
        ("- a\n", "expected a YAML mapping"),
    ],
)
@pytest.mark.parametrize("flag", [DEVICE_CONFIG_FLAG, "--config-file"])
def test_device_config_errors_name_the_flag(
    tmp_path: Path, text: str | None, reason: str, flag: str
) -> None:
    path = tmp_path / "device-config.yaml"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=reason) as raised:
        load_device_config(str(path), flag=flag)
    assert str(raised.value).startswith(f"{flag}:")


def test_device_config_nvidia_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text("nvidia: 3\n")
    with pytest.raises(ConfigError, match="nvidia: expected a mapping"):
        load_device_config(str(path))


def test_read_flag_file(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{}")
    assert read_flag_file(str(path), "--node-config-file") == "{}"
    with pytest.raises(ConfigError, match="--node-config-file: cannot read"):
        read_flag_file(str(tmp_path / "missing"), "--node-config-file")
