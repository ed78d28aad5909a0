"""AdmissionReview ``admission.k8s.io/v1`` and ``v1beta1``: decoding requests, encoding replies.

Both versions carry the same JSON keys.  A reply echoes the request's ``apiVersion`` and ``kind``
exactly and its ``request.uid`` (the API server checks all three for v1), and carries a patch as
standard base64 of the JSON Patch array with ``patchType: JSONPatch``.

:func:`decode_review` raises :class:`BadReviewError` only when no reply can be addressed (not JSON,
not an AdmissionReview of a known version, no ``request``, no ``uid``); the HTTP layer answers
those with status 400.  Everything else gets a well-formed reply.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from hami_kube.objects import ObjectView
from hami_webhook.mutation.decision import Decision
from hami_webhook.mutation.patch import PatchOp

__all__ = [
    "REVIEW_KIND",
    "REVIEW_VERSIONS",
    "AdmissionRequest",
    "BadReviewError",
    "ReviewVersion",
    "decode_review",
    "encode_patch",
    "encode_response",
    "failure_status",
]

ReviewVersion = Literal["admission.k8s.io/v1", "admission.k8s.io/v1beta1"]
REVIEW_VERSIONS: Final[tuple[ReviewVersion, ...]] = (
    "admission.k8s.io/v1",
    "admission.k8s.io/v1beta1",
)
REVIEW_KIND: Final = "AdmissionReview"
_MAX_SHOWN: Final = 80


class BadReviewError(ValueError):
    """The body is not an AdmissionReview this service can answer."""


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The fields of ``request`` the webhook looks at."""

    api_version: ReviewVersion
    uid: str
    operation: str = ""
    namespace: str = ""
    name: str = ""
    kind: Mapping[str, Any] = field(default_factory=dict)
    """``{group, version, kind}`` of the object as sent to this webhook."""
    resource: Mapping[str, Any] = field(default_factory=dict)
    sub_resource: str = ""
    object: object = None
    dry_run: bool = False

    @property
    def kind_name(self) -> str:
        """``Pod``, ``apps/v1 Deployment``: the object's kind for messages."""
        group = self.kind.get("group") or ""
        version = self.kind.get("version") or ""
        kind = self.kind.get("kind") or ""
        if not kind and isinstance(self.object, Mapping):
            kind = self.object.get("kind") or ""
        prefix = "/".join(part for part in (group, version) if part)
        return f"{prefix} {kind}".strip() or "unknown kind"

    @property
    def is_pod(self) -> bool:
        kind = self.kind.get("kind")
        if kind is None and isinstance(self.object, Mapping):
            kind = self.object.get("kind", "Pod")
        group = self.kind.get("group") or ""
        return kind == "Pod" and group == ""

    @property
    def display_name(self) -> str:
        name = self.name
        if not name and isinstance(self.object, Mapping):
            view = ObjectView(self.object)
            name = view.name or _text(view.meta.get("generateName"))
        return f"{self.namespace}/{name}" if self.namespace else name


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return repr(text[:_MAX_SHOWN] + ("..." if len(text) > _MAX_SHOWN else ""))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _str(request: Mapping[str, Any], key: str) -> str:
    return _text(request.get(key))


def _map(request: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = request.get(key)
    return value if isinstance(value, Mapping) else {}


def decode_review(body: bytes | str) -> AdmissionRequest:
    """Parse an AdmissionReview body; raises :class:`BadReviewError` when no reply can be made."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise BadReviewError(f"body is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise BadReviewError(f"body is not a JSON object (got {type(document).__name__})")
    version = document.get("apiVersion")
    if version not in REVIEW_VERSIONS:
        raise BadReviewError(
            f"unsupported apiVersion {_shown(version)}: "
            f"expected one of {', '.join(REVIEW_VERSIONS)}"
        )
    if document.get("kind") != REVIEW_KIND:
        raise BadReviewError(
            f"unsupported kind {_shown(document.get('kind'))}: expected AdmissionReview"
        )
    request = document.get("request")
    if not isinstance(request, dict):
        raise BadReviewError("AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReviewError(f"request.uid is missing or not a string ({_shown(uid)})")
    return AdmissionRequest(
        api_version=version,
        uid=uid,
        operation=_str(request, "operation"),
        namespace=_str(request, "namespace"),
        name=_str(request, "name"),
        kind=_map(request, "kind"),
        resource=_map(request, "resource"),
        sub_resource=_str(request, "subResource"),
        object=request.get("object"),
        dry_run=request.get("dryRun") is True,
    )


def encode_patch(ops: Sequence[PatchOp]) -> str:
    """Standard base64 (with padding) of the compact JSON Patch array."""
    raw = json.dumps(list(ops), separators=(",", ":"), ensure_ascii=False).encode()
    return base64.b64encode(raw).decode("ascii")


def failure_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` for a refusal."""
    return {"status": "Failure", "code": code, "reason": reason, "message": message}


def encode_response(
    *,
    api_version: ReviewVersion,
    uid: str,
    decision: Decision,
    warnings: Sequence[str] = (),
) -> bytes:
    """The reply AdmissionReview for ``decision``, as JSON bytes."""
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = encode_patch(decision.patch)
    if not decision.allowed:
        response["status"] = failure_status(decision.code, decision.reason, decision.message)
    if warnings:
        response["warnings"] = list(warnings)
    reply = {"apiVersion": api_version, "kind": REVIEW_KIND, "response": response}
    return json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode()
