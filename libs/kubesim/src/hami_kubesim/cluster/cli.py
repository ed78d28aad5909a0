"""``hami-kubesim cluster --config FILE``: a simulated cluster until SIGINT or SIGTERM.

Once everything is up it prints, one per line on stdout::

    api-server http://127.0.0.1:PORT
    node NAME plugin-dir DIR
    ready

(``--info-file`` also writes the same facts as JSON, see :meth:`Cluster.info`). Logs go to
stderr. A bad cluster file exits with status 2 and the offending key on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

import structlog

from hami_kubesim.cluster.config import ClusterConfigError, load_cluster_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, type=Path, help="cluster YAML file")
    parser.add_argument("--host", default=None, help="API server address (overrides the file)")
    parser.add_argument(
        "--port", type=int, default=None, help="API server port, 0 for any (overrides the file)"
    )
    parser.add_argument("--info-file", type=Path, default=None, help="write URL and dirs as JSON")
    parser.add_argument("--log-level", default="INFO", help="log level (stderr)")


async def serve_cluster(args: argparse.Namespace) -> None:
    """Run the cluster in ``args.config`` until a stop signal arrives."""
    # Imported here: the stand-ins load the Kubernetes client library (about a second), which
    # every other subcommand, and a bad cluster file, can do without.
    from hami_kubesim.cluster.simulated import running_cluster

    config = load_cluster_config(args.config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with running_cluster(config, host=args.host, port=args.port) as cluster:
            lines = [f"api-server {cluster.url}"]
            lines += [
                f"node {name} plugin-dir {path}" for name, path in cluster.plugin_dirs.items()
            ]
            if args.info_file is not None:
                args.info_file.write_text(json.dumps(cluster.info(), indent=2) + "\n")
            sys.stdout.write("\n".join([*lines, "ready"]) + "\n")
            sys.stdout.flush()
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _configure_logging(level_name: str) -> None:
    level = logging.getLevelNamesMapping().get(level_name.upper(), logging.INFO)
    logging.basicConfig(level=level, stream=sys.stderr)
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )


def run(args: argparse.Namespace) -> int:
    _configure_logging(args.log_level)
    try:
        asyncio.run(serve_cluster(args))
    except ClusterConfigError as error:
        sys.stderr.write(f"hami-kubesim cluster: {error}\n")
        return 2
    return 0
