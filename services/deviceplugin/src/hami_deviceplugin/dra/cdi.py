"""Pure: the CDI spec file of one prepared claim (CDI spec 1.1.0 format, contract §5).

One transient spec per claim, ``<cdi dir>/k8s.gpu.hami.io-claim_<claimUID>.json`` (the CDI
library's ``<vendor>-<class>_<id>`` convention), kind ``k8s.gpu.hami.io/claim``, one device per
claim request named ``<claimUID>-<request>``: the claim UID keeps a name from ever being reused
for another claim (runtimes may cache specs) and the request lets a container that names one
request get only that request's GPUs.  UIDs often start with a digit, which CDI allows from
spec version 0.5.0 on; :func:`minimum_version` declares the lowest version the file needs
(loading fails when a file declares less than its features need).

A device's ``containerEdits`` are what the device-plugin path's Allocate answers for the same GPUs
and limits (:func:`~hami_deviceplugin.gpu.plan.container_grant`): env ``NAME=value`` in the same
order, the mounts as bind mounts (``ro``/``rw``).  GPU device nodes and driver libraries come,
as on the device-plugin path, from the NVIDIA runtime reading ``NVIDIA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from hami_deviceplugin.gpu.plan import ContainerGrant, MountSpec
from hami_protocol.dra_driver import CDI_CLASS, CDI_KIND, CDI_VENDOR

__all__ = [
    "container_edits",
    "device_id",
    "device_name",
    "minimum_version",
    "spec_file_name",
    "spec_of",
]

_BASE_VERSION: Final = "0.3.0"
_DIGIT_NAME_VERSION: Final = "0.5.0"
"""Device names starting with a digit need spec 0.5.0."""


def device_name(claim_uid: str, request: str) -> str:
    """``<claimUID>-<request>``: the CDI device of one claim request."""
    return f"{claim_uid}-{request}"


def device_id(name: str) -> str:
    """The fully qualified CDI id: ``k8s.gpu.hami.io/claim=<name>``."""
    return f"{CDI_KIND}={name}"


def spec_file_name(claim_uid: str) -> str:
    """``k8s.gpu.hami.io-claim_<claimUID>.json``."""
    return f"{CDI_VENDOR}-{CDI_CLASS}_{claim_uid}.json"


def _mount(mount: MountSpec) -> dict[str, Any]:
    return {
        "hostPath": mount.host_path,
        "containerPath": mount.container_path,
        "options": ["bind", "ro" if mount.read_only else "rw"],
    }


def container_edits(grant: ContainerGrant) -> dict[str, Any]:
    """A grant's env and mounts as CDI ``containerEdits``."""
    return {
        "env": [f"{name}={value}" for name, value in grant.envs.items()],
        "mounts": [_mount(mount) for mount in grant.mounts],
    }


def minimum_version(names: Sequence[str]) -> str:
    """The lowest ``cdiVersion`` a spec with these device names needs."""
    return _DIGIT_NAME_VERSION if any(name[:1].isdigit() for name in names) else _BASE_VERSION


def spec_of(devices: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The spec holding ``devices`` (CDI device name → its containerEdits)."""
    names = list(devices)
    if not names:
        raise ValueError("a CDI spec needs at least one device")
    return {
        "cdiVersion": minimum_version(names),
        "kind": CDI_KIND,
        "devices": [{"name": name, "containerEdits": dict(devices[name])} for name in names],
    }
