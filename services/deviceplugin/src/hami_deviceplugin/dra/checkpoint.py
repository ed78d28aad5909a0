"""The claims this node prepared, kept in ``<state dir>/checkpoint.json`` so that Prepare and
Unprepare stay idempotent across plugin restarts (the kubelet retries both and calls Prepare
again after its own restarts).

Per claim UID: namespace and name, the answer given (devices with request names, pool, device,
CDI ids, shareID), the CDI spec written and its file name.  A Prepare of a claim found here
answers the same again (rewriting the spec file if it is gone: ``/var/run`` is a tmpfs that a
reboot empties) without touching the containers' directories; an Unprepare removes the spec file
and the entry.  The file is replaced atomically after every change (:mod:`.files`).

A checkpoint that does not decode stops the plugin at start (:class:`CheckpointError`): starting
empty would prepare already running claims again, wiping the HAMi-core caches their containers
share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hami_deviceplugin.dra.files import read_json, write_json_atomically

__all__ = [
    "CHECKPOINT_FILE",
    "CheckpointError",
    "PreparedClaim",
    "PreparedDevice",
    "decode_checkpoint",
    "encode_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
]

CHECKPOINT_FILE: Final = "checkpoint.json"
_VERSION: Final = 1


class CheckpointError(RuntimeError):
    """The checkpoint file exists but cannot be used."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a prepared claim, as answered to the kubelet."""

    request_names: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    namespace: str
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]
    spec_file: str
    """The CDI spec's file name in the CDI directory ("" when the claim has no device of ours)."""
    spec: Mapping[str, Any]
    """The CDI spec written (kept to rewrite a lost file)."""


def _device_json(device: PreparedDevice) -> dict[str, Any]:
    out: dict[str, Any] = {
        "requestNames": list(device.request_names),
        "poolName": device.pool,
        "deviceName": device.device,
        "cdiDeviceIDs": list(device.cdi_ids),
    }
    if device.share_id is not None:
        out["shareID"] = device.share_id
    return out


def encode_checkpoint(claims: Mapping[str, PreparedClaim]) -> dict[str, Any]:
    return {
        "version": _VERSION,
        "claims": {
            uid: {
                "namespace": claim.namespace,
                "name": claim.name,
                "devices": [_device_json(d) for d in claim.devices],
                "specFile": claim.spec_file,
                "spec": dict(claim.spec),
            }
            for uid, claim in claims.items()
        },
    }


def _strings(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise CheckpointError("expected a list of strings")
    return tuple(raw)


def _text(raw: Mapping[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise CheckpointError(f"{key} is not a string")
    return value


def _device(raw: object) -> PreparedDevice:
    if not isinstance(raw, Mapping):
        raise CheckpointError("a device is not an object")
    share = raw.get("shareID")
    return PreparedDevice(
        request_names=_strings(raw.get("requestNames")),
        pool=_text(raw, "poolName"),
        device=_text(raw, "deviceName"),
        cdi_ids=_strings(raw.get("cdiDeviceIDs")),
        share_id=share if isinstance(share, str) else None,
    )


def decode_checkpoint(document: object) -> dict[str, PreparedClaim]:
    if not isinstance(document, Mapping) or document.get("version") != _VERSION:
        raise CheckpointError(f"not a version {_VERSION} checkpoint")
    claims = document.get("claims")
    if not isinstance(claims, Mapping):
        raise CheckpointError("claims is not an object")
    out: dict[str, PreparedClaim] = {}
    for uid, raw in claims.items():
        if not isinstance(raw, Mapping) or not isinstance(raw.get("devices"), list):
            raise CheckpointError(f"claim {uid}: not an object with devices")
        spec = raw.get("spec")
        if not isinstance(spec, Mapping):
            raise CheckpointError(f"claim {uid}: spec is not an object")
        out[str(uid)] = PreparedClaim(
            namespace=_text(raw, "namespace"),
            name=_text(raw, "name"),
            uid=str(uid),
            devices=tuple(_device(d) for d in raw["devices"]),
            spec_file=_text(raw, "specFile"),
            spec=dict(spec),
        )
    return out


def load_checkpoint(path: Path) -> dict[str, PreparedClaim]:
    """The claims in ``path`` (none when there is no file); blocking."""
    try:
        document = read_json(path)
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from exc
    if document is None:
        return {}
    try:
        return decode_checkpoint(document)
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None


def save_checkpoint(path: Path, claims: Mapping[str, PreparedClaim]) -> None:
    """Replace ``path`` with ``claims`` (atomically; blocking)."""
    write_json_atomically(path, encode_checkpoint(claims), mode=0o600)
