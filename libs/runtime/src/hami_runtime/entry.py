"""A service process's ``main(argv)``: parse its flags, configure logging, serve until stopped.

Exit status: 0 after a signal-driven shutdown; 1 when the service cannot start (address in use,
unreadable certificate, no way to reach the API server) or a background task failed and stopped
it, logged once (:func:`hami_runtime.loop.serve_until_stopped`); 2 for invalid flags, with
argparse's usage message, before anything starts.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Protocol, TypeVar

from hami_runtime.logs import LogFormat, configure_logging
from hami_runtime.loop import serve_until_stopped

__all__ = ["service_main"]


class _Logged(Protocol):
    @property
    def log_format(self) -> LogFormat: ...

    @property
    def log_level(self) -> str: ...


S = TypeVar("S", bound=_Logged)


def service_main(
    component: str,
    argv: Sequence[str] | None,
    *,
    parse: Callable[[Sequence[str], Mapping[str, str]], S],
    serve: Callable[[S], Coroutine[Any, Any, None]],
) -> int:
    """Settings from ``argv`` (default: the command line) and the process environment, then
    ``serve(settings)`` to its end; the process exit status."""
    settings = parse(sys.argv[1:] if argv is None else argv, os.environ)
    configure_logging(settings.log_format, settings.log_level)
    return serve_until_stopped(component, serve(settings))
