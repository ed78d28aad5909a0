"""AdmissionReview on the wire: building the request, checking the reply, applying the patch.

Pure functions restating what the API server does around one mutating webhook call
(``admission.k8s.io/v1`` and ``v1beta1``): the request envelope and its fields, the checks on the
reply (``VerifyAdmissionResponse``), the JSON Patch decoding and application, and the exact error
texts the API client sees.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from hami_kube.objects import ObjectView
from hami_kubesim.admission.match import RequestAttributes

__all__ = [
    "KNOWN_REVIEW_VERSIONS",
    "CallingError",
    "GroupVersionKind",
    "PatchApplyError",
    "Rejection",
    "ReviewResult",
    "apply_json_patch",
    "build_review",
    "choose_review_version",
    "default_user_info",
    "dry_run_unsupported",
    "internal_error_message",
    "kind_for",
    "rejection_from_status",
    "verify_response",
]

KNOWN_REVIEW_VERSIONS = ("v1", "v1beta1")
_REVIEW_GROUP = "admission.k8s.io"
_KIND = "AdmissionReview"
_PATCH_TYPE = "JSONPatch"
_KNOWN_KINDS: Mapping[str, tuple[str, str, str]] = {
    "pods": ("", "v1", "Pod"),
    "namespaces": ("", "v1", "Namespace"),
    "nodes": ("", "v1", "Node"),
    "configmaps": ("", "v1", "ConfigMap"),
}


class CallingError(Exception):
    """The webhook could not be called or answered badly; ``failurePolicy`` decides what follows.

    ``str()`` is the reason part of the API server's ``failed calling webhook "<name>": <reason>``.
    """


class PatchApplyError(Exception):
    """The webhook's patch does not apply to the object (an internal error whatever the policy)."""


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def as_json(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "kind": self.kind}


@dataclass(frozen=True, slots=True)
class Rejection:
    """What the API client receives when a webhook says ``allowed: false``."""

    code: int
    message: str
    reason: str


@dataclass(frozen=True, slots=True)
class ReviewResult:
    """A verified reply: allowed or not, the decoded patch operations, warnings."""

    allowed: bool
    patch: tuple[dict[str, Any], ...] = ()
    status: Mapping[str, Any] | None = None
    warnings: tuple[str, ...] = ()
    audit_annotations: Mapping[str, str] = field(default_factory=dict)


def default_user_info() -> dict[str, Any]:
    """The identity requests are attributed to: a cluster administrator."""
    return {
        "username": "kubernetes-admin",
        "groups": ["system:masters", "system:authenticated"],
    }


def kind_for(resource: str, obj: Mapping[str, Any] | None) -> GroupVersionKind:
    """The object's group/version/kind: from its ``apiVersion``/``kind`` or the known resources."""
    if obj is not None:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if isinstance(api_version, str) and api_version and isinstance(kind, str) and kind:
            group, _, version = api_version.rpartition("/")
            return GroupVersionKind(group, version, kind)
    group, version, kind = _KNOWN_KINDS.get(resource, ("", "v1", ""))
    return GroupVersionKind(group, version, kind)


def choose_review_version(accepted: Sequence[str]) -> str:
    """The first version in the webhook's ``admissionReviewVersions`` this server speaks."""
    for version in accepted:
        if version in KNOWN_REVIEW_VERSIONS:
            return version
    raise CallingError(
        f"webhook does not accept known AdmissionReview versions: accepted {list(accepted)}, "
        f"known {list(KNOWN_REVIEW_VERSIONS)}"
    )


def build_review(
    *,
    version: str,
    uid: str,
    attrs: RequestAttributes,
    kind: GroupVersionKind,
    obj: Mapping[str, Any] | None,
    old_obj: Mapping[str, Any] | None,
    namespace: str | None,
    user_info: Mapping[str, Any],
    dry_run: bool = False,
) -> dict[str, Any]:
    """The AdmissionReview document sent to a webhook."""
    resource = {"group": attrs.group, "version": attrs.version, "resource": attrs.resource}
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind.as_json(),
        "resource": resource,
        "requestKind": kind.as_json(),
        "requestResource": dict(resource),
    }
    if attrs.subresource:
        request["subResource"] = attrs.subresource
        request["requestSubResource"] = attrs.subresource
    name = ObjectView(obj or {}).name or ObjectView(old_obj or {}).name
    if name:
        request["name"] = name
    if namespace:
        request["namespace"] = namespace
    request.update(
        {
            "operation": attrs.operation,
            "userInfo": dict(user_info),
            "object": None if obj is None else copy.deepcopy(dict(obj)),
            "oldObject": None if old_obj is None else copy.deepcopy(dict(old_obj)),
            "dryRun": dry_run,
            "options": _options_for(attrs.operation, dry_run),
        }
    )
    return {"apiVersion": f"{_REVIEW_GROUP}/{version}", "kind": _KIND, "request": request}


