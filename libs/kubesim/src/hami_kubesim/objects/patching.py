"""PATCH bodies: JSON merge patch (RFC 7386), strategic merge patch for the built-in kinds we
serve, and JSON patch (RFC 6902).

Results share unchanged sub-trees with the original object; stored objects are never mutated, so
sharing is safe and saves copying large objects for small patches.
"""

from __future__ import annotations

from typing import Any

import jsonpatch

from hami_kubesim.apiserver.errors import BadRequestError, StatusError, UnsupportedMediaTypeError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCH_TYPES = (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH)
MAX_JSON_PATCH_OPS = 10000

Path = tuple[str, ...]

_CONTAINER_LISTS: dict[str, str] = {
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "resizePolicy": "resourceName",
}


def _pod_keys() -> dict[Path, str]:
    keys: dict[Path, str] = {
        ("spec", "volumes"): "name",
        ("spec", "imagePullSecrets"): "name",
        ("spec", "hostAliases"): "ip",
        ("spec", "schedulingGates"): "name",
        ("spec", "resourceClaims"): "name",
        ("spec", "topologySpreadConstraints"): "topologyKey",
        ("status", "conditions"): "type",
        ("status", "podIPs"): "ip",
        ("status", "hostIPs"): "ip",
        ("status", "resourceClaimStatuses"): "name",
    }
    for group in ("containers", "initContainers", "ephemeralContainers"):
        keys["spec", group] = "name"
        for sub, key in _CONTAINER_LISTS.items():
            keys["spec", group, sub] = key
    return keys


_COMMON_KEYS: dict[Path, str] = {("metadata", "ownerReferences"): "uid"}
MERGE_KEYS: dict[str, dict[Path, str]] = {
    "Pod": _pod_keys(),
    "Node": {("status", "conditions"): "type", ("status", "addresses"): "type"},
    "Namespace": {("status", "conditions"): "type"},
    "MutatingWebhookConfiguration": {("webhooks",): "name"},
    "PodDisruptionBudget": {("status", "conditions"): "type"},
    # The scheduler's Unreserve removes its pod with ``$patch: delete`` keyed by uid.
    "ResourceClaim": {("status", "reservedFor"): "uid"},
}
PRIMITIVE_MERGE_LISTS: dict[str, frozenset[Path]] = {
    "Node": frozenset({("spec", "podCIDRs")}),
}
_COMMON_PRIMITIVE: frozenset[Path] = frozenset({("metadata", "finalizers")})


def media_type(content_type: str | None) -> str:
    """The patch media type, any ``; charset=...`` parameter dropped."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def apply_patch(
    kind: str, original: dict[str, Any], content_type: str, body: Any
) -> dict[str, Any]:
    """Apply a decoded PATCH body of ``content_type`` to ``original`` (left untouched)."""
    ctype = media_type(content_type)
    if ctype == JSON_PATCH:
        return json_patch(original, body)
    if not isinstance(body, dict):
        raise BadRequestError("the body of the request must be a JSON object for this patch type")
    if ctype == MERGE_PATCH:
        result = merge_patch(original, body)
    elif ctype == STRATEGIC_PATCH:
        result = strategic_merge_patch(kind, original, body)
    else:
        raise UnsupportedMediaTypeError(ctype or "<none>")
    if not isinstance(result, dict):
        raise BadRequestError("the patch did not produce an object")
    return result


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: maps merged recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(original: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902; a malformed patch is 400, an operation that cannot apply is 422."""
    if not isinstance(ops, list):
        raise BadRequestError("json patch must be an array of operations")
    if len(ops) > MAX_JSON_PATCH_OPS:
        raise StatusError(
            413,
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPS}, "
            f"got {len(ops)}",
        )
    try:
        patch = jsonpatch.JsonPatch(ops)
        result = patch.apply(original, in_place=False)
    except jsonpatch.InvalidJsonPatch as exc:
        raise BadRequestError(f"invalid json patch: {exc}") from exc
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError) as exc:
        raise StatusError(
            422, f"the server rejected our request due to an error in our request: {exc}"
        ) from exc
    if not isinstance(result, dict):
        raise StatusError(422, "json patch must leave an object at the root")
    return result


