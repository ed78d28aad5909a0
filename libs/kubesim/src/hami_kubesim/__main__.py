"""``hami-kubesim`` command line.

Subcommands are listed in :data:`SUBCOMMANDS` as ``name -> (help, module)``; each module provides
``add_arguments(parser)`` and ``run(args) -> int``, and is imported only when the parser is built,
so adding a subcommand is one line here plus its module.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": (
        "serve the emulated Kubernetes API server over plain HTTP",
        "hami_kubesim.cluster.serve",
    ),
    "cluster": ("run a simulated cluster described by a YAML file", "hami_kubesim.cluster.cli"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hami-kubesim", description="In-memory Kubernetes API server and control plane."
    )
    subs = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, module_name) in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subs.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args._run(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
