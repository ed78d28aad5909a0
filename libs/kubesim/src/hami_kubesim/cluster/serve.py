"""``hami-kubesim serve``: the API server on its own, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from hami_kubesim.apiserver.http.app import create_app
from hami_kubesim.apiserver.server import ApiServer
from hami_kubesim.testing import format_url, start_app


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=0, help="port (0 picks a free one)")
    parser.add_argument("--history", type=int, default=10_000, help="watch history per resource")
    parser.add_argument(
        "--bookmark-interval", type=float, default=60.0, help="seconds between watch bookmarks"
    )
    parser.add_argument(
        "--watch-queue-limit", type=int, default=10_000, help="backlog that ends a slow watch"
    )
    parser.add_argument("--log-level", default="WARNING", help="Python logging level")


async def serve(args: argparse.Namespace) -> None:
    server = ApiServer(
        history=args.history,
        bookmark_interval=args.bookmark_interval,
        watch_queue_limit=args.watch_queue_limit,
    )
    runner, port = await start_app(create_app(server), args.host, args.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    sys.stdout.write(format_url(args.host, port) + "\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        server.shutdown()
        await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr)
    asyncio.run(serve(args))
    return 0
