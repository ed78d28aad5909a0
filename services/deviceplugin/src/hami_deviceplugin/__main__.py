"""``python -m hami_deviceplugin`` / ``hami-deviceplugin``: flags, logging, serve.

Exit status: 0 after a signal-driven shutdown, 1 when the service cannot start (no API server,
kubelet directory or metrics address unusable), 2 for invalid flags.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hami_deviceplugin.app import run
from hami_deviceplugin.settings import parse_settings
from hami_runtime.entry import service_main


def main(argv: Sequence[str] | None = None) -> int:
    return service_main("deviceplugin", argv, parse=parse_settings, serve=run)


if __name__ == "__main__":
    sys.exit(main())