def verify_response(body: object, *, uid: str, version: str) -> ReviewResult:
    """Check a webhook's reply the way the API server does; raise :class:`CallingError` if bad."""
    if not isinstance(body, Mapping):
        raise CallingError(f"received invalid webhook response: not a JSON object: {_short(body)}")
    response = body.get("response")
    if not isinstance(response, Mapping):
        raise CallingError("received invalid webhook response: webhook response was absent")
    patch_b64 = response.get("patch")
    patch_type = response.get("patchType")
    if version == "v1":
        _verify_v1_envelope(body, response, uid)
        if patch_b64 and patch_type is None:
            raise CallingError(
                "received invalid webhook response: "
                "webhook returned response.patch but not response.patchType"
            )
        if patch_type is not None and not patch_b64:
            raise CallingError(
                "received invalid webhook response: "
                "webhook returned response.patchType but not response.patch"
            )
        if patch_type is not None and patch_type != _PATCH_TYPE:
            raise CallingError(
                "received invalid webhook response: "
                f"webhook returned invalid response.patchType of {_short(patch_type)}"
            )
    allowed = response.get("allowed") is True
    patch = _decode_patch(patch_b64) if allowed and patch_b64 else ()
    status = response.get("status")
    warnings = response.get("warnings") or []
    annotations = response.get("auditAnnotations") or {}
    return ReviewResult(
        allowed=allowed,
        patch=patch,
        status=status if isinstance(status, Mapping) else None,
        warnings=tuple(str(w) for w in warnings) if isinstance(warnings, list) else (),
        audit_annotations=(
            {str(k): str(v) for k, v in annotations.items()}
            if isinstance(annotations, Mapping)
            else {}
        ),
    )


def apply_json_patch(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply RFC 6902 operations in order to a copy of ``obj``."""
    try:
        patched = jsonpatch.JsonPatch([dict(op) for op in ops]).apply(copy.deepcopy(dict(obj)))
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
        raise PatchApplyError(str(exc)) from exc
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise PatchApplyError(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(patched, dict):
        raise PatchApplyError(f"the patch replaced the object with {_short(patched)}")
    return patched


def rejection_from_status(webhook: str, status: Mapping[str, Any] | None) -> Rejection:
    """The API server's ``ToStatusErr``: code raised to at least 400, message prefixed."""
    status = status or {}
    code = status.get("code")
    code = code if isinstance(code, int) and not isinstance(code, bool) and code >= 400 else 400
    message = status.get("message")
    reason = status.get("reason")
    denied_by = f'admission webhook "{webhook}" denied the request'
    if isinstance(message, str) and message:
        text = f"{denied_by}: {message}"
    elif isinstance(reason, str) and reason:
        text = f"{denied_by}: {reason}"
    else:
        text = f"{denied_by} without explanation"
    return Rejection(code=code, message=text, reason=reason if isinstance(reason, str) else "")


def dry_run_unsupported(webhook: str) -> Rejection:
    return Rejection(
        code=400,
        message=f'admission webhook "{webhook}" does not support dry run',
        reason="BadRequest",
    )


def internal_error_message(detail: str) -> str:
    """``apierrors.NewInternalError`` wording."""
    return f"Internal error occurred: {detail}"


def _verify_v1_envelope(body: Mapping[str, Any], response: Mapping[str, Any], uid: str) -> None:
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version != f"{_REVIEW_GROUP}/v1" or kind != _KIND:
        raise CallingError(
            "received invalid webhook response: expected webhook response of "
            f"{_REVIEW_GROUP}/v1, Kind={_KIND}, got {api_version}, Kind={kind}"
        )
    got = response.get("uid")
    if got != uid:
        raise CallingError(
            f'received invalid webhook response: expected response.uid="{uid}", got "{got}"'
        )


def _decode_patch(patch_b64: object) -> tuple[dict[str, Any], ...]:
    if not isinstance(patch_b64, str):
        raise CallingError(
            f"received invalid webhook response: response.patch must be base64 text, "
            f"got {_short(patch_b64)}"
        )
    try:
        raw = base64.b64decode(patch_b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise CallingError(
            f"received invalid webhook response: response.patch is not base64: {exc} "
            f"(value {_short(patch_b64)})"
        ) from exc
    try:
        ops = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CallingError(
            f"received undecodable patch in webhook response: {exc} (patch {_short(raw)})"
        ) from exc
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise CallingError(
            "received undecodable patch in webhook response: "
            f"a JSON Patch must be an array of objects, got {_short(ops)}"
        )
    return tuple(ops)


def _options_for(operation: str, dry_run: bool) -> dict[str, Any] | None:
    kinds = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}
    kind = kinds.get(operation)
    if kind is None:
        return None
    options: dict[str, Any] = {"kind": kind, "apiVersion": "meta.k8s.io/v1"}
    if dry_run:
        options["dryRun"] = ["All"]
    return options


def _short(value: object, limit: int = 200) -> str:
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
