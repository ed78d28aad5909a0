"""Blocking file writes that never leave half a file behind (run them in a worker thread).

A reader (the container runtime scanning the CDI directory, the plugin reading its checkpoint
after a crash) sees the old content or the new, never a truncated one: the content goes to a
hidden temporary file in the same directory, is flushed to disk, and is renamed over the target;
the directory is synced so the rename survives a power loss.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["read_json", "remove_file", "write_json_atomically"]


def write_json_atomically(path: Path, document: Any, *, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document, indent=2, sort_keys=False).encode() + b"\n"
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(staging, mode)
        os.replace(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
    _sync_dir(path.parent)


def _sync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_json(path: Path) -> Any | None:
    """The decoded file, or None when there is none (``ValueError`` when it does not decode)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return json.loads(data)


def remove_file(path: Path) -> bool:
    """Remove ``path``; False when it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    _sync_dir(path.parent)
    return True
