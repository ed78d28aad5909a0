"""``hami-kubesim serve``: prints its URL first, serves, and exits cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys

import aiohttp
import pytest

from hami_kubesim.__main__ import SUBCOMMANDS, build_parser


def test_parser_lists_subcommands() -> None:
    assert "serve" in SUBCOMMANDS
    args = build_parser().parse_args(["serve", "--port", "0", "--history", "5"])
    assert (args.command, args.port, args.history) == ("serve", 0, 5)
    with pytest.raises(SystemExit):
        build_parser().parse_args([])


async def test_serve_prints_url_and_stops_on_sigterm() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_kubesim",
        "serve",
        "--port",
        "0",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(30):
            line = (await proc.stdout.readline()).decode().strip()
        assert line.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{line}/version") as resp:
                assert (await resp.json())["major"] == "1"
            watch = await session.get(f"{line}/api/v1/pods?watch=1")
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                assert await proc.wait() == 0
            assert await watch.content.read() == b""  # the open watch ended cleanly
            watch.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
