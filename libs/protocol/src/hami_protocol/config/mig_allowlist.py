"""Pure: which MIG profiles ``nvidia.migProfileAllowlist`` allows on a GPU model.

The first entry one of whose ``models`` is a substring of the model name NVML reports wins (case
sensitive, as HAMi's ``strings.Contains``); later entries are not consulted, so a specific model
listed before a general one takes precedence.  Unlike HAMi, a model does not match where the
name goes on with a digit: ``H20`` is not ``NVIDIA H200-SXM5`` (HAMi gives an H200 the H20's
profiles, which it does not offer, so it registers none of them).  A model no entry matches
gets no MIG profile: the device plugin does not register such a GPU in ``mig`` mode, and the
scheduler never reserves on it.
"""

from __future__ import annotations

from collections.abc import Iterable

from hami_protocol.config.device import MigProfileAllow

__all__ = ["allowed_mig_profiles"]


def allowed_mig_profiles(model: str, allowlist: Iterable[MigProfileAllow]) -> tuple[str, ...]:
    """The profile names the first matching entry lists, in its order; () when none matches."""
    for entry in allowlist:
        if any(_names(model, name) for name in entry.models):
            return entry.profiles
    return ()


def _names(model: str, name: str) -> bool:
    """``name`` appears in ``model`` somewhere not followed by a digit."""
    if not name:
        return False
    start = model.find(name)
    while start >= 0:
        end = start + len(name)
        if end == len(model) or not model[end].isdigit():
            return True
        start = model.find(name, start + 1)
    return False
