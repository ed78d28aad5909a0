"""The seams between the API server and the stand-ins it calls.

The API server calls a ``MutatingAdmission`` on every pod CREATE before storing the object, exactly
where the real API server runs its mutating admission chain.  The admission stand-in implements it.
A ``KubeletControl`` is what the ``/_sim/kubelets`` endpoints do to one node's kubelet stand-in; the
server keeps them by node (``ApiServer.kubelets``), so the server, not its HTTP face, names them.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol


class AdmissionDenied(Exception):  # noqa: N818 - mirrors the API server's wording
    """Admission refused the request; the API server answers ``code`` with ``message``."""

    def __init__(self, code: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason


class MutatingAdmission(Protocol):
    """``(operation, resource, obj, namespace, *, dry_run) -> obj``: returns the (possibly
    mutated) object or raises :class:`AdmissionDenied`.  ``operation`` is ``"CREATE"``,
    ``resource`` e.g. ``"pods"``; ``dry_run`` for ``?dryRun=All`` (webhooks see
    ``request.dryRun: true``, and one without ``sideEffects: None/NoneOnDryRun`` refuses it)."""

    def __call__(
        self,
        operation: str,
        resource: str,
        obj: dict[str, Any],
        namespace: str | None,
        /,
        *,
        dry_run: bool = False,
    ) -> Awaitable[dict[str, Any]]: ...


class KubeletControl(Protocol):
    """What ``/_sim/kubelets`` does to one node's kubelet stand-in."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def set_admission_delay(self, seconds: float) -> None: ...

    async def restart(self) -> None: ...

    def describe(self) -> dict[str, Any]: ...
