"""``python -m hami_deviceplugin`` / ``hami-deviceplugin``: flags, logging, serve."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from hami_deviceplugin.app import run
from hami_deviceplugin.settings import parse_settings
from hami_kube.runtime import loop
from hami_kube.runtime.logs import configure_logging


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse_settings(sys.argv[1:] if argv is None else argv, os.environ)
    configure_logging(settings.log_format, settings.log_level)
    loop.run(run(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
