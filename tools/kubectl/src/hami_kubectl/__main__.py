"""``kubectl-hami``: the console script kubectl finds as the ``hami`` plugin."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from hami_kubectl.fetch import get_document
from hami_kubectl.options import Invocation, parse
from hami_kubectl.outcome import CommandError, Exit
from hami_kubectl.probe import api_call, check_document
from hami_kubectl.views import render


def _manifest(invocation: Invocation) -> bytes | None:
    name = invocation.fit.manifest
    if invocation.command != "fit" or name is None:
        return None
    try:
        return sys.stdin.buffer.read() if name == "-" else Path(name).read_bytes()
    except OSError as exc:
        raise CommandError(Exit.USAGE, f"cannot read the manifest {name}: {exc}") from exc


async def run(invocation: Invocation) -> int:
    """Fetch, check and print; the exit status."""
    call = api_call(invocation, _manifest(invocation))
    document = await get_document(invocation.connection, call)
    check_document(invocation.command, document)
    if invocation.output == "json":
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(render(invocation, document, datetime.now(UTC)))
    if invocation.command == "fit" and not document.get("fits"):
        return Exit.NO_FIT
    return Exit.OK


def main(argv: Sequence[str] | None = None) -> int:
    invocation = parse(sys.argv[1:] if argv is None else argv)
    try:
        return asyncio.run(run(invocation))
    except CommandError as err:
        sys.stderr.write(f"error: {err.message}\n")
        return err.status
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
