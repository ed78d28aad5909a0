"""Flags, environment and config files → Settings, with the documented precedence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hami_deviceplugin.cli_flags import build_parser
from hami_deviceplugin.gpu.backends.nvml import HealthChecks
from hami_deviceplugin.settings import Settings, parse_settings, socket_name_for
from hami_protocol.config.node import FilterDevices, NodeSettings

BASE = ["--node-name", "n1", "--node-config-file", ""]


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "device-config.yaml"
    path.write_text(
        "nvidia:\n"
        "  resourceCountName: example.com/vgpu\n"
        "  deviceSplitCount: 5\n"
        "  deviceMemoryScaling: 2\n"
        "  disableCoreLimit: true\n"
        "  libCudaLogLevel: 3\n"
    )
    return path


@pytest.fixture
def node_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    entries = [
        {"name": "n1", "devicesplitcount": 7, "filterdevices": {"uuid": ["GPU-x"], "index": [3]}},
        {"name": "other", "devicesplitcount": 99},
        {"name": "n1", "enablegetpreferredallocation": True, "devicecorescaling": 1.5},
    ]
    path.write_text(json.dumps({"nodeconfig": entries}))
    return path


def test_defaults() -> None:
    settings = parse_settings(BASE, {})
    assert settings.node == NodeSettings()
    assert settings.node.device_split_count == 10
    assert settings.resource_name == "nvidia.com/gpu"
    assert settings.socket_path == Path("/var/lib/kubelet/device-plugins/nvidia-gpu.sock")
    assert settings.hook_path == "/usr/local"
    assert settings.host_root == Path("/")
    assert settings.pod_resources_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    assert settings.device_backend == "nvml"
    assert settings.health == HealthChecks()
    assert settings.fail_on_init_error
    assert not settings.enable_topology_score
    assert settings.register_interval_s == 30.0
    assert settings.register_retry_interval_s == 5.0


def test_config_file_then_flags_then_node_entry(config_file: Path, node_file: Path) -> None:
    from_file = parse_settings([*BASE, "--config-file", str(config_file)], {})
    assert from_file.node.device_split_count == 5
    assert from_file.node.device_memory_scaling == 2.0
    assert from_file.node.lib_cuda_log_level == "3"
    assert from_file.disable_core_limit
    assert from_file.resource_name == "example.com/vgpu"
    assert from_file.socket_path.name == "example-vgpu.sock"

    flags = [
        "--config-file", str(config_file),
        "--device-split-count", "3",
        "--device-memory-scaling", "1.25",
        "--device-cores-scaling", "2",
        "--disable-core-limit=false",
        "--resource-name", "nvidia.com/gpu",
    ]  # fmt: skip
    with_flags = parse_settings([*BASE, *flags], {})
    assert with_flags.node.device_split_count == 3
    assert with_flags.node.device_memory_scaling == 1.25
    assert with_flags.node.device_core_scaling == 2.0
    assert not with_flags.disable_core_limit
    assert with_flags.resource_name == "nvidia.com/gpu"

    with_node = parse_settings(
        ["--node-name", "n1", "--node-config-file", str(node_file), *flags], {}
    )
    assert with_node.node.device_split_count == 7  # node entry beats the flag
    assert with_node.node.device_core_scaling == 1.5
    assert with_node.node.device_memory_scaling == 1.25  # not set per node: the flag stays
    assert with_node.node.enable_get_preferred_allocation
    assert with_node.node.filter_devices == FilterDevices(uuids=("GPU-x",), indexes=(3,))


def test_environment_and_command_line(config_file: Path) -> None:
    env = {
        "NODE_NAME": "from-env",
        "DEVICE_SPLIT_COUNT": "6",
        "DISABLE_CORE_LIMIT": "true",
        "HOOK_PATH": "/opt/hami",
        "HAMI_DEVICE_BACKEND": "fake",
        "HAMI_FAKE_DEVICES": "/tmp/gpus.yaml",
        "HAMI_HOST_ROOT": "none",
        "HAMI_POD_RESOURCES_SOCKET": "none",
        "DP_DISABLE_HEALTHCHECKS": "48",
        "NODE_CONFIG_FILE": "",
    }
    settings = parse_settings(["--config-file", str(config_file)], env)
    assert settings.node_name == "from-env"
    assert settings.node.device_split_count == 6  # env counts as given: beats the file
    assert settings.disable_core_limit
    assert settings.hook_path == "/opt/hami"
    assert settings.device_backend == "fake"
    assert settings.fake_devices == Path("/tmp/gpus.yaml")
    assert settings.host_root is None
    assert settings.pod_resources_socket is None
    assert 48 in settings.health.ignored_xids
    overridden = parse_settings(["--device-split-count", "2", "--node-name", "cli"], env)
    assert overridden.node.device_split_count == 2
    assert overridden.node_name == "cli"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--node-name", ""], {}, "--node-name"),
        (["--mig-strategy", "mixed"], {}, "MIG strategy 'mixed' is not supported"),
        (["--device-list-strategy", "cdi-cri"], {}, "not supported"),
        (["--device-split-count", "0"], {}, "must be at least 1"),
        (["--device-memory-scaling", "-1"], {}, "positive"),
        (["--device-backend", "fake"], {}, "needs --fake-devices"),
        (["--device-backend", "rocm"], {}, "invalid choice"),
        (["--config-file", "/nonexistent.yaml"], {}, "--config-file: cannot read"),
        (["--node-config-file", "/nonexistent.json"], {}, "--node-config-file: cannot read"),
        (["--unknown-flag"], {}, "unrecognized arguments"),
        (["--hook-path", "relative"], {}, "must be absolute"),
        ([], {"DEVICE_SPLIT_COUNT": "many"}, "DEVICE_SPLIT_COUNT='many': invalid integer"),
        ([], {"MIG_STRATEGY": "mixed"}, "MIG_STRATEGY='mixed': MIG strategy 'mixed'"),
        ([], {"HAMI_DEVICE_BACKEND": "rocm"}, "HAMI_DEVICE_BACKEND='rocm': choose from nvml"),
        ([], {"DISABLE_CORE_LIMIT": "maybe"}, "DISABLE_CORE_LIMIT='maybe': invalid boolean"),
        ([], {"DP_ENABLE_HEALTHCHECKS": "x"}, "not an Xid"),
    ],
)
def test_refused_loudly(
    argv: list[str], env: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings([*BASE, *argv], env)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: hami-deviceplugin")
    assert message in err


@pytest.mark.parametrize(
    ("flag", "variable"),
    [
        ("--node-name", "NODE_NAME"),
        ("--config-file", "CONFIG_FILE"),
        ("--node-config-file", "NODE_CONFIG_FILE"),
        ("--device-split-count", "DEVICE_SPLIT_COUNT"),
        ("--device-memory-scaling", "DEVICE_MEMORY_SCALING"),
        ("--device-cores-scaling", "DEVICE_CORES_SCALING"),
        ("--disable-core-limit", "DISABLE_CORE_LIMIT"),
        ("--resource-name", "RESOURCE_NAME"),
        ("--kubelet-socket", "KUBELET_SOCKET"),
        ("--mig-strategy", "MIG_STRATEGY"),
        ("--device-list-strategy", "DEVICE_LIST_STRATEGY"),
        ("--fail-on-init-error", "FAIL_ON_INIT_ERROR"),
        ("--hook-path", "HOOK_PATH"),
        ("--enable-topology-score", "ENABLE_TOPOLOGY_SCORE"),
        ("--device-backend", "HAMI_DEVICE_BACKEND"),
        ("--rdma-poll-interval", "HAMI_RDMA_POLL_INTERVAL"),
        ("--allocate-timeout", "HAMI_ALLOCATE_TIMEOUT"),
    ],
)
def test_help_names_hamis_env_variables(flag: str, variable: str) -> None:
    text = " ".join(build_parser().format_help().split())
    assert f"{flag} " in text
    assert f"(env {variable}" in text


def test_environment_names_reach_settings() -> None:
    settings = parse_settings(
        ["--node-config-file", ""],
        {
            "NODE_NAME": "n2",
            "KUBELET_SOCKET": "/plugins/kubelet.sock",
            "RESOURCE_NAME": "example.com/gpu",
            "DEVICE_MEMORY_SCALING": "1.5",
            "FAIL_ON_INIT_ERROR": "false",
            "HAMI_ALLOCATE_TIMEOUT": "7",
            "ENABLE_TOPOLOGY_SCORE": "true",
        },
    )
    assert settings.node_name == "n2"
    assert settings.socket_path == Path("/plugins/example-gpu.sock")
    assert settings.node.device_memory_scaling == 1.5
    assert not settings.fail_on_init_error
    assert settings.allocate_timeout_s == 7.0
    assert settings.enable_topology_score
    flag_wins = parse_settings(
        [*BASE, "--enable-topology-score=false"], {"ENABLE_TOPOLOGY_SCORE": "1"}
    )
    assert not flag_wins.enable_topology_score


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        *[(text, True) for text in ("1", "t", "T", "TRUE", "True", "yes")],
        *[(text, False) for text in ("0", "f", "F", "FALSE", "False", "off")],
    ],
)
def test_booleans_take_go_spellings(text: str, expected: bool) -> None:
    from_env = parse_settings(BASE, {"DISABLE_CORE_LIMIT": text})
    from_flag = parse_settings([*BASE, f"--disable-core-limit={text}"], {})
    assert from_env.disable_core_limit is from_flag.disable_core_limit is expected


@pytest.mark.parametrize("mode", ["mig", "mps", "hami-core"])
def test_operating_modes_are_taken(tmp_path: Path, mode: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"nodeconfig": [{"name": "n1", "operatingmode": mode}]}))
    settings = parse_settings(["--node-name", "n1", "--node-config-file", str(path)], {})
    assert settings.node.operating_mode == mode


def test_unknown_operating_mode_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"nodeconfig": [{"name": "n1", "operatingmode": "vgpu"}]}))
    with pytest.raises(SystemExit):
        parse_settings(["--node-name", "n1", "--node-config-file", str(path)], {})
    assert "vgpu" in capsys.readouterr().err


def test_mig_flags(tmp_path: Path) -> None:
    defaults = parse_settings(["--node-name", "n1"], {})
    assert defaults.mig_lock_file == Path("/tmp/hami/hami-mig-apply.lock")
    assert defaults.mig_reconcile_interval_s == 5.0
    given = parse_settings(
        ["--node-name", "n1", "--mig-reconcile-interval", "0.5"],
        {"HAMI_MIG_LOCK_FILE": str(tmp_path / "mig.lock")},
    )
    assert given.mig_lock_file == tmp_path / "mig.lock"
    assert given.mig_reconcile_interval_s == 0.5


def test_socket_names() -> None:
    assert socket_name_for("nvidia.com/gpu") == "nvidia-gpu.sock"
    assert socket_name_for("example.com/vgpu") == "example-vgpu.sock"
    settings = Settings(node_name="n", socket_name="custom.sock")
    assert settings.socket_path.name == "custom.sock"
    with pytest.raises(ValueError, match="too long"):
        Settings(node_name="n", kubelet_socket=Path("/" + "x" * 120) / "kubelet.sock")


def test_rdma_defaults_and_flags(tmp_path: Path) -> None:
    settings = parse_settings(BASE, {})
    assert settings.enable_rdma is None  # auto: when NICs are found
    assert settings.rdma_resource_name == "koordinator.sh/rdma"
    assert settings.rdma_socket_path == Path(
        "/var/lib/kubelet/device-plugins/koordinator-rdma.sock"
    )
    assert settings.nic_source == "sysfs"
    assert settings.rdma_poll_interval_s == 10.0
    fake = tmp_path / "devices.yaml"
    fake_args = ["--device-backend", "fake", "--fake-devices", str(fake)]
    assert parse_settings([*BASE, *fake_args], {}).nic_source == "fake"
    assert parse_settings([*BASE, *fake_args, "--rdma-discovery", "sysfs"], {}).nic_source == (
        "sysfs"
    )
    assert parse_settings([*BASE, "--enable-rdma"], {}).enable_rdma is True
    assert parse_settings([*BASE, "--enable-rdma=false"], {}).enable_rdma is False
    assert parse_settings(BASE, {"HAMI_ENABLE_RDMA": "true"}).enable_rdma is True
    assert (
        parse_settings([*BASE, "--enable-rdma", "auto"], {"HAMI_ENABLE_RDMA": "0"}).enable_rdma
        is None
    )
    custom = parse_settings(
        [*BASE, "--rdma-resource-name", "example.com/ib", "--rdma-poll-interval", "2"], {}
    )
    assert custom.rdma_socket_path.name == "example-ib.sock"
    assert custom.rdma_poll_interval_s == 2.0
    named = parse_settings(BASE, {"HAMI_RDMA_SOCKET_NAME": "rdma.sock"})
    assert named.rdma_socket_path.name == "rdma.sock"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rdma-resource-name", "rdma"], "needs a domain"),
        (["--rdma-resource-name", "nvidia.com/gpu"], "must differ"),
        (["--rdma-socket-name", "nvidia-gpu.sock"], "cannot share"),
        (["--rdma-discovery", "fake"], "needs --fake-devices"),
        (["--enable-rdma", "sometimes"], "invalid boolean"),
        (["--rdma-poll-interval", "0"], "positive"),
    ],
)
def test_rdma_settings_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_settings([*BASE, *argv], {})
    assert message in capsys.readouterr().err


def test_the_fake_mig_state_file_is_beside_the_devices_file_unless_named(tmp_path: Path) -> None:
    fake_args = ["--device-backend", "fake", "--fake-devices", str(tmp_path / "devices.yaml")]
    assert parse_settings([*BASE, *fake_args], {}).fake_mig_state is None
    named = tmp_path / "state" / "mig.json"
    settings = parse_settings([*BASE, *fake_args, "--fake-mig-state", str(named)], {})
    assert settings.fake_mig_state == named


def test_dra_mode_flags(tmp_path: Path) -> None:
    default = parse_settings(BASE, {})
    assert default.mode == "device-plugin"
    assert default.kubelet_dir == Path("/var/lib/kubelet")
    assert default.cdi_dir == Path("/var/run/cdi")
    assert default.dra_state_dir == Path("/var/lib/kubelet/plugins/gpu.hami.io")
    settings = parse_settings(
        [*BASE, "--kubelet-dir", str(tmp_path), "--cdi-dir", str(tmp_path / "cdi")],
        {"HAMI_MODE": "dra", "HAMI_SLICE_RESYNC_INTERVAL": "3"},
    )
    assert settings.mode == "dra"
    assert settings.dra_state_dir == tmp_path / "plugins" / "gpu.hami.io"
    assert settings.cdi_dir == tmp_path / "cdi"
    assert settings.slice_resync_interval_s == 3.0
    named = parse_settings([*BASE, "--mode", "dra", "--dra-state-dir", str(tmp_path / "s")], {})
    assert named.dra_state_dir == tmp_path / "s"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mode", "both"], "invalid choice: 'both'"),
        (["--mode", "dra", "--slice-resync-interval", "0"], "--slice-resync-interval"),
    ],
)
def test_dra_mode_refused(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_settings([*BASE, *argv], {})
    assert message in capsys.readouterr().err


def test_dra_mode_refuses_mig_nodes() -> None:
    with pytest.raises(ValueError, match="does not support operating mode 'mig'"):
        Settings(node_name="n", mode="dra", node=NodeSettings(operating_mode="mig"))
