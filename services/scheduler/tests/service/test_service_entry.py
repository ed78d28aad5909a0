"""The entry point in-process: ``main(argv)`` refuses invalid flags with status 2, and a
scheduler that cannot start raises the error ``serve_until_stopped`` turns into status 1 (and its
``scheduler_failed_to_start`` line, tested with ``hami_runtime.loop``) after closing what it had
opened.  What needs a real process (signals, the exit itself) is in ``test_service_process``."""

from __future__ import annotations

import asyncio
import math
import socket
from pathlib import Path

import pytest

from hami_kubesim.testing import running_apiserver
from hami_scheduler.__main__ import main
from hami_scheduler.app import EXIT_SHARES, run

from ..service_helpers import settings_for


def test_invalid_flags_exit_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--filter-mode=maybe"])
    assert exited.value.code == 2
    assert "--filter-mode" in capsys.readouterr().err


def test_a_bad_grace_period_is_an_invalid_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--shutdown-grace-period=soon"])
    assert exited.value.code == 2
    assert "--shutdown-grace-period" in capsys.readouterr().err


async def test_an_unreadable_certificate_fails_the_start(tmp_path: Path) -> None:
    settings = settings_for(
        "http://127.0.0.1:9",
        cert_file=str(tmp_path / "missing.crt"),
        key_file=str(tmp_path / "missing.key"),
    )
    with pytest.raises(FileNotFoundError):
        await run(settings, stop=asyncio.Event())


async def test_an_address_in_use_fails_the_start_and_closes_what_was_opened() -> None:
    before = asyncio.all_tasks()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        async with running_apiserver() as sim:
            settings = settings_for(sim.url, http_bind=f"127.0.0.1:{port}")
            with pytest.raises(OSError, match="address already in use"):
                await run(settings, stop=asyncio.Event(), freeze_gc=False)
            # The watches, the leadership and the Event writer it had started are gone.
            assert not [t for t in asyncio.all_tasks() - before if t.get_name().startswith("sched")]


def test_the_exit_shares_add_up_to_the_grace_period() -> None:
    assert math.isclose(sum(EXIT_SHARES.values()), 1.0)
    assert all(share > 0 for share in EXIT_SHARES.values())
