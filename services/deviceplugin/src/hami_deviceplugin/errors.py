"""Pure: the device plugin's two error trees, and the messages of its refusals.

::

    Exception
    ├── BackendError                  a GPU backend or NIC source cannot start
    │   └── FakeDevicesError          the fake devices file is missing or malformed
    └── AllocateError (kind)          an Allocate is refused; ``kind`` picks the gRPC status
        └── VanishedLockOwnerError    the node lock names a pod that does not exist

A :class:`BackendError` at start stops the daemon under ``--fail-on-init-error`` (else it runs
without those devices); later, sources log and keep their previous list.  An
:class:`AllocateError` never escapes the Allocate path: the pod is marked failed, the node lock
released, and the kubelet gets the message as a gRPC error (it then rejects the pod with
``UnexpectedAdmissionError``).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AllocateError",
    "BackendError",
    "FailureKind",
    "FakeDevicesError",
    "VanishedLockOwnerError",
    "invalid",
]


class BackendError(Exception):
    """A backend cannot start (library missing, file unreadable, driver not loaded)."""


class FakeDevicesError(BackendError):
    """The fake devices file is missing or malformed; the message names the field."""


class FailureKind(StrEnum):
    """Why an allocation failed; the gRPC layer maps it to a status code."""

    NO_POD = "no_pod"  # no pod could be identified
    INVALID = "invalid"  # annotations or request do not fit together
    API = "api"  # the API server could not be read or written
    HOST = "host"  # host directories could not be prepared
    TIMEOUT = "timeout"  # the allocation deadline passed
    INTERNAL = "internal"


class AllocateError(Exception):
    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def invalid(message: str) -> AllocateError:
    """The pod's annotations and the kubelet's request do not fit together."""
    return AllocateError(FailureKind.INVALID, message)


class VanishedLockOwnerError(AllocateError):
    """The node lock names a pod that does not exist (any more)."""

    def __init__(self, namespace: str, name: str, value: str) -> None:
        super().__init__(
            FailureKind.NO_POD,
            f"node lock {value!r} names pod {namespace}/{name}, which does not exist",
        )
        self.namespace = namespace
        self.name = name
