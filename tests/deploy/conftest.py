"""Fixtures for the deployment checks: the chart rendered by Helm, Prometheus binaries."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from .helpers import CHART, Manifest, Rendered, UniqueKeyLoader

RenderFn = Callable[..., Rendered]


@pytest.fixture(scope="session")
def helm() -> Any:
    return pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")


@pytest.fixture(scope="session")
def render(helm: Any) -> RenderFn:
    """``render(values=None, namespace="hami-system", name="demo")`` with Helm's own engine."""
    cache: dict[str, Rendered] = {}

    def _render(
        values: Mapping[str, Any] | None = None,
        *,
        namespace: str = "hami-system",
        name: str = "demo",
    ) -> Rendered:
        key = json.dumps([values, namespace, name], sort_keys=True)
        if key not in cache:
            with helm.Chart.load(str(CHART)) as chart:
                raw = chart.render(
                    values=dict(values) if values is not None else None,
                    name=name,
                    namespace=namespace,
                    is_install=True,
                )
            notes = ""
            templates: dict[str, tuple[Manifest, ...]] = {}
            for path, text in raw.items():
                if path.endswith("NOTES.txt"):
                    notes = text
                    continue
                docs = tuple(d for d in yaml.load_all(text, Loader=UniqueKeyLoader) if d)
                if docs:
                    templates[path] = docs
            cache[key] = Rendered(templates=templates, notes=notes)
        return cache[key]

    return _render


# --- Prometheus ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PrometheusTools:
    prometheus: Path
    promtool: Path


def _download_debian_prometheus(target: Path) -> PrometheusTools:
    """Debian's ``prometheus`` package, unpacked (no maintainer scripts: no service is started)."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["apt-get", "download", "prometheus"],
        cwd=target,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (deb,) = target.glob("prometheus_*.deb")
    root = target / "root"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
    return PrometheusTools(root / "usr/bin/prometheus", root / "usr/bin/promtool")


@pytest.fixture(scope="session")
def prometheus_tools(tmp_path_factory: pytest.TempPathFactory) -> PrometheusTools:
    """``prometheus`` and ``promtool`` from PATH, else from Debian's package through apt.

    The package is fetched with ``apt-get download`` and unpacked with ``dpkg-deb -x``: the
    binaries are used in place, nothing is configured or started, and no root is needed.
    """
    found = shutil.which("prometheus"), shutil.which("promtool")
    if found[0] and found[1]:
        return PrometheusTools(Path(found[0]), Path(found[1]))
    if not (shutil.which("apt-get") and shutil.which("dpkg-deb")):
        pytest.skip("prometheus/promtool are not installed and apt-get is not available")
    try:
        tools = _download_debian_prometheus(tmp_path_factory.mktemp("prometheus-deb"))
    except (subprocess.SubprocessError, OSError, ValueError) as exc:
        pytest.skip(f"could not fetch Debian's prometheus package with apt-get: {exc}")
    if not (tools.prometheus.is_file() and tools.promtool.is_file()):
        pytest.skip("Debian's prometheus package did not contain the expected binaries")
    return tools
