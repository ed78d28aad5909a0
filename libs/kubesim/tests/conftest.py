"""Fixtures shared by kubesim's tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def plugin_dir() -> Iterator[Path]:
    """A node's device-plugin dir in a fresh temporary directory (the pod-resources dir the
    kubelet stand-in creates beside it is removed with it). Short: unix socket paths are limited
    to 107 bytes."""
    root = Path(tempfile.mkdtemp(prefix="ksim-"))
    path = root / "dp"
    path.mkdir()
    yield path
    shutil.rmtree(root, ignore_errors=True)
