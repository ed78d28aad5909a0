"""Pure: the device plugin's two error trees, and the messages of its refusals.

::

    Exception
    ├── BackendError                  a GPU backend or NIC source cannot start
    │   └── FakeDevicesError          the fake devices file is missing or malformed
    ├── MigError                      a MIG layout change failed (NVML refused, mode pending)
    └── AllocateError (kind)          an Allocate is refused; ``kind`` picks the gRPC status

A :class:`BackendError` at start stops the daemon under ``--fail-on-init-error`` (else it runs
without those devices); later, sources log and keep their previous list.  An
:class:`AllocateError` never escapes the Allocate path: a pod we placed is marked failed and its
node lock released, and the kubelet gets the message as a gRPC error (it then rejects the pod
with ``UnexpectedAdmissionError``).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AllocateError",
    "BackendError",
    "FailureKind",
    "FakeDevicesError",
    "MigError",
    "invalid",
]


class BackendError(Exception):
    """A backend cannot start (library missing, file unreadable, driver not loaded)."""


class FakeDevicesError(BackendError):
    """The fake devices file is missing or malformed; the message names the field."""


class FailureKind(StrEnum):
    """Why an allocation failed; the gRPC layer maps it to a status code."""

    NO_POD = "no_pod"  # no pod of ours could be identified
    INVALID = "invalid"  # annotations or request do not fit together
    API = "api"  # the API server could not be read or written
    HOST = "host"  # host directories could not be prepared
    MIG = "mig"  # MIG instances could not be created
    TIMEOUT = "timeout"  # the allocation deadline passed
    INTERNAL = "internal"


class MigError(Exception):
    """A MIG call failed: NVML refused it, or the GPU is not in a state that allows it.  What the
    failing call itself had made is already undone when this is raised."""


class AllocateError(Exception):
    def __init__(self, kind: FailureKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def invalid(message: str) -> AllocateError:
    """The pod's annotations and the kubelet's request do not fit together."""
    return AllocateError(FailureKind.INVALID, message)
