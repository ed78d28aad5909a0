"""``python -m hami_deviceplugin`` / ``hami-deviceplugin``: flags, logging, serve.

Exit status: 0 after a signal-driven shutdown, 1 when the service cannot start (no API server,
kubelet directory or metrics address unusable), 2 for invalid flags.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from hami_deviceplugin.app import run
from hami_deviceplugin.dra.app import run_dra
from hami_deviceplugin.settings import Settings, parse_settings
from hami_runtime.entry import service_main


async def serve(settings: Settings) -> None:
    """The device plugin, or with ``--mode dra`` the DRA kubelet plugin (never both)."""
    if settings.mode == "dra":
        await run_dra(settings)
    else:
        await run(settings)


def main(argv: Sequence[str] | None = None) -> int:
    return service_main("deviceplugin", argv, parse=parse_settings, serve=serve)


if __name__ == "__main__":
    sys.exit(main())
