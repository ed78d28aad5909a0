"""docker-compose.yml: structure, wiring between the services, and every service's command line
parsed by that service's own parser with the compose mounts mapped onto the repository."""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from hami_kubesim.certs import client_ssl_context
from hami_kubesim.cluster.config import ClusterConfig, load_cluster_config
from hami_kubesim.scheduler.config import load_scheduler_config

from .conftest import RenderFn
from .helpers import CHART, REPO

COMPOSE_FILE = REPO / "docker-compose.yml"
CONFIG_FILE = CHART / "charts" / "scheduler" / "files" / "kube-scheduler-config.yaml"
TOP_LEVEL = {"name", "services", "volumes", "networks", "configs", "secrets"}
SERVICE_KEYS = {
    "image",
    "build",
    "command",
    "entrypoint",
    "environment",
    "volumes",
    "ports",
    "depends_on",
    "user",
    "healthcheck",
    "restart",
    "sysctls",
    "profiles",
}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return document


def services(compose: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


def dependencies(service: Mapping[str, Any]) -> dict[str, str]:
    raw = service.get("depends_on", {})
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in raw.items()}


def flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    return values[-1] if values else None


def port_of(bind: str) -> int:
    return int(bind.rsplit(":", 1)[1])


def dockerfile_of(service: Mapping[str, Any]) -> Path:
    """The Dockerfile that builds the service's image (images are hami-<name>:<tag>)."""
    name = service["image"].split(":")[0].removeprefix("hami-")
    return REPO / "deploy" / "docker" / f"{name}.Dockerfile"


# --- structure -----------------------------------------------------------------------------------


def test_compose_file_structure(compose: dict[str, Any]) -> None:
    assert {k for k in compose if not k.startswith("x-")} <= TOP_LEVEL
    declared_volumes = set(compose.get("volumes", {}))
    host_ports: list[int] = []
    for name, service in services(compose).items():
        assert set(service) <= SERVICE_KEYS, (name, set(service) - SERVICE_KEYS)
        assert isinstance(service["image"], str), name
        if "build" in service:
            context = REPO / service["build"]["context"]
            assert (context / service["build"]["dockerfile"]).is_file(), name
        for entry in service.get("volumes", []):
            source, target, *mode = entry.split(":")
            assert target.startswith("/"), (name, entry)
            assert mode in ([], ["ro"], ["rw"]), (name, entry)
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), (name, source)
            else:
                assert source in declared_volumes, (name, source)
        for entry in service.get("ports", []):
            match = re.fullmatch(r"127\.0\.0\.1:(\d+):(\d+)", entry)
            assert match, (name, entry)
            host_ports.append(int(match.group(1)))
        for command_key in ("command", "entrypoint"):
            assert isinstance(service.get(command_key, []), list), (name, command_key)
        for dependency, condition in dependencies(service).items():
            assert dependency in compose["services"], (name, dependency)
            assert condition in CONDITIONS, (name, condition)
            target = compose["services"][dependency]
            if condition == "service_completed_successfully":
                assert target.get("restart") == "no"
            if condition == "service_healthy":
                assert "healthcheck" not in target, dependency
                assert "HEALTHCHECK" in dockerfile_of(target).read_text(), dependency
    assert len(host_ports) == len(set(host_ports)), "host ports collide"


def test_dependencies_have_no_cycle(compose: dict[str, Any]) -> None:
    graph = {name: set(dependencies(s)) for name, s in services(compose).items()}
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"cycle {' -> '.join((*path, name))}"
        if name not in done:
            for dependency in graph[name]:
                visit(dependency, (*path, name))
            done.add(name)

    for name in graph:
        visit(name, ())


