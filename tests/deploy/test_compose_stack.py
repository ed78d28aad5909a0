"""docker-compose.yml run without a container engine: every service as a real process on
loopback, with the compose file's own commands, environment, mounts and the bootstrap step
translated to this machine, then the `examples` step must see every example pod placed and
running, and the vGPU monitors (when installed) report the containers' shared regions."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_kubesim.stack.system.ports import free_port

from .helpers import REPO, http_get, running, wait_until

COMPOSE_FILE = REPO / "docker-compose.yml"
MODULES = {
    "hami-kubesim": "hami_kubesim",
    "hami-webhook": "hami_webhook",
    "hami-scheduler": "hami_scheduler",
    "hami-deviceplugin": "hami_deviceplugin",
}
SERVICES = ("webhook", "scheduler")
"""Started before the device plugins, which follow the compose file's ``deviceplugin-*``."""


@dataclass
class Translation:
    """Compose's view (service names, container paths and ports) mapped onto loopback."""

    compose: Mapping[str, Any]
    volumes: Mapping[str, Path]
    ports: dict[tuple[str, int], int] = field(default_factory=dict)

    def port(self, service: str, container_port: int) -> int:
        key = (service, container_port)
        if key not in self.ports:
            self.ports[key] = free_port()
        return self.ports[key]

    def mounts(self, service: str) -> dict[str, Path]:
        paths = {}
        for entry in self.compose["services"][service].get("volumes", []):
            source, target = entry.split(":")[:2]
            local = (REPO / source).resolve() if source.startswith(".") else self.volumes[source]
            paths[target] = local
        return paths

    def text(self, service: str, text: str) -> str:
        """Paths, other services' addresses and this service's listeners, translated."""
        for target, local in sorted(self.mounts(service).items(), key=lambda m: -len(m[0])):
            text = re.sub(rf"(?<![\w/.]){re.escape(target)}(?=/|\b|$)", str(local), text)
        for name in self.compose["services"]:
            text = re.sub(rf"(?<![\w-]){re.escape(name)}:(\d+)", self._address_of(name), text)
        return re.sub(
            r"^(--[\w-]+=)(?:0\.0\.0\.0)?:(\d+)$",
            lambda m: f"{m.group(1)}127.0.0.1:{self.port(service, int(m.group(2)))}",
            text,
        )

    def _address_of(self, name: str) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            return f"127.0.0.1:{self.port(name, int(match.group(1)))}"

        return replace

    def env(self, service: str) -> dict[str, str]:
        spec = self.compose["services"][service]
        return {k: self.text(service, str(v)) for k, v in spec.get("environment", {}).items()}

    def argv(self, service: str) -> list[str]:
        spec = self.compose["services"][service]
        command = [str(a) for a in spec.get("command", [])]
        entrypoint = spec.get("entrypoint")
        if entrypoint and entrypoint[0] == "python":
            _python, script, *rest = entrypoint
            head = [sys.executable, self.text(service, script), *rest]
        elif entrypoint:
            # A console script of the image's distribution, installed in this environment.
            program, *rest = entrypoint
            head = [str(console_script(program)), *rest]
        else:
            head = [sys.executable, "-m", MODULES[spec["image"].split(":")[0]]]
        args = []
        for index, arg in enumerate(command):
            previous = command[index - 1] if index else ""
            if previous == "--host":
                args.append("127.0.0.1")
            elif previous == "--port":
                args.append(str(self.port(service, int(arg))))
            elif arg != "--owner" and previous != "--owner":  # files stay with the test's user
                args.append(self.text(service, arg))
        return head + args


def console_script(name: str) -> Path:
    return Path(sys.executable).parent / name


def containers_by_node(api: str) -> dict[str, dict[str, set[str]]]:
    """node -> pod uid -> container names (init containers too), of the pods bound to a node."""
    status, body = http_get(f"{api}/api/v1/pods")
    assert status == 200
    found: dict[str, dict[str, set[str]]] = {}
    for pod in json.loads(body)["items"]:
        node = pod["spec"].get("nodeName")
        if node:
            spec = pod["spec"]
            names = {c["name"] for c in spec["containers"] + spec.get("initContainers", [])}
            found.setdefault(node, {})[pod["metadata"]["uid"]] = names
    return found


