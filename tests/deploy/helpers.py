"""Shared helpers of the deployment checks: rendered chart, processes, polling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "charts" / "hami"

Manifest = dict[str, Any]


class UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that refuses duplicate mapping keys (the API server rejects or warns)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(key, deep=deep) for key, _ in node.value]
        duplicates = {k for k in keys if keys.count(k) > 1}
        if duplicates:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate keys {sorted(map(str, duplicates))}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


@dataclass(frozen=True, slots=True)
class Rendered:
    """One rendering of the umbrella chart: manifests by template path, and NOTES.txt."""

    templates: Mapping[str, tuple[Manifest, ...]]
    notes: str

    @property
    def manifests(self) -> list[Manifest]:
        return [doc for docs in self.templates.values() for doc in docs]

    def find(self, kind: str, name: str | None = None) -> list[Manifest]:
        return [
            m
            for m in self.manifests
            if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
        ]

    def one(self, kind: str, name: str | None = None) -> Manifest:
        found = self.find(kind, name)
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]


# --- processes -----------------------------------------------------------------------------------


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def wait_until(
    condition: Callable[[], bool], *, timeout: float, what: str, proc: Process | None = None
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` (and the process log) if not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            pytest.fail(
                f"{proc.name} exited with {proc.popen.returncode} before {what}:\n{proc.log()}"
            )
        try:
            if condition():
                return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        time.sleep(0.1)
    detail = f"\n{proc.name} log:\n{proc.log()}" if proc is not None else ""
    pytest.fail(f"timed out after {timeout}s waiting for {what}{detail}")


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]


@contextmanager
def running(
    name: str, argv: Sequence[str], *, log_dir: Path, env: Mapping[str, str] | None = None
) -> Iterator[Process]:
    """Run ``argv`` with output to a log file; SIGTERM (then SIGKILL) on exit."""
    log_path = log_dir / f"{name}.log"
    with log_path.open("wb") as log:
        popen = subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **(env or {})},
        )
    proc = Process(name=name, popen=popen, log_path=log_path)
    try:
        yield proc
    finally:
        if popen.poll() is None:
            popen.send_signal(signal.SIGTERM)
            try:
                popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait(timeout=10)


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
