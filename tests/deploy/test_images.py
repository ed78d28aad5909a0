"""The Dockerfiles (no container engine here: their structure is checked against the workspace),
the HEALTHCHECK script, and `make images` without a container engine."""

from __future__ import annotations

import http.server
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hami_kubesim.stack.system.ports import free_port

from .conftest import RenderFn
from .helpers import REPO

DOCKER_DIR = REPO / "deploy" / "docker"
IMAGES = {
    "scheduler": "hami-scheduler",
    "webhook": "hami-webhook",
    "deviceplugin": "hami-deviceplugin",
    "kubesim": "hami-kubesim",
}
ROOT_USER_ALLOWED = {"deviceplugin"}
OCI_LABELS = ("title", "description", "version", "revision", "created")


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str
    text: str


@dataclass(frozen=True, slots=True)
class Stage:
    base: str
    name: str
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[str]:
        return [i.text for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(path: Path) -> list[Stage]:
    """Instructions per stage: comments dropped, backslash continuations joined."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, f"{path}: dangling line continuation"
    stages: list[Stage] = []
    current: list[Instruction] = []
    base = name = ""
    for line in logical:
        keyword, _, text = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            if base:
                stages.append(Stage(base, name, tuple(current)))
            parts = text.split()
            base, name = parts[0], parts[2] if len(parts) > 2 else ""
            current = []
        elif base:
            current.append(Instruction(keyword, text.strip()))
    stages.append(Stage(base, name, tuple(current)))
    return stages


def workspace_members() -> list[Path]:
    root = tomllib.loads((REPO / "pyproject.toml").read_text())
    members = []
    for pattern in root["tool"]["uv"]["workspace"]["members"]:
        members += [p for p in sorted(REPO.glob(pattern)) if (p / "pyproject.toml").is_file()]
    return members


@pytest.mark.parametrize("image", list(IMAGES))
def test_dockerfile_builds_from_the_lock_in_stages(image: str) -> None:
    path = DOCKER_DIR / f"{image}.Dockerfile"
    stages = parse_dockerfile(path)
    names = [s.name for s in stages]
    assert "builder" in names
    assert len(stages) >= 3
    builder = stages[names.index("builder")]
    runtime = stages[-1]
    assert runtime.base == builder.base == "${PYTHON_IMAGE}"
    assert re.search(r"ARG PYTHON_IMAGE=python:3\.\d+-slim", path.read_text())
    package = IMAGES[image]
    syncs = [r for r in builder.all("RUN") if "uv sync" in r]
    assert syncs, "the builder runs uv sync"
    for command in syncs:
        assert "--frozen" in command
        assert "--no-dev" in command
        assert f"--package {package}" in command
    assert any("--no-editable" in c for c in syncs), "the venv must not point at /src"
    assert "COPY --from=builder /opt/venv /opt/venv" in [f"COPY {c}" for c in runtime.all("COPY")]


@pytest.mark.parametrize("image", list(IMAGES))
def test_dockerfile_copies_what_uv_needs(image: str) -> None:
    stages = parse_dockerfile(DOCKER_DIR / f"{image}.Dockerfile")
    copied = set()
    for stage in stages:
        for text in stage.all("COPY"):
            if text.startswith("--from="):
                continue  # from another stage or image, not from the build context
            parts = [p for p in shlex.split(text) if not p.startswith("--")]
            for source in parts[:-1]:
                copied.add(source)
                assert (REPO / source).exists(), f"COPY source {source} missing"
    assert {"pyproject.toml", "uv.lock"} <= copied
    # uv reads the whole workspace, so every member's pyproject.toml is in the build.
    for member in workspace_members():
        assert str((member / "pyproject.toml").relative_to(REPO)) in copied


@pytest.mark.parametrize("image", list(IMAGES))
def test_runtime_stage_metadata(image: str) -> None:
    runtime = parse_dockerfile(DOCKER_DIR / f"{image}.Dockerfile")[-1]
    labels = " ".join(runtime.all("LABEL"))
    for label in OCI_LABELS:
        assert f"org.opencontainers.image.{label}=" in labels
    assert f'org.opencontainers.image.title="{IMAGES[image]}"' in labels
    (healthcheck,) = runtime.all("HEALTHCHECK")
    assert "healthcheck.py" in healthcheck
    assert any("HAMI_HEALTHCHECK_URL=http://127.0.0.1:" in e for e in runtime.all("ENV"))
    (user,) = runtime.all("USER")
    if image in ROOT_USER_ALLOWED:
        assert user == "0:0"
        text = (DOCKER_DIR / f"{image}.Dockerfile").read_text()
        assert "Runs as root on purpose" in text  # and says why
    else:
        assert user == "65532:65532"
    (entrypoint,) = runtime.all("ENTRYPOINT")
    module = IMAGES[image].replace("-", "_")
    assert module in entrypoint or IMAGES[image] in entrypoint


def _ignore_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            out += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            out += ".*"
            index += 2
        elif pattern[index] == "*":
            out += "[^/]*"
            index += 1
        else:
            out += re.escape(pattern[index])
            index += 1
    return re.compile(out)


def excluded(path: str, patterns: list[str]) -> bool:
    """Docker's .dockerignore rule: the last matching pattern wins; a match on a directory
    covers what is inside it."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        regex = _ignore_regex(pattern.removeprefix("!"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            result = not negated
    return result


@pytest.mark.parametrize("image", list(IMAGES))
def test_dockerignore_sends_the_sources_and_not_the_tests(image: str) -> None:
    lines = (DOCKER_DIR / f"{image}.Dockerfile.dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    sources = []
    for stage in parse_dockerfile(DOCKER_DIR / f"{image}.Dockerfile"):
        for text in stage.all("COPY"):
            if not text.startswith("--from="):
                sources += [p for p in shlex.split(text) if not p.startswith("--")][:-1]
    sent = 0
    for source in sources:
        root = REPO / source
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for file in files:
            relative = str(file.relative_to(REPO))
            unwanted = "/tests/" in relative or "__pycache__" in relative
            assert excluded(relative, patterns) is unwanted, relative
            sent += not unwanted
    assert sent > 10
    assert excluded("README.md", patterns)
    assert excluded(".venv/bin/python", patterns)


def test_deviceplugin_image_runs_the_vgpu_monitor_script(render: RenderFn) -> None:
    """The chart and compose start the monitor as `hami-vgpu-monitor`: a console script of the
    plugin's distribution, installed into the image's venv (non-editable sync) and on its PATH."""
    runtime = parse_dockerfile(DOCKER_DIR / "deviceplugin.Dockerfile")[-1]
    assert re.search(r"\bPATH=/opt/venv/bin:", " ".join(runtime.all("ENV")))
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    entrypoints = {
        tuple(spec["entrypoint"])
        for spec in compose["services"].values()
        if spec["image"].startswith("hami-deviceplugin:") and "entrypoint" in spec
    }
    daemonset = render().one("DaemonSet")
    commands = {
        tuple(c["command"])
        for c in daemonset["spec"]["template"]["spec"]["containers"]
        if "command" in c
    }
    assert entrypoints == commands == {("hami-vgpu-monitor",)}
    project = tomllib.loads((REPO / "services/deviceplugin/pyproject.toml").read_text())["project"]
    if "hami-vgpu-monitor" not in project.get("scripts", {}):
        pytest.skip("hami-deviceplugin does not declare the hami-vgpu-monitor script yet")
    assert project["scripts"]["hami-vgpu-monitor"].startswith("hami_deviceplugin")


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        del format, args


@pytest.fixture
def health_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


@pytest.mark.parametrize(
    ("path", "alive", "expected"),
    [("/healthz", True, 0), ("/other", True, 1), ("/healthz", False, 1)],
)
def test_healthcheck_script(health_server: int, path: str, alive: bool, expected: int) -> None:
    port = health_server if alive else free_port()
    result = subprocess.run(
        [sys.executable, str(DOCKER_DIR / "healthcheck.py")],
        env={**os.environ, "HAMI_HEALTHCHECK_URL": f"http://127.0.0.1:{port}{path}"},
        timeout=30,
        check=False,
    )
    assert result.returncode == expected


def test_make_images_without_a_container_engine_skips_cleanly(tmp_path: Path) -> None:
    if (
        not (REPO / "Makefile").is_file()
        or subprocess.run(["make", "--version"], capture_output=True, check=False).returncode
    ):
        pytest.skip("make is not available")
    result = subprocess.run(
        ["make", "-s", "images", f"DOCKER={tmp_path / 'no-such-engine'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "images: skipped" in result.stdout
