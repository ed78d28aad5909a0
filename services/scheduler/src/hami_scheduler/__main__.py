"""``python -m hami_scheduler`` / ``hami-scheduler``: parse flags, configure logging, serve.

Exit status: 0 after a signal-driven shutdown, 1 when the service cannot start (address in use,
unreadable certificate, no way to reach the API server), 2 for invalid flags.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hami_runtime.entry import service_main
from hami_scheduler.app import run
from hami_scheduler.settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    return service_main("scheduler", argv, parse=parse_settings, serve=run)


if __name__ == "__main__":
    sys.exit(main())
