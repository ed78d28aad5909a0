"""The services' event loop: uvloop where installed, the coroutine's result passed through."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from hami_kube.runtime import loop


async def _loop_module() -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def test_run_uses_uvloop_and_returns_the_result() -> None:
    # A fresh interpreter: pytest-asyncio owns the loop policy of this one.
    code = (
        "from hami_kube.runtime import loop\n"
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
        "from hami_kube.runtime import loop\n"
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
