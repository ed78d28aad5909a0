"""No two modules of the repository's packages import each other, directly or round a loop.

import-linter (``make layers``) says which packages may import which; it does not look for cycles
between modules. This test does, for every package under ``libs/*/src``, ``services/*/src`` and
``tools/*/src``, from the source with ``ast`` (nothing is imported).

What counts as an edge ``a -> b`` (``b`` one of those modules):

* ``import b``, ``from b import name`` and the relative forms, anywhere in ``a``: at module level,
  and inside a function or a class too. A deferred import still needs ``b`` once it runs, and
  moving an import into a function to get past a cycle hides the cycle without removing it.
* ``from p import m`` where ``p.m`` is a module is ``a -> p.m`` only, as for import-linter: the
  package ``p`` runs first, but counting it would close a loop through every package whose
  ``__init__`` imports a submodule that imports a sibling.
* Imports under ``if TYPE_CHECKING:`` are edges too. They never run, so they cannot leave a
  module half-initialised, but a loop closed by annotations is still two modules that cannot be
  understood (or moved) one without the other: the type belongs where both can import it (a
  Protocol where the caller lives, or the shared piece moved down).
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()
"""Cycles that exist today and are someone's to remove, each the set of modules of one loop (all
the modules that reach each other). A cycle not covered here fails; an entry that no longer
matches a cycle fails too, so the list only shrinks."""


def source_roots(repo: Path = REPO) -> list[Path]:
    return sorted(
        [*repo.glob("libs/*/src"), *repo.glob("services/*/src"), *repo.glob("tools/*/src")]
    )


def modules_under(roots: list[Path]) -> dict[str, Path]:
    """Every module by dotted name (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    found.add(f"{source}.{alias.name}")
                elif source in known:
                    found.add(source)
    found.discard(module)
    return found


def import_graph(known: Mapping[str, Path]) -> dict[str, set[str]]:
    return {module: _imported(module, path, known) for module, path in known.items()}


def _reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def cycles(graph: Mapping[str, set[str]]) -> list[frozenset[str]]:
    """Each group of modules that reach one another (a loop, or loops sharing modules)."""
    reach = {module: _reachable(graph, module) for module in graph}
    groups = {
        frozenset({module} | {other for other in reach[module] if module in reach[other]})
        for module in graph
        if module in reach[module]
    }
    return sorted(groups, key=sorted)


def one_loop(graph: Mapping[str, set[str]], group: frozenset[str]) -> list[str]:
    """A shortest loop through the group's first module, as ``[a, b, ..., a]``."""
    start = min(group)
    came_from: dict[str, str] = {}
    todo = deque([start])
    while todo:
        current = todo.popleft()
        for target in sorted(graph[current] & group):
            if target == start:
                loop = [current]
                while loop[-1] != start:
                    loop.append(came_from[loop[-1]])
                return [*reversed(loop), start]
            if target not in came_from:
                came_from[target] = current
                todo.append(target)
    raise AssertionError(f"{sorted(group)} is not a cycle")


def test_no_module_imports_itself_back() -> None:
    roots = source_roots()
    assert len(roots) >= 8  # every library and service: the glob found the packages
    graph = import_graph(modules_under(roots))
    found = cycles(graph)
    new = [
        " -> ".join(one_loop(graph, group))
        for group in found
        if not any(group <= known for known in KNOWN_CYCLES)
    ]
    gone = [sorted(known) for known in KNOWN_CYCLES if not any(g <= known for g in found)]
    assert not new, "import cycles (move the shared piece down, or invert the dependency):\n" + (
        "\n".join(new)
    )
    assert not gone, f"these KNOWN_CYCLES are gone, remove their entries: {gone}"


def _package(tmp_path: Path, files: Mapping[str, str]) -> dict[str, set[str]]:
    for name, text in files.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return import_graph(modules_under([tmp_path / "src"]))


def test_a_deferred_import_and_an_annotation_only_one_both_close_a_loop(
    tmp_path: Path,
) -> None:
    graph = _package(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.a import A\n",
            "pkg/a.py": "from . import b\nA = 1\n",
            "pkg/b.py": "def late():\n    from pkg.a import A\n    return A\n",
            "pkg/c.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from pkg.d import D\nelse:\n    import pkg.e\n"
            ),
            "pkg/d.py": "from .c import *\nD = 1\n",
            "pkg/e.py": "",
        },
    )
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.d", "pkg.e"}
    found = sorted(cycles(graph), key=sorted)
    assert found == [frozenset({"pkg.a", "pkg.b"}), frozenset({"pkg.c", "pkg.d"})]
    assert one_loop(graph, found[0]) == ["pkg.a", "pkg.b", "pkg.a"]
