"""The exceptions hami_kube raises, mapped from the API server's HTTP status.

    KubeError                       everything below
    ├── TransportError              no usable HTTP answer: connect/read failure, timeout, bad stream
    └── ApiError                    the API server answered with a non-2xx status
        ├── BadRequestError             400
        ├── UnauthorizedError           401
        ├── ForbiddenError              403
        ├── NotFoundError               404
        ├── ConflictError               409, reason Conflict (stale resourceVersion, precondition)
        ├── AlreadyExistsError          409, reason AlreadyExists (create of a taken name)
        ├── ExpiredError                410, reason Expired or Gone (resourceVersion too old)
        ├── UnsupportedMediaTypeError   415
        ├── InvalidError                422
        ├── TooManyRequestsError        429
        └── ServerError                 5xx

Every error raised from a lower-level exception chains it (``raise ... from exc``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_MESSAGE_LIMIT = 300


class KubeError(Exception):
    """Base of every error raised by hami_kube."""


class TransportError(KubeError):
    """The request got no usable answer (connection refused or reset, timeout, broken stream)."""


class ApiError(KubeError):
    """The API server answered with a non-2xx status.

    ``status`` is the HTTP status, ``reason`` the Status object's ``reason`` (``"NotFound"``,
    ``"Conflict"``, ...), ``message`` its ``message``, ``details`` its ``details`` (may be empty).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str = "",
        details: Mapping[str, Any] | None = None,
        method: str = "",
        path: str = "",
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.details: Mapping[str, Any] = details or {}
        self.method = method
        self.path = path
        where = f" {method} {path}" if method or path else ""
        text = message if len(message) <= _MESSAGE_LIMIT else message[:_MESSAGE_LIMIT] + "..."
        super().__init__(f"{status} {reason or 'Error'}{where}: {text}")


class BadRequestError(ApiError):
    """400."""


class UnauthorizedError(ApiError):
    """401."""


class ForbiddenError(ApiError):
    """403."""


class NotFoundError(ApiError):
    """404: the object (or namespace) does not exist."""


class ConflictError(ApiError):
    """409 Conflict: stale resourceVersion or a failed precondition; re-read and retry."""


class AlreadyExistsError(ApiError):
    """409 AlreadyExists: create of a name that is taken."""


class ExpiredError(ApiError):
    """410: the requested resourceVersion is too old (reason Expired or Gone); re-list."""


class UnsupportedMediaTypeError(ApiError):
    """415."""


class InvalidError(ApiError):
    """422: the object or patch failed validation."""


class TooManyRequestsError(ApiError):
    """429: throttled by the server; retry later."""


class ServerError(ApiError):
    """5xx."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: ExpiredError,
    415: UnsupportedMediaTypeError,
    422: InvalidError,
    429: TooManyRequestsError,
}


def error_class(status: int, reason: str = "") -> type[ApiError]:
    """The ApiError subclass for an HTTP status and Status ``reason``."""
    if status == 409 and reason == "AlreadyExists":
        return AlreadyExistsError
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ApiError)


def parse_status(body: bytes | str | Mapping[str, Any] | None) -> dict[str, Any]:
    """The Status object in an error body, or ``{}`` when the body is not one."""
    if body is None:
        return {}
    if isinstance(body, Mapping):
        return dict(body)
    try:
        decoded = json.loads(body)
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


def api_error(
    status: int,
    body: bytes | str | Mapping[str, Any] | None,
    *,
    method: str = "",
    path: str = "",
) -> ApiError:
    """Build the matching ApiError from a status code and a (Status) response body."""
    parsed = parse_status(body)
    reason = parsed.get("reason")
    message = parsed.get("message")
    details = parsed.get("details")
    if not isinstance(message, str) or not message:
        if isinstance(body, bytes):
            message = body.decode("utf-8", "replace")
        elif isinstance(body, str):
            message = body
        else:
            message = ""
    reason_text = reason if isinstance(reason, str) else ""
    cls = error_class(status, reason_text)
    return cls(
        status,
        message,
        reason=reason_text,
        details=details if isinstance(details, Mapping) else None,
        method=method,
        path=path,
    )


def is_retryable(error: BaseException) -> bool:
    """True for failures a retry with backoff may cure: transport errors, 429 and 5xx."""
    return isinstance(error, TransportError | TooManyRequestsError | ServerError)


__all__ = [
    "AlreadyExistsError",
    "ApiError",
    "BadRequestError",
    "ConflictError",
    "ExpiredError",
    "ForbiddenError",
    "InvalidError",
    "KubeError",
    "NotFoundError",
    "ServerError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
    "UnsupportedMediaTypeError",
    "api_error",
    "error_class",
    "is_retryable",
    "parse_status",
]
