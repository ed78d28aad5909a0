"""The command line, parsed into a frozen :class:`Invocation` (pure: no I/O but argparse's own
messages on a usage error)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

Output = Literal["table", "wide", "json"]
Command = Literal["map", "pending", "fit"]

DEFAULT_NAMESPACE: Final = "kube-system"
DEFAULT_SERVICE: Final = "hami-scheduler"
DEFAULT_PORT: Final = "gpumap"
MAX_PER_PAGE: Final = 500

_EPILOG: Final = """\
The plugin reads the scheduler's GPU map API through the API server's service proxy
(/api/v1/namespaces/<ns>/services/<service>:<port>/proxy/api/v1/...), with your kubeconfig:
RBAC decides who may look (verb get on services/proxy).

exit status: 0 done (fit: it fits), 1 fit: it fits nowhere now, 2 usage or bad input,
3 refused by the API server (RBAC, credentials), 4 scheduler not reachable, 5 unexpected answer.
"""


@dataclass(frozen=True, slots=True)
class Connection:
    """How to reach the scheduler: the kubeconfig and the Service behind the proxy."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str = DEFAULT_NAMESPACE
    service: str = DEFAULT_SERVICE
    port: str = DEFAULT_PORT
    timeout_s: float = 30.0

    @property
    def service_id(self) -> str:
        """The ``name:port`` the proxy URL carries (and RBAC's ``resourceNames`` must list)."""
        return f"{self.service}:{self.port}"

    def proxy_path(self, api_path: str) -> str:
        return (
            f"/api/v1/namespaces/{self.namespace}/services/{self.service_id}/proxy/"
            f"{api_path.lstrip('/')}"
        )


@dataclass(frozen=True, slots=True)
class FitRequest:
    """``fit``: either a manifest file (``-`` for stdin) or the request's dimensions."""

    manifest: str | None = None
    gpus: int | None = None
    memory: int | None = None
    memory_percentage: int | None = None
    cores: int | None = None
    type: str | None = None
    vendor: str | None = None


@dataclass(frozen=True, slots=True)
class Invocation:
    command: Command
    output: Output = "table"
    connection: Connection = field(default_factory=Connection)
    node: str | None = None
    vendor: str | None = None
    fragmented: bool = False
    namespace: str | None = None
    page: int = 1
    per_page: int | None = None
    fit: FitRequest = field(default_factory=FitRequest)


def _whole(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}: {text!r}")
    return value


def _positive(text: str) -> int:
    return _whole(text, 1)


def _non_negative(text: str) -> int:
    return _whole(text, 0)


