"""Pure: the MIG profiles of some GPU models, from NVIDIA's public MIG user guide, for the fake
backend (a real GPU reports its own through NVML).

Profile ids are NVML's ``NVML_GPU_INSTANCE_PROFILE_*`` values; memory is what NVML reports in MiB
(rounded as the guide's tables give it); placements are the guide's possible starts and the
number of memory slices an instance occupies there (``1g`` on an A100 starts at 0..6, size 1;
``3g`` at 0 or 4, size 4; ``7g`` at 0, size 8).
"""

from __future__ import annotations

from typing import Final

from hami_deviceplugin.gpu.mig.model import MigCapability, MigProfileSpec
from hami_protocol.node.registry import MigPlacement

__all__ = ["FAKE_TABLES", "fake_capability"]


def _spots(starts: tuple[int, ...], size: int) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start, size) for start in starts)


def _spec(
    name: str, numbers: tuple[int, int, int, int, int], starts: tuple[int, ...], size: int
) -> MigProfileSpec:
    """``numbers``: NVML profile id, slices, MiB, SMs, instance count."""
    pid, slices, mib, sms, count = numbers
    return MigProfileSpec(name, pid, slices, mib, sms, count, _spots(starts, size))


_A100_40: Final = MigCapability(
    full_sms=108,
    profiles=(
        _spec("1g.5gb", (0, 1, 4864, 14, 7), (0, 1, 2, 3, 4, 5, 6), 1),
        _spec("1g.10gb", (7, 1, 9856, 14, 4), (0, 2, 4, 6), 2),
        _spec("2g.10gb", (1, 2, 9856, 28, 3), (0, 2, 4), 2),
        _spec("3g.20gb", (2, 3, 19968, 42, 2), (0, 4), 4),
        _spec("4g.20gb", (3, 4, 19968, 56, 1), (0,), 4),
        _spec("7g.40gb", (4, 7, 40192, 98, 1), (0,), 8),
    ),
)
_A100_80: Final = MigCapability(
    full_sms=108,
    profiles=(
        _spec("1g.10gb", (0, 1, 9728, 14, 7), (0, 1, 2, 3, 4, 5, 6), 1),
        _spec("1g.20gb", (7, 1, 19968, 14, 4), (0, 2, 4, 6), 2),
        _spec("2g.20gb", (1, 2, 19968, 28, 3), (0, 2, 4), 2),
        _spec("3g.40gb", (2, 3, 40192, 42, 2), (0, 4), 4),
        _spec("4g.40gb", (3, 4, 40192, 56, 1), (0,), 4),
        _spec("7g.80gb", (4, 7, 80896, 98, 1), (0,), 8),
    ),
)
_A30_24: Final = MigCapability(
    full_sms=56,
    profiles=(
        _spec("1g.6gb", (0, 1, 5836, 14, 4), (0, 1, 2, 3), 1),
        _spec("2g.12gb", (1, 2, 11904, 28, 2), (0, 2), 2),
        _spec("4g.24gb", (3, 4, 23936, 56, 1), (0,), 4),
    ),
)
_H100_80: Final = MigCapability(
    full_sms=132,
    profiles=(
        _spec("1g.10gb", (0, 1, 9984, 16, 7), (0, 1, 2, 3, 4, 5, 6), 1),
        _spec("1g.20gb", (7, 1, 19968, 16, 4), (0, 2, 4, 6), 2),
        _spec("2g.20gb", (1, 2, 19968, 32, 3), (0, 2, 4), 2),
        _spec("3g.40gb", (2, 3, 40448, 60, 2), (0, 4), 4),
        _spec("4g.40gb", (3, 4, 40448, 64, 1), (0,), 4),
        _spec("7g.80gb", (4, 7, 80896, 132, 1), (0,), 8),
    ),
)

FAKE_TABLES: Final = (
    (("A100", "40GB"), _A100_40),
    (("A100", "80GB"), _A100_80),
    (("A30",), _A30_24),
    (("H100", "80GB"), _H100_80),
)
"""Model-name fragments (all must occur) → the model's MIG profiles; the first match wins."""


def fake_capability(model: str) -> MigCapability | None:
    """The profile table for a model name, or None when the fake knows none."""
    upper = model.upper()
    for fragments, capability in FAKE_TABLES:
        if all(fragment in upper for fragment in fragments):
            return capability
    return None