def strategic_merge_patch(
    kind: str, original: dict[str, Any], patch: dict[str, Any]
) -> dict[str, Any]:
    """Strategic merge patch: like merge patch, but lists with a patch merge key (containers by
    ``name``, conditions by ``type``, ...) are merged element-wise, and ``$patch``,
    ``$retainKeys``, ``$setElementOrder/`` and ``$deleteFromPrimitiveList/`` are honoured."""
    merged = _Merger(kind).merge_map(original, patch, ())
    return merged if merged is not None else {}


class _Merger:
    def __init__(self, kind: str) -> None:
        self.keys = {**_COMMON_KEYS, **MERGE_KEYS.get(kind, {})}
        self.primitive = _COMMON_PRIMITIVE | PRIMITIVE_MERGE_LISTS.get(kind, frozenset())

    def merge_map(self, orig: Any, patch: dict[str, Any], path: Path) -> dict[str, Any] | None:
        directive = patch.get("$patch")
        if directive == "delete":
            return None
        if directive == "replace":
            return self.merge_map(None, {k: v for k, v in patch.items() if k != "$patch"}, path)
        if directive not in (None, "merge"):
            raise BadRequestError(f"Unknown patch type: {directive}")
        result: dict[str, Any] = dict(orig) if isinstance(orig, dict) else {}
        orders: dict[str, list[Any]] = {}
        for key, value in patch.items():
            if key.startswith("$setElementOrder/"):
                if isinstance(value, list):
                    orders[key.split("/", 1)[1]] = value
                continue
            if key.startswith("$deleteFromPrimitiveList/") or key in ("$patch", "$retainKeys"):
                continue
            if value is None:
                result.pop(key, None)
            elif isinstance(value, dict):
                sub = self.merge_map(result.get(key), value, (*path, key))
                if sub is None:
                    result.pop(key, None)
                else:
                    result[key] = sub
            elif isinstance(value, list):
                old = result.get(key)
                result[key] = self.merge_list(
                    old if isinstance(old, list) else [], value, (*path, key)
                )
            else:
                result[key] = value
        for key, value in patch.items():
            if key.startswith("$deleteFromPrimitiveList/") and isinstance(value, list):
                field = key.split("/", 1)[1]
                if isinstance(result.get(field), list):
                    result[field] = [v for v in result[field] if v not in value]
        for field, order in orders.items():
            if isinstance(result.get(field), list):
                result[field] = self._reorder(result[field], order, (*path, field))
        retain = patch.get("$retainKeys")
        if isinstance(retain, list):
            result = {k: v for k, v in result.items() if k in retain}
        return result

    def merge_list(self, orig: list[Any], patch: list[Any], path: Path) -> list[Any]:
        merge_key = self.keys.get(path)
        if merge_key is None:
            if path in self.primitive:
                return list(orig) + [v for v in patch if v not in orig]
            return patch  # lists without a merge key are replaced, element values as sent
        if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
            return [
                self._fresh(v, path)
                for v in patch
                if not (isinstance(v, dict) and v.get("$patch") == "replace")
            ]
        result = list(orig)
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                raise BadRequestError(
                    f"map: {item} does not contain declared merge key: {merge_key}"
                )
            key_value = item[merge_key]
            if item.get("$patch") == "delete":
                result = [
                    v for v in result if not (isinstance(v, dict) and v.get(merge_key) == key_value)
                ]
                continue
            for idx, existing in enumerate(result):
                if isinstance(existing, dict) and existing.get(merge_key) == key_value:
                    merged = self.merge_map(existing, item, path)
                    if merged is not None:
                        result[idx] = merged
                    break
            else:
                fresh = self.merge_map(None, item, path)
                if fresh is not None:
                    result.append(fresh)
        return result

    def _fresh(self, value: Any, path: Path) -> Any:
        if isinstance(value, dict):
            return self.merge_map(None, value, path)
        return value

    def _reorder(self, items: list[Any], order: list[Any], path: Path) -> list[Any]:
        merge_key = self.keys.get(path)
        if merge_key is None:
            ranks = {repr(v): i for i, v in enumerate(order)}
            ranked = [v for v in items if repr(v) in ranks]
            ranked.sort(key=lambda v: ranks[repr(v)])
            return ranked + [v for v in items if repr(v) not in ranks]
        wanted = [o.get(merge_key) for o in order if isinstance(o, dict)]
        positions = {repr(k): i for i, k in enumerate(wanted)}

        def rank(v: Any) -> int:
            return positions.get(repr(v.get(merge_key)) if isinstance(v, dict) else "", -1)

        listed = sorted((v for v in items if rank(v) >= 0), key=rank)
        return listed + [v for v in items if rank(v) < 0]