def _per_page(text: str) -> int:
    value = _positive(text)
    if value > MAX_PER_PAGE:
        raise argparse.ArgumentTypeError(f"at most {MAX_PER_PAGE}: {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text.removesuffix("s"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _common() -> argparse.ArgumentParser:
    """Flags every subcommand takes (kubectl passes plugins none of its own)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("connection")
    group.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"
    )
    group.add_argument("--context", help="the kubeconfig context to use")
    group.add_argument(
        "--scheduler-namespace",
        default=DEFAULT_NAMESPACE,
        help=f"namespace of the scheduler's Service (default {DEFAULT_NAMESPACE})",
    )
    group.add_argument(
        "--scheduler-service",
        default=DEFAULT_SERVICE,
        help=f"the scheduler's Service (default {DEFAULT_SERVICE})",
    )
    group.add_argument(
        "--port",
        default=DEFAULT_PORT,
        help=f"the Service port serving the GPU map, by name or number (default {DEFAULT_PORT})",
    )
    group.add_argument(
        "--request-timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="give up on an answer after this long (default 30)",
    )
    common.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "json"),
        default="table",
        help="table (default), wide (more columns) or json (the API document as served)",
    )
    return common


def _paging(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--page", type=_positive, default=1, help="page to show (default 1)")
    parser.add_argument(
        "--per-page",
        type=_per_page,
        metavar="N",
        help=f"entries per page, at most {MAX_PER_PAGE} (default: the scheduler's, 50)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="kubectl hami",
        description="See the GPUs as the HAMi scheduler sees them.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    map_cmd = commands.add_parser(
        "map",
        parents=[common],
        help="nodes, their cards and the pods holding them; free capacity",
        description="Nodes, their cards and the pods holding each card; free capacity as the "
        "largest piece on one card beside the total, per node and for the cluster.",
    )
    map_cmd.add_argument("--node", help="only nodes whose name contains this")
    map_cmd.add_argument("--vendor", help="only cards whose vendor or type contains this")
    map_cmd.add_argument(
        "--fragmented", action="store_true", help="only nodes flagged as fragmented"
    )
    _paging(map_cmd)
    pending = commands.add_parser(
        "pending",
        parents=[common],
        help="pending GPU pods, longest wait first, with the scheduler's reasons",
        description="Pending GPU pods, longest wait first: the extender's last verdict grouped "
        "by reason over all nodes, and the Kubernetes-side cause apart.",
    )
    pending.add_argument(
        "-n", "--namespace", help="only pods of this namespace (default: every namespace)"
    )
    _paging(pending)
    fit = commands.add_parser(
        "fit",
        parents=[common],
        help="would a pod or a request fit now? (exit 0 yes, 1 no)",
        description="A dry run through the scheduler's selection: where a pod (-f) or a "
        "request (--gpus, --memory, ...) fits now, or the dimension that binds.  Nothing is "
        "reserved.  Exit status 0: it fits; 1: it fits nowhere now.",
    )
    fit.add_argument("-f", "--filename", help="a Pod manifest, YAML or JSON ('-': stdin)")
    fit.add_argument("--gpus", type=_positive, help="number of GPUs (default 1)")
    fit.add_argument("--memory", type=_positive, metavar="MIB", help="memory per GPU, MiB")
    fit.add_argument(
        "--memory-percentage",
        type=_positive,
        metavar="PCT",
        help="memory per GPU as a percentage of the card",
    )
    fit.add_argument("--cores", type=_non_negative, metavar="PCT", help="cores per GPU, percent")
    fit.add_argument("--type", help="card type (e.g. A100)")
    fit.add_argument("--vendor", dest="fit_vendor", help="vendor (default NVIDIA)")
    return parser


def parse(argv: Sequence[str]) -> Invocation:
    """The invocation ``argv`` asks for; exits with status 2 and argparse's message otherwise."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    connection = Connection(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.scheduler_namespace,
        service=args.scheduler_service,
        port=args.port,
        timeout_s=args.request_timeout,
    )
    command: Command = args.command
    fit = FitRequest()
    if command == "fit":
        dimensions = (args.gpus, args.memory, args.memory_percentage, args.cores, args.type)
        if args.filename and any(d is not None for d in (*dimensions, args.fit_vendor)):
            parser.error("fit: give either -f or the request's flags, not both")
        if not args.filename and all(d is None for d in dimensions):
            parser.error(
                "fit: give -f pod.yaml or at least one of --gpus, --memory, "
                "--memory-percentage, --cores, --type"
            )
        if args.memory is not None and args.memory_percentage is not None:
            parser.error("fit: --memory and --memory-percentage exclude each other")
        fit = FitRequest(
            manifest=args.filename,
            gpus=args.gpus,
            memory=args.memory,
            memory_percentage=args.memory_percentage,
            cores=args.cores,
            type=args.type,
            vendor=args.fit_vendor,
        )
    return Invocation(
        command=command,
        output=args.output,
        connection=connection,
        node=getattr(args, "node", None),
        vendor=getattr(args, "vendor", None),
        fragmented=bool(getattr(args, "fragmented", False)),
        namespace=getattr(args, "namespace", None),
        page=getattr(args, "page", 1),
        per_page=getattr(args, "per_page", None),
        fit=fit,
    )


__all__ = [
    "DEFAULT_NAMESPACE",
    "DEFAULT_PORT",
    "DEFAULT_SERVICE",
    "Command",
    "Connection",
    "FitRequest",
    "Invocation",
    "Output",
    "build_parser",
    "parse",
]
