"""Kubernetes I/O is a client: no module of hami_kube imports aiohttp's server side.

import-linter (``make layers``) forbids whole packages only, and the client needs aiohttp, so this
one rule is checked here, on the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import hami_kube

SERVER_MODULES = ("aiohttp.web", "aiohttp.web_")


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_hami_kube_never_imports_aiohttp_web() -> None:
    package = Path(hami_kube.__file__).parent
    modules = sorted(package.rglob("*.py"))
    assert len(modules) > 5
    offenders = {
        f"{path.relative_to(package)}: {name}"
        for path in modules
        for name in _imports(path)
        if name.startswith(SERVER_MODULES)
    }
    assert offenders == set()


def test_the_check_sees_a_server_import(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("from aiohttp import web\nimport aiohttp.web_runner\n", encoding="utf-8")
    assert [n for n in _imports(planted) if n.startswith(SERVER_MODULES)] == [
        "aiohttp.web",
        "aiohttp.web_runner",
    ]
