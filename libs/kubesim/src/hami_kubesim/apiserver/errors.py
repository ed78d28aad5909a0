"""API errors, each rendered as the Kubernetes ``Status`` body the real API server would send."""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    """The ``reason`` the API server pairs with an HTTP status code."""
    return _REASONS.get(code, "Unknown" if code < 500 else "InternalError")


class StatusError(Exception):
    """A failed request: ``code`` is the HTTP status, :meth:`status` the body."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else reason_for(code)
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        """The ``Status`` object (``kind: Status``) describing this failure."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str, group: str, kind: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def qualified(resource: str, group: str) -> str:
    """``pods`` for core, ``leases.coordination.k8s.io`` for grouped resources."""
    return f"{resource}.{group}" if group else resource


def precondition_failed(what: str, wanted: object, actual: object) -> str:
    """The reason text of a failed UID / ResourceVersion precondition."""
    return f"Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"


class NotFoundError(StatusError):
    def __init__(self, resource: str, group: str, name: str) -> None:
        super().__init__(
            404,
            f'{qualified(resource, group)} "{name}" not found',
            details=_details(name, group, resource),
        )


class AlreadyExistsError(StatusError):
    def __init__(self, resource: str, group: str, name: str) -> None:
        super().__init__(
            409,
            f'{qualified(resource, group)} "{name}" already exists',
            reason="AlreadyExists",
            details=_details(name, group, resource),
        )


class ConflictError(StatusError):
    STALE = (
        "the object has been modified; please apply your changes to the latest version "
        "and try again"
    )

    def __init__(self, resource: str, group: str, name: str, why: str = STALE) -> None:
        super().__init__(
            409,
            f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
            details=_details(name, group, resource),
        )


class ForbiddenError(StatusError):
    """403 as ``apierrors.NewForbidden``: ``pods "x" is forbidden: <why>``; the name is left out
    when there is none (a refused create of a ``generateName`` object names the prefix)."""

    def __init__(self, resource: str, group: str, name: str, why: str) -> None:
        what = qualified(resource, group)
        message = f'{what} "{name}" is forbidden: {why}' if name else f"{what} is forbidden: {why}"
        super().__init__(403, message, details=_details(name, group, resource))


class InvalidError(StatusError):
    """422 with field causes; ``kind`` is the object kind (``Pod``), as the API server reports."""

    def __init__(
        self, kind: str, group: str, name: str, causes: list[tuple[str, str, str]]
    ) -> None:
        """``causes``: ``(field, reason, message)``, e.g. ``("spec.x", "FieldValueRequired",
        "Required value")``."""
        rendered = [f"{field}: {message}" for field, _, message in causes]
        summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
        qualified_kind = f"{kind}.{group}" if group else kind
        details = _details(name, group, kind)
        details["causes"] = [
            {"reason": reason, "message": message, "field": field}
            for field, reason, message in causes
        ]
        super().__init__(422, f'{qualified_kind} "{name}" is invalid: {summary}', details=details)


class BadRequestError(StatusError):
    def __init__(self, message: str) -> None:
        super().__init__(400, message)


class MethodNotAllowedError(StatusError):
    def __init__(
        self, message: str = "the server does not allow this method on the requested resource"
    ) -> None:
        super().__init__(405, message, details={})


class ExpiredError(StatusError):
    def __init__(self, message: str) -> None:
        super().__init__(410, message)


class UnsupportedMediaTypeError(StatusError):
    def __init__(self, content_type: str) -> None:
        super().__init__(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            "application/json-patch+json, application/merge-patch+json, "
            f"application/strategic-merge-patch+json; got {content_type}",
        )
