"""Fixtures: a short plugin dir (unix socket paths are limited), a host root, an emulated node,
the vGPU monitor's hook path and a fake devices file."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hami_kubesim.cluster.config import NodeSpec
from hami_kubesim.testing import RunningApiServer

from .helpers import NODE, UUIDS, gpu, write_devices


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
def hook(tmp_path: Path) -> Path:
    """The vGPU monitor's ``HOOK_PATH`` (regions are under its ``containers/``)."""
    path = tmp_path / "usr-local-vgpu"
    path.mkdir()
    return path


@pytest.fixture
def devices(tmp_path: Path) -> Path:
    """A fake devices file of two GPUs, the first with host usage figures."""
    path = tmp_path / "gpus.yaml"
    write_devices(
        path,
        [
            gpu(UUIDS[0], 0, memory_used_mib=1024, utilization=35, memory_utilization=10),
            gpu(UUIDS[1], 1),
        ],
    )
    return path


@pytest.fixture
async def sim(sim: RunningApiServer) -> RunningApiServer:
    """The plugin's kubesim (hami_kubesim's pytest plugin) with this suite's node in it."""
    node = NodeSpec(name=NODE, address="10.9.0.1", pod_cidr="10.244.9.0/24")
    await sim.server.create("nodes", node.to_object())
    return sim