def test_docker_compose_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI here; the structure is checked by the test above")
    probe = subprocess.run(
        [docker, "compose", "version"], capture_output=True, timeout=30, check=False
    )
    if probe.returncode != 0:
        pytest.skip("the docker CLI has no compose plugin here")
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_healthchecks_probe_the_ports_the_services_listen_on(compose: dict[str, Any]) -> None:
    checked = 0
    for name, service in services(compose).items():
        if not name.startswith(("webhook", "scheduler", "deviceplugin", "vgpu-monitor")):
            continue
        # The monitors run from the plugin's image and move its healthcheck to their own port.
        url = service.get("environment", {}).get("HAMI_HEALTHCHECK_URL")
        if url is None:
            found = re.search(r"HAMI_HEALTHCHECK_URL=(\S+)", dockerfile_of(service).read_text())
            assert found, name
            url = found.group(1)
        metrics = flag(service["command"], "--metrics-bind-address")
        assert metrics is not None
        assert url == f"http://127.0.0.1:{port_of(metrics)}/healthz", name
        checked += 1
    # webhook, scheduler, and a device plugin and a vGPU monitor per GPU node
    assert checked == 2 + 2 * len(gpu_nodes_of(compose))


def test_prometheus_scrapes_every_service_on_its_metrics_port(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        target
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    expected = set()
    for name, service in services(compose).items():
        metrics = flag(service.get("command", []), "--metrics-bind-address")
        if metrics is not None:
            expected.add(f"{name}:{port_of(metrics)}")
    assert targets == expected
    prometheus = services(compose)["prometheus"]
    assert "./deploy/prometheus:/etc/prometheus:ro" in prometheus["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def test_grafana_loads_the_dashboard(compose: dict[str, Any]) -> None:
    grafana = services(compose)["grafana"]
    provider = yaml.safe_load(
        (REPO / "deploy/grafana/provisioning/dashboards/hami.yml").read_text()
    )["providers"][0]
    mounts = dict(v.split(":")[1::-1] for v in grafana["volumes"])  # target -> source
    dashboard_dir = provider["options"]["path"]
    assert any(
        t.startswith(dashboard_dir + "/") and s.endswith("hami-dashboard.json")
        for t, s in mounts.items()
    )


# --- command lines parsed by the services' own parsers -------------------------------------------


@dataclass(frozen=True, slots=True)
class Mounts:
    """A service's view of the filesystem: container path -> path on this machine."""

    paths: Mapping[str, Path]

    def local(self, text: str) -> str:
        for target in sorted(self.paths, key=len, reverse=True):
            if text == target or text.startswith(target + "/"):
                return str(self.paths[target]) + text[len(target) :]
        return text

    def args(self, argv: list[str]) -> list[str]:
        out = []
        for arg in argv:
            name, eq, value = arg.partition("=")
            out.append(f"{name}={self.local(value)}" if eq else self.local(arg))
        return out


@pytest.fixture
def volumes(compose: dict[str, Any]) -> Iterator[dict[str, Path]]:
    """Named volumes as directories, the tls one filled by the bootstrap step.

    Short paths under /tmp: the kubelet plugin volume holds unix sockets (107-byte limit).
    """
    root = Path(tempfile.mkdtemp(prefix="hv-"))
    made = {}
    for name in compose.get("volumes", {}):
        made[name] = root / name
        made[name].mkdir()
    bootstrap_module().bootstrap(made["tls"], owner=None)
    yield made
    shutil.rmtree(root, ignore_errors=True)


def mounts_of(service: Mapping[str, Any], volumes: Mapping[str, Path]) -> Mounts:
    paths = {}
    for entry in service.get("volumes", []):
        source, target = entry.split(":")[:2]
        paths[target] = (REPO / source).resolve() if source.startswith(".") else volumes[source]
    return Mounts(paths)


def bootstrap_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "hami_compose_bootstrap", REPO / "deploy" / "compose" / "bootstrap.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_webhook_command_line(compose: dict[str, Any], volumes: dict[str, Path]) -> None:
    from hami_webhook.settings import parse_settings

    service = services(compose)["webhook"]
    settings = parse_settings(mounts_of(service, volumes).args(service["command"]), environ={})
    assert settings.tls
    assert settings.cert_file is not None
    assert Path(settings.cert_file).is_file()
    assert settings.key_file is not None
    assert Path(settings.key_file).is_file()
    assert settings.kube.kube_url == "http://kubesim:8001"
    assert settings.rules.scheduler_name == "hami-scheduler"
    assert port_of(settings.http_bind) == 9443
    assert settings.device_config.nvidia.resource_count_name == "nvidia.com/gpu"


@pytest.mark.parametrize("node", ["gpu-node-a", "gpu-node-b", "gpu-node-c"])
def test_device_plugin_command_lines(
    compose: dict[str, Any], volumes: dict[str, Path], node: str
) -> None:
    from hami_deviceplugin.gpu.backends.fake import parse_fake_devices
    from hami_deviceplugin.settings import parse_settings

    service = services(compose)[f"deviceplugin-{node}"]
    mounts = mounts_of(service, volumes)
    settings = parse_settings(mounts.args(service["command"]), environ={})
    assert settings.node_name == node
    assert settings.device_backend == "fake"
    assert settings.fake_devices is not None
    gpus = parse_fake_devices(settings.fake_devices.read_text())
    assert gpus
    assert settings.kube.kube_url == "http://kubesim:8001"
    assert settings.kubelet_socket == volumes["kubelet-plugins"] / node / "kubelet.sock"
    # Not root in compose: the node's host root is its directory in the volume, which the
    # unprivileged user owns.
    assert service["user"] == "65532:65532"
    assert settings.host_root == volumes["kubelet-plugins"] / node / "host"
    # What Allocate creates there (<hook>/vgpu/containers/...) is what the node's monitor reads.
    monitor = services(compose)[f"vgpu-monitor-{node}"]
    hook_path = mounts_of(monitor, volumes).local(monitor["environment"]["HOOK_PATH"])
    assert Path(hook_path) == settings.host_root / settings.hook_path.lstrip("/") / "vgpu"


def gpu_nodes_of(compose: Mapping[str, Any]) -> set[str]:
    return {n.removeprefix("deviceplugin-") for n in services(compose) if "deviceplugin" in n}


def dra_nodes_of(compose: Mapping[str, Any]) -> set[str]:
    """The nodes whose plugin runs the DRA kubelet plugin mode."""
    return {
        node
        for node in gpu_nodes_of(compose)
        if flag(services(compose)[f"deviceplugin-{node}"]["command"], "--mode") == "dra"
    }


def test_one_vgpu_monitor_per_gpu_node(compose: dict[str, Any]) -> None:
    monitors = {n.removeprefix("vgpu-monitor-") for n in services(compose) if "vgpu-monitor" in n}
    assert (
        monitors
        == gpu_nodes_of(compose)
        == {"gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-mig", "gpu-node-dra"}
    )
    assert dra_nodes_of(compose) == {"gpu-node-dra"}
    prometheus = dependencies(services(compose)["prometheus"])
    assert {f"vgpu-monitor-{node}" for node in monitors} <= set(prometheus)


@pytest.mark.parametrize("node", ["gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-dra"])
def test_vgpu_monitor_services(
    compose: dict[str, Any], volumes: dict[str, Path], node: str
) -> None:
    monitor = services(compose)[f"vgpu-monitor-{node}"]
    plugin = services(compose)[f"deviceplugin-{node}"]
    # The plugin's image, whose entrypoint is the plugin: the monitor names its console script.
    assert monitor["image"] == plugin["image"]
    assert monitor["build"] == plugin["build"]
    assert monitor["entrypoint"] == ["hami-vgpu-monitor"]
    assert monitor["user"] == plugin["user"] == "65532:65532"
    command = monitor["command"]
    assert flag(command, "--node-name") == node
    assert flag(command, "--kube-url") == flag(plugin["command"], "--kube-url")
    assert flag(command, "--device-backend") == "fake"
    # The same fake GPUs as the node's plugin, readable through the monitor's mounts.
    fake_devices = flag(command, "--fake-devices")
    assert fake_devices == flag(plugin["command"], "--fake-devices")
    assert fake_devices is not None
    assert Path(mounts_of(monitor, volumes).local(fake_devices)).is_file()
    assert flag(command, "--metrics-bind-address") == ":9394"
    env = monitor["environment"]
    assert env["NODE_NAME"] == node
    host = f"/var/lib/kubesim/{node}/host"
    assert env["HOOK_PATH"] == f"{host}/usr/local/vgpu"
    # The MIG lock file of the node's host, not the container's own /tmp.
    assert flag(command, "--mig-lock-file") == f"{host}/tmp/hami/hami-mig-apply.lock"
    # Writable: it writes feedback into the regions and removes stale directories.
    assert "kubelet-plugins:/var/lib/kubesim" in monitor["volumes"]
    assert dependencies(monitor) == {"kubesim": "service_healthy"}
    assert f"--host-dir={env['HOOK_PATH']}/containers" in services(compose)["bootstrap"]["command"]


@pytest.mark.parametrize("node", ["gpu-node-a", "gpu-node-b", "gpu-node-c", "gpu-node-dra"])
def test_vgpu_monitor_command_lines(
    compose: dict[str, Any], volumes: dict[str, Path], node: str
) -> None:
    settings_module = pytest.importorskip("hami_deviceplugin.monitor.settings")
    service = services(compose)[f"vgpu-monitor-{node}"]
    mounts = mounts_of(service, volumes)
    environ = {k: mounts.local(str(v)) for k, v in service["environment"].items()}
    settings = settings_module.parse_settings(mounts.args(service["command"]), environ=environ)
    assert settings.node_name == node
    assert settings.hook_path == volumes["kubelet-plugins"] / node / "host/usr/local/vgpu"
    assert settings.mig_lock_file.is_relative_to(volumes["kubelet-plugins"] / node / "host")
    assert settings.device_backend == "fake"
    assert settings.fake_devices is not None
    assert settings.fake_devices.is_file()
    assert settings.kube.kube_url == "http://kubesim:8001"
    assert settings.metrics_bind_address == ":9394"


def test_scheduler_command_line(compose: dict[str, Any], volumes: dict[str, Path]) -> None:
    settings_module = pytest.importorskip(
        "hami_scheduler.settings", reason="the scheduler's settings module has not landed yet"
    )
    service = services(compose)["scheduler"]
    argv = mounts_of(service, volumes).args(service["command"])
    settings = settings_module.parse_settings(argv, environ={})
    assert settings is not None
    # The read-only GPU map is published on the host (docs/gpumap.md).
    assert settings.gpumap_bind_address == ":9397"
    # No vGPU monitors in compose: no usage, rather than asking addresses that lead nowhere.
    assert settings.gpumap_monitors == ""
    assert "127.0.0.1:9393:9397" in service["ports"]


@pytest.fixture
def cluster(compose: dict[str, Any], volumes: dict[str, Path], tmp_path: Path) -> ClusterConfig:
    """kubesim's cluster file as the kubesim container sees it, paths mapped onto this machine."""
    from hami_kubesim.__main__ import build_parser

    service = services(compose)["kubesim"]
    mounts = mounts_of(service, volumes)
    args = build_parser().parse_args(mounts.args(service["command"]))
    assert args.command == "cluster"
    assert (args.host, args.port) == ("0.0.0.0", 8001)
    text = Path(args.config).read_text()
    for target in mounts.paths:
        text = re.sub(rf"(?<![\w/]){re.escape(target)}(?=[/\s\"\]]|$)", mounts.local(target), text)
    local = tmp_path / "cluster.yaml"
    local.write_text(text)
    return load_cluster_config(local)


def test_kubesim_reads_the_charts_scheduler_configuration(cluster: ClusterConfig) -> None:
    from hami_kubesim.cluster.simulated import scheduler_config_for

    assert cluster.scheduling.config == CONFIG_FILE.resolve()
    assert load_scheduler_config(cluster.scheduling.config).extenders
    assert cluster.scheduling.extender_urls == ("https://scheduler:443",)
    # The chart's hami-scheduler profile, and the cluster's own kube-scheduler for the pods that
    # name none (DRA pods), which allocates their claims.
    loop = scheduler_config_for(cluster.scheduling)
    assert loop.scheduler_names == {"hami-scheduler", "default-scheduler"}
    assert loop.dynamic_resources


def test_cluster_wiring_matches_the_services(
    compose: dict[str, Any], cluster: ClusterConfig, volumes: dict[str, Path]
) -> None:
    all_services = services(compose)
    # The webhook configuration's Service resolves to the webhook container's listener.
    (url,) = cluster.admission.service_urls.values()
    webhook_bind = flag(all_services["webhook"]["command"], "--http_bind")
    assert webhook_bind is not None
    assert url == f"https://webhook:{port_of(webhook_bind)}"
    # The extender URL is the scheduler container's listener.
    scheduler_bind = flag(all_services["scheduler"]["command"], "--http_bind")
    assert scheduler_bind is not None
    assert cluster.scheduling.extender_urls == (f"https://scheduler:{port_of(scheduler_bind)}",)
    # One device plugin per node (all are GPU nodes), talking to that node's kubelet stand-in
    # through the volume; the DRA node's kubelet is told where its DRA plugin is.
    gpu_nodes = sorted(n.name for n in cluster.nodes if n.labels.get("gpu") == "on")
    plugins = sorted(gpu_nodes_of(compose))
    assert gpu_nodes == plugins == sorted(n.name for n in cluster.nodes)
    assert {n.name for n in cluster.nodes if n.plugins_registry_dir} == dra_nodes_of(compose)
    assert cluster.kubelet.plugin_root == volumes["kubelet-plugins"]
    # The webhook configuration written by bootstrap is created when kubesim starts.
    kinds = [(o["kind"], o["metadata"]["name"]) for o in cluster.objects]
    assert ("MutatingWebhookConfiguration", "hami-webhook") in kinds
    reference = next(o for o in cluster.objects if o["kind"] == "MutatingWebhookConfiguration")[
        "webhooks"
    ][0]["clientConfig"]["service"]
    assert (reference["namespace"], reference["name"]) in cluster.admission.service_urls


def test_dra_node_plugin_meets_its_kubelet_stand_in(
    compose: dict[str, Any], cluster: ClusterConfig, volumes: dict[str, Path]
) -> None:
    from hami_deviceplugin.dra.sockets import registration_socket_path
    from hami_deviceplugin.gpu.backends.fake import parse_fake_devices
    from hami_deviceplugin.settings import parse_settings
    from hami_kubesim.kubelet.settings import KubeletSettings
    from hami_kubesim.stack.system.services import dra_dirs

    (node,) = dra_nodes_of(compose)
    service = services(compose)[f"deviceplugin-{node}"]
    settings = parse_settings(mounts_of(service, volumes).args(service["command"]), environ={})
    assert settings.mode == "dra"
    assert settings.node_name == node
    assert service["user"] == "65532:65532"
    assert settings.fake_devices is not None
    assert parse_fake_devices(settings.fake_devices.read_text())
    # Its kubelet dir and CDI dir in the shared volume, beside the node's plugin dir, as the
    # whole-system stack lays out a DRA node (stack.system.services.dra_dirs).
    plugin_dir = volumes["kubelet-plugins"] / node
    dirs = dra_dirs(plugin_dir)
    assert (settings.kubelet_dir, settings.cdi_dir) == (dirs.kubelet_dir, dirs.cdi_dir)
    # The node's kubelet stand-in watches the plugins_registry dir the plugin's registration
    # socket is in, and reads the CDI specs it writes (its last, highest-priority CDI dir).
    (spec,) = [n for n in cluster.nodes if n.name == node]
    kubelet = KubeletSettings(
        node_name=node,
        plugin_dir=plugin_dir,
        api_url="http://kubesim:8001",
        plugins_registry_dir=spec.plugins_registry_dir,
        cdi_spec_dirs=spec.cdi_dirs,
    )
    assert kubelet.registry_dir == registration_socket_path(settings.kubelet_dir).parent
    assert kubelet.cdi_dirs[-1] == settings.cdi_dir
    # Container paths: the sockets fit a unix socket's 107 bytes.
    assert len(f"{flag(service['command'], '--kubelet-dir')}/plugins/gpu.hami.io/dra.sock") < 100
    # HAMi-core's files under the node's host root, where its monitor looks.
    assert settings.host_root == plugin_dir / "host"
    # The chart's DRA DaemonSet names no device-plugin or pod-resources socket either.
    assert flag(service["command"], "--kubelet-socket") is None
    assert flag(service["command"], "--pod-resources-socket") is None
    assert dependencies(service) == {"kubesim": "service_healthy"}


def test_dra_cluster_settings(cluster: ClusterConfig, render: RenderFn) -> None:
    # Claims from templates and claims released by gone pods need the resourceclaim controller.
    assert cluster.controllers.resourceclaim
    assert cluster.scheduling.dynamic_resources
    # The stand-ins find a (re)started plugin soon and retry a failed Prepare soon.
    assert cluster.kubelet.plugin_watch_interval <= 1
    assert cluster.kubelet.dra_retry_interval <= 2
    # The DeviceClass the claims name, as the chart ships it.
    (ours,) = [o for o in cluster.objects if o["kind"] == "DeviceClass"]
    values = {"devicePlugin": {"dra": {"enabled": True, "nodeSelector": {"gpu-dra": "on"}}}}
    charts = render(values).one("DeviceClass", "gpu.hami.io")
    assert (ours["apiVersion"], ours["metadata"]["name"]) == (
        charts["apiVersion"],
        charts["metadata"]["name"],
    )
    assert ours["spec"] == charts["spec"]


# --- the bootstrap step --------------------------------------------------------------------------


def test_bootstrap_configuration_matches_the_charts(
    render: RenderFn, volumes: dict[str, Path]
) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    written = yaml.safe_load((volumes["tls"] / "webhook-configuration.yaml").read_text())
    kubernetes_validate.validate(written, "1.30.0", strict=True)
    (ours,) = written["webhooks"]
    (charts,) = render().one("MutatingWebhookConfiguration")["webhooks"]
    for hook in (ours, charts):
        hook.pop("clientConfig")
    assert ours == charts


def _handshake(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext, host: str) -> None:
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(left, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(right, server_hostname=host) as tls:
            tls.sendall(b"x")
    finally:
        thread.join(timeout=10)
    if errors:
        raise errors[0]


@pytest.mark.parametrize(
    ("directory", "host"), [("webhook", "webhook"), ("webhook", "hami-webhook.hami-system.svc")]
)
def test_webhook_certificate_verifies_for_the_names_kubesim_uses(
    volumes: dict[str, Path], directory: str, host: str
) -> None:
    tls = volumes["tls"] / directory
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tls / "tls.crt", tls / "tls.key")
    written = yaml.safe_load((volumes["tls"] / "webhook-configuration.yaml").read_text())
    import base64

    ca = base64.b64decode(written["webhooks"][0]["clientConfig"]["caBundle"])
    _handshake(server, client_ssl_context(ca), host)
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(server, client_ssl_context(ca), "somewhere-else")


def test_bootstrap_keeps_existing_certificates(volumes: dict[str, Path]) -> None:
    before = (volumes["tls"] / "webhook" / "tls.crt").read_bytes()
    bootstrap_module().bootstrap(volumes["tls"], owner=None)
    assert (volumes["tls"] / "webhook" / "tls.crt").read_bytes() == before
    assert (volumes["tls"] / "scheduler" / "tls.key").stat().st_mode & 0o077 == 0


def test_bootstrap_creates_every_nodes_hook_directory(
    compose: dict[str, Any], volumes: dict[str, Path]
) -> None:
    bootstrap = services(compose)["bootstrap"]
    command = [str(a) for a in bootstrap["command"]]
    owner = command.index("--owner")
    del command[owner : owner + 2]  # the files stay with the test's user
    assert bootstrap_module().main(mounts_of(bootstrap, volumes).args(command)) == 0
    for node in gpu_nodes_of(compose):
        monitor = services(compose)[f"vgpu-monitor-{node}"]
        hook_path = Path(mounts_of(monitor, volumes).local(monitor["environment"]["HOOK_PATH"]))
        assert (hook_path / "containers").is_dir()
        assert hook_path.is_relative_to(volumes["kubelet-plugins"] / node)


def test_bootstrap_hands_created_host_directories_to_the_owner(tmp_path: Path) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("handing directories to another uid needs root")
    existing = tmp_path / "node"
    existing.mkdir()
    target = existing / "host" / "usr" / "local" / "vgpu" / "containers"
    bootstrap_module().make_host_dirs([target], owner=65532)
    created = [target, *target.parents][: len(target.relative_to(existing).parts)]
    assert [p.stat().st_uid for p in created] == [65532] * 5
    # What was there already keeps its owner.
    assert existing.stat().st_uid == 0
    bootstrap_module().make_host_dirs([target], owner=65532)
    assert target.is_dir()


def test_examples_step_submits_the_demos_examples(
    compose: dict[str, Any], cluster: ClusterConfig
) -> None:
    examples = services(compose)["examples"]
    assert "./deploy/examples:/etc/hami/examples:ro" in examples["volumes"]
    # The GPU examples, then the DRA ones (no capacity totals needed, unlike the preemption
    # example; the other vendors' nodes are the demo's own).
    submitted = [a.split("=", 1)[1] for a in examples["command"] if a.startswith("--examples=")]
    assert submitted == ["/etc/hami/examples", "/etc/hami/examples/dra"]
    # It waits for the register annotations of the device-plugin nodes, and for the DRA node's
    # ResourceSlice (its plugin removes the register annotation).
    waited = {a.split("=", 1)[1] for a in examples["command"] if a.startswith("--gpu-node=")}
    assert waited == gpu_nodes_of(compose) - dra_nodes_of(compose)
    sliced = {a.split("=", 1)[1] for a in examples["command"] if a.startswith("--dra-node=")}
    assert sliced == dra_nodes_of(compose)
    assert {f"deviceplugin-{n}" for n in gpu_nodes_of(compose)} <= set(dependencies(examples))
    assert sorted((REPO / "deploy" / "examples").glob("*.yaml"))
    # Every DRA example pod lands on the DRA node: its selector and toleration match that node.
    (node,) = [n for n in cluster.nodes if n.name in dra_nodes_of(compose)]
    pods = [
        doc
        for path in sorted((REPO / "deploy" / "examples" / "dra").glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc and doc["kind"] == "Pod"
    ]
    assert pods
    for pod in pods:
        assert pod["spec"]["nodeSelector"].items() <= node.labels.items()
        tolerated = {(t["key"], t.get("value"), t["effect"]) for t in pod["spec"]["tolerations"]}
        assert {(t["key"], t.get("value"), t["effect"]) for t in node.taints} <= tolerated
        assert "schedulerName" not in pod["spec"]


def test_fake_gpus_are_the_demos() -> None:
    demo = pytest.importorskip("hami_kubesim.demo", reason="the demo has not landed")
    spec = pytest.importorskip("hami_kubesim.stack.system.spec")
    files = sorted((REPO / "deploy" / "compose" / "fake-devices").glob("*.yaml"))
    # Compose runs the demo's GPU nodes, its DRA node included; the other vendors' nodes and the
    # preemption example's node are the demo's own so far.
    gpu_nodes = [n for n in demo.DEMO_NODES if n.gpus and n.name != demo.PREEMPTION_NODE]
    assert demo.DRA_NODE in {n.name for n in gpu_nodes}
    assert [f.stem for f in files] == sorted(node.name for node in gpu_nodes)
    for node in gpu_nodes:
        written = yaml.safe_load(
            (REPO / f"deploy/compose/fake-devices/{node.name}.yaml").read_text()
        )
        assert written == spec.fake_devices_document(node), node.name


def iter_compose_python() -> Iterator[Path]:
    yield from sorted((REPO / "deploy" / "compose").glob("*.py"))


def test_compose_scripts_have_a_usage_line() -> None:
    for script in iter_compose_python():
        # They run in the kubesim image; its packages are the workspace's here.
        result = subprocess.run(
            [sys.executable, str(script), "--help"],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        assert "usage:" in result.stdout
