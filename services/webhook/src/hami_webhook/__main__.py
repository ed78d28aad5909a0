"""``python -m hami_webhook`` / ``hami-webhook``: parse flags, configure logging, serve.

Exit status: 0 after a signal-driven shutdown, 1 when the service cannot start (address in use,
unreadable certificate, no way to reach the API server), 2 for invalid flags.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from hami_runtime.logs import configure_logging
from hami_runtime.loop import serve_until_stopped
from hami_webhook.app import run
from hami_webhook.settings import parse_settings


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    configure_logging(settings.log_format, settings.log_level)
    return serve_until_stopped("webhook", run(settings))


if __name__ == "__main__":
    sys.exit(main())
