"""Status -> exception mapping."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube import errors


def _status(code: int, reason: str, message: str = "m") -> bytes:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    body |= {"reason": reason, "message": message, "details": {"name": "p", "kind": "pods"}}
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (400, "BadRequest", errors.BadRequestError),
        (401, "Unauthorized", errors.UnauthorizedError),
        (403, "Forbidden", errors.ForbiddenError),
        (404, "NotFound", errors.NotFoundError),
        (409, "Conflict", errors.ConflictError),
        (409, "AlreadyExists", errors.AlreadyExistsError),
        (410, "Expired", errors.ExpiredError),
        (410, "Gone", errors.ExpiredError),
        (415, "UnsupportedMediaType", errors.UnsupportedMediaTypeError),
        (422, "Invalid", errors.InvalidError),
        (429, "TooManyRequests", errors.TooManyRequestsError),
        (500, "InternalError", errors.ServerError),
        (503, "ServiceUnavailable", errors.ServerError),
        (504, "Timeout", errors.ServerError),
        (418, "", errors.ApiError),
    ],
)
def test_status_maps_to_class(status: int, reason: str, expected: type[errors.ApiError]) -> None:
    error = errors.api_error(status, _status(status, reason, "boom"), method="GET", path="/x")
    assert type(error) is expected
    assert error.status == status
    assert error.reason == reason
    assert error.message == "boom"
    assert "GET /x" in str(error)


def test_conflict_details_are_kept() -> None:
    error = errors.api_error(409, _status(409, "Conflict"))
    assert error.details == {"name": "p", "kind": "pods"}


def test_non_status_body_becomes_the_message() -> None:
    error = errors.api_error(502, b"<html>bad gateway</html>")
    assert isinstance(error, errors.ServerError)
    assert error.message == "<html>bad gateway</html>"
    assert error.reason == ""


def test_long_messages_are_truncated_in_str() -> None:
    error = errors.api_error(500, "x" * 5000)
    assert len(str(error)) < 400
    assert len(error.message) == 5000


def test_retryable_classification() -> None:
    assert errors.is_retryable(errors.TransportError("reset"))
    assert errors.is_retryable(errors.api_error(503, None))
    assert errors.is_retryable(errors.api_error(429, None))
    assert not errors.is_retryable(errors.api_error(409, _status(409, "Conflict")))
    assert not errors.is_retryable(errors.api_error(404, None))
    assert not errors.is_retryable(ValueError("x"))


def test_hierarchy() -> None:
    for cls in (errors.NotFoundError, errors.ConflictError, errors.ServerError):
        assert issubclass(cls, errors.ApiError)
        assert issubclass(cls, errors.KubeError)
    assert issubclass(errors.TransportError, errors.KubeError)
    assert not issubclass(errors.AlreadyExistsError, errors.ConflictError)


@given(st.integers(min_value=100, max_value=599), st.binary(max_size=200))
def test_any_body_gives_an_api_error(status: int, body: bytes) -> None:
    error = errors.api_error(status, body)
    assert isinstance(error, errors.ApiError)
    assert error.status == status