def answers(url: str) -> Callable[[], bool]:
    return lambda: http_get(url)[0] == 200


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="hc-"))  # short: unix socket paths are limited
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_compose_stack_places_the_example_pods(root: Path) -> None:
    pytest.importorskip("hami_scheduler.__main__", reason="the scheduler service is not there")
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    volumes = {name: root / name for name in compose["volumes"]}
    for path in volumes.values():
        path.mkdir()
    t = Translation(compose, volumes)

    bootstrap = subprocess.run(
        t.argv("bootstrap"), capture_output=True, text=True, timeout=60, check=False
    )
    assert bootstrap.returncode == 0, bootstrap.stderr

    # kubesim reads its cluster file from a mount; write the translated copy in its place.
    kubesim_argv = t.argv("kubesim")
    config_index = kubesim_argv.index("--config") + 1
    cluster_text = t.text("kubesim", Path(kubesim_argv[config_index]).read_text())
    local_cluster = root / "cluster.yaml"
    local_cluster.write_text(cluster_text)
    kubesim_argv[config_index] = str(local_cluster)
    api = f"http://127.0.0.1:{t.port('kubesim', 8001)}"

    with ExitStack() as stack:
        kubesim = stack.enter_context(running("kubesim", kubesim_argv, log_dir=root))
        wait_until(answers(f"{api}/healthz"), timeout=30, what="kubesim", proc=kubesim)
        # The vGPU monitors too, once their console script is installed here.
        plugins = [n for n in compose["services"] if n.startswith("deviceplugin-")]
        monitors = [n for n in compose["services"] if n.startswith("vgpu-monitor-")]
        if not console_script("hami-vgpu-monitor").exists():
            monitors = []
        listeners: dict[str, str] = {}
        for name in (*SERVICES, *plugins, *monitors):
            proc = stack.enter_context(running(name, t.argv(name), log_dir=root, env=t.env(name)))
            metrics = re.search(r"--metrics-bind-address=(\S+)", " ".join(t.argv(name)))
            assert metrics is not None
            listeners[name] = metrics.group(1)
            wait_until(
                answers(f"http://{metrics.group(1)}/healthz"), timeout=30, what=name, proc=proc
            )
        examples = subprocess.run(
            [*t.argv("examples"), "--timeout", "60"],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        pod_uids = containers_by_node(api)
        # The monitors read the regions the kubelet stand-ins keep for the GPU containers.
        urls = [f"http://{listeners[name]}/metrics" for name in monitors]
        if urls:
            wait_until(
                lambda: any(b"hami_vgpu_memory_limit_bytes{" in http_get(u)[1] for u in urls),
                timeout=30,
                what="per-container series from a vGPU monitor",
            )
    assert examples.returncode == 0, examples.stdout + examples.stderr
    # Every example settled as its demo.hami.io/* annotations say (exit status 0), one line each;
    # the DRA examples' claims and templates were created first, a line each too.
    directories = [
        Path(a.split("=", 1)[1]) for a in t.argv("examples") if a.startswith("--examples=")
    ]
    assert REPO / "deploy" / "examples" / "dra" in directories
    documents = [
        doc
        for directory in directories
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    lines = examples.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == [
        d["metadata"]["name"]
        if d.get("kind", "Pod") == "Pod"
        else f"{d['kind']}/{d['metadata']['name']}"
        for d in documents
    ]
    pod_lines = [line for line in lines if "/" not in line.split()[0]]
    assert all(line.endswith("[ok]") for line in pod_lines)
    assert all(line.split()[1] == "created" for line in lines if line not in pod_lines)
    outcomes = {line.split()[0]: line.split()[1] for line in pod_lines}
    assert "placed" in outcomes.values()
    # The DRA examples ran on the DRA node, their claims sharing its one GPU.
    assert outcomes["dra-train"] == outcomes["dra-infer"] == "placed"
    assert len(pod_uids["gpu-node-dra"]) == 2
    assert "claims=GPU-" in examples.stdout
    # Allocate prepared HAMi-core's per-container directories in each node's host root, where
    # the node's monitor looks (HOOK_PATH/containers/<pod uid>_<container>).
    found = 0
    for name in compose["services"]:
        if not name.startswith("vgpu-monitor-"):
            continue
        node = name.removeprefix("vgpu-monitor-")
        hook_path = Path(t.env(name)["HOOK_PATH"])
        assert hook_path.is_relative_to(volumes["kubelet-plugins"] / node)
        for directory in (hook_path / "containers").iterdir():
            uid, _, container = directory.name.partition("_")
            assert uid in pod_uids[node], (node, directory.name)
            assert container in pod_uids[node][uid], (node, directory.name)
            found += 1
    assert found
