"""``python -m hami_webhook`` / ``hami-webhook``: parse flags, configure logging, serve.

Exit status: 0 after a signal-driven shutdown, 1 when the service cannot start (address in use,
unreadable certificate, no way to reach the API server), 2 for invalid flags.
"""

from __future__ import annotations

import os
import ssl
import sys
from collections.abc import Sequence

import structlog

from hami_kube.errors import KubeError
from hami_kube.runtime import loop
from hami_kube.runtime.logs import configure_logging
from hami_webhook.app import run
from hami_webhook.settings import parse_settings

log = structlog.get_logger("hami_webhook")


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    configure_logging(settings.log_format, settings.log_level)
    try:
        loop.run(run(settings))
    except (KubeError, OSError, ssl.SSLError) as exc:
        log.error("webhook_failed_to_start", error=str(exc), error_type=type(exc).__name__)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
