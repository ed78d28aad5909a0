"""The one I/O module: a GET of the GPU map API through the API server's service proxy, with the
user's kubeconfig (``hami_kube``'s client: kubeconfig, context, client certificates, tokens and
exec plugins as kubernetes-asyncio loads them), and the failures turned into messages that say
what to do (:func:`explain`, pure)."""

from __future__ import annotations

import json
from typing import Any

from hami_kube.config import KubeSettings
from hami_kube.errors import (
    ApiError,
    BadRequestError,
    ForbiddenError,
    KubeError,
    NotFoundError,
    TransportError,
    UnauthorizedError,
)
from hami_kube.rest import open_client
from hami_kubectl.options import Connection
from hami_kubectl.outcome import CommandError, Exit
from hami_kubectl.probe import ApiCall

USER_AGENT = "kubectl-hami"


def _backend_error(error: ApiError) -> str | None:
    """The ``{"error": ...}`` message of a GPU map API refusal, when the body is one."""
    try:
        body = json.loads(error.message)
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    return None


def explain(error: KubeError, connection: Connection) -> CommandError:
    """The message and exit status for a failed GET (pure)."""
    where = f"service {connection.namespace}/{connection.service} port {connection.port}"
    if isinstance(error, ForbiddenError):
        return CommandError(
            Exit.FORBIDDEN,
            f"the API server refused: {error.message}\n"
            "kubectl hami reads the scheduler through the API server's service proxy: it needs "
            f'"get" on "services/proxy" for {connection.service_id!r} in namespace '
            f"{connection.namespace!r}. An administrator can grant it with:\n"
            f"  kubectl create role hami-gpumap-reader -n {connection.namespace} --verb=get "
            f"--resource=services/proxy --resource-name={connection.service_id}\n"
            f"  kubectl create rolebinding hami-gpumap-reader -n {connection.namespace} "
            "--role=hami-gpumap-reader --user=<you>",
        )
    if isinstance(error, UnauthorizedError):
        return CommandError(
            Exit.FORBIDDEN,
            f"the API server did not accept your credentials: {error.message} "
            "(check the kubeconfig's user, or log in again)",
        )
    if isinstance(error, ApiError):
        backend = _backend_error(error)
        if backend is not None:
            status = Exit.USAGE if isinstance(error, BadRequestError) else Exit.BAD_ANSWER
            return CommandError(status, f"the scheduler refused the request: {backend}")
        if isinstance(error, NotFoundError) and error.reason == "NotFound":
            return CommandError(
                Exit.UNAVAILABLE,
                f"{error.message}: no scheduler Service there (see --scheduler-namespace, "
                "--scheduler-service)",
            )
        if error.status == 503:
            return CommandError(
                Exit.UNAVAILABLE,
                f"the scheduler's GPU map is not reachable at {where}: {error.message}\n"
                "Is the scheduler running, with its GPU map enabled (chart value "
                "scheduler.gpumap.enabled), and are --scheduler-namespace, --scheduler-service "
                "and --port right?",
            )
        if error.status == 404:
            return CommandError(
                Exit.BAD_ANSWER,
                f"{where} does not serve the GPU map API ({error.message.strip()[:200]}); "
                "is --port the GPU map's port, and the scheduler a release with it?",
            )
        return CommandError(Exit.BAD_ANSWER, f"unexpected answer: {error}")
    if isinstance(error, TransportError):
        return CommandError(Exit.UNAVAILABLE, f"cannot reach the API server: {error}")
    return CommandError(Exit.USAGE, str(error))


async def get_document(connection: Connection, call: ApiCall) -> dict[str, Any]:
    """GET ``call`` through the service proxy; raises :class:`CommandError` on failure."""
    settings = KubeSettings(
        kubeconfig=connection.kubeconfig,
        context=connection.context,
        request_timeout_s=connection.timeout_s,
        max_connections=2,
        user_agent=USER_AGENT,
    )
    try:
        async with open_client(settings) as client:
            return await client.request("GET", connection.proxy_path(call.path), query=call.query)
    except KubeError as exc:
        raise explain(exc, connection) from exc


__all__ = ["USER_AGENT", "explain", "get_document"]
