"""Signal handling: the first SIGTERM/SIGINT starts the service's bounded shutdown; a second one
ends the process at once (an operator who asks twice does not want to wait)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import structlog

__all__ = ["install_stop_signals"]

_log = structlog.get_logger("hami_runtime.signals")

EXIT_ON_SECOND_SIGNAL = 130


def install_stop_signals(stop: asyncio.Event, *, component: str = "") -> None:
    """Make SIGTERM and SIGINT set ``stop`` instead of killing the process mid-request."""
    loop = asyncio.get_running_loop()

    def received(sig: signal.Signals) -> None:
        if not stop.is_set():
            _log.info("stop_signal_received", component=component, signal=sig.name)
            stop.set()
            return
        _log.warning("second_stop_signal_exiting_now", component=component, signal=sig.name)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_ON_SECOND_SIGNAL)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, received, sig)
