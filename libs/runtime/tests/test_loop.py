"""The services' event loop: uvloop where installed, the coroutine's result passed through."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import structlog
import structlog.testing

from hami_runtime import loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_and_returns_the_result() -> None:
    # A fresh interpreter: pytest-asyncio owns the loop policy of this one.
    code = (
        "from hami_runtime import loop\n"
        "import asyncio\n"
        "async def main():\n"
        "    return type(asyncio.get_running_loop()).__module__\n"
        "print(loop.run(main()))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip().startswith("uvloop")


def test_run_propagates_the_coroutine_exception() -> None:
    code = (
        "from hami_runtime import loop\n"
        "async def fail():\n"
        "    raise LookupError('boom')\n"
        "loop.run(fail())\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert "LookupError: boom" in result.stderr


def test_run_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` raise ImportError
    assert loop.run(_loop_module()) == "asyncio.unix_events"


def test_serve_until_stopped_is_0_after_a_clean_stop() -> None:
    async def main() -> None:
        await asyncio.sleep(0)

    assert loop.serve_until_stopped("svc", main()) == 0


def test_a_service_that_cannot_start_exits_1_with_one_log_line() -> None:
    async def main() -> None:
        raise OSError("[Errno 98] address already in use")

    with structlog.testing.capture_logs() as logs:
        assert loop.serve_until_stopped("svc", main()) == 1
    assert logs == [
        {
            "event": "svc_failed_to_start",
            "log_level": "error",
            "error": "[Errno 98] address already in use",
            "error_type": "OSError",
        }
    ]


def test_a_bug_is_not_swallowed_as_a_start_failure() -> None:
    async def main() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        loop.serve_until_stopped("svc", main())
