"""Fixtures: a short plugin dir (unix socket paths are limited), a host root, an emulated node."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.testing import RunningApiServer

from .helpers import NODE


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dp-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def host_root(tmp_path: Path) -> Path:
    root = tmp_path / "host"
    root.mkdir()
    return root


@pytest.fixture
async def sim(sim: RunningApiServer) -> RunningApiServer:
    """The plugin's kubesim (hami_kubesim's pytest plugin) with this suite's node in it."""
    node = NodeSpec(name=NODE, address="10.9.0.1", pod_cidr="10.244.9.0/24")
    await sim.server.create("nodes", node.to_object())
    return sim
