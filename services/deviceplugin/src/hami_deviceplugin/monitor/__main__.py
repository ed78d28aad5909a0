"""``python -m hami_deviceplugin.monitor`` / ``hami-vgpu-monitor``: flags, logging, serve.

Exit status: 0 after a signal-driven shutdown, 1 when the monitor cannot start (no API server,
metrics address unusable) or a background loop failed, 2 for invalid flags.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hami_deviceplugin.monitor.app import run
from hami_deviceplugin.monitor.settings import parse_settings
from hami_runtime.entry import service_main


def main(argv: Sequence[str] | None = None) -> int:
    return service_main("vgpu-monitor", argv, parse=parse_settings, serve=run)


if __name__ == "__main__":
    sys.exit(main())
