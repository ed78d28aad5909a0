"""How well two GPUs are linked, and the pair scores of ``hami.io/node-nvidia-score`` (HAMi's
``calculate_score.go``).

Each ordered pair of GPUs has one PCIe class (from NVML's common ancestor of the two) and a count
of NVLinks between them.  A pair scores the sum of its link weights: the PCIe class's weight
(:data:`PCIE_WEIGHTS`: cross-CPU 10 … same board 60) plus 100 per NVLink.  A pair is scored only
when both directions are known; directions that disagree (a different NVLink count or PCIe class
seen from each end) make the pair *asymmetric*: it scores 0 both ways and is reported, so the
device plugin can warn (``AsymmetricGPUP2PLink``).  A pair with no data scores 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from hami_protocol.errors import ValidationError
from hami_protocol.node.pairscore import DevicePairScore

__all__ = [
    "ASYMMETRIC_LINK_REASON",
    "MAX_NVLINKS",
    "NVLINK_WEIGHT",
    "PCIE_WEIGHTS",
    "AsymmetricPair",
    "LinkTable",
    "PairLinks",
    "PcieLink",
    "pair_score",
    "pair_scores",
]

ASYMMETRIC_LINK_REASON: Final = "AsymmetricGPUP2PLink"
"""The reason of the node Warning Event the device plugin posts for an asymmetric pair."""

MAX_NVLINKS: Final = 18
"""The most NVLinks one pair can have (HAMi's ``EighteenNVLINKLinks``)."""

NVLINK_WEIGHT: Final = 100
"""Score per NVLink between a pair."""


class PcieLink(StrEnum):
    """The PCIe path between two GPUs, from farthest to closest (HAMi's ``P2PLink*`` names)."""

    CROSS_CPU = "CrossCPU"
    SAME_CPU = "SameCPU"
    HOST_BRIDGE = "HostBridge"
    MULTI_SWITCH = "MultiSwitch"
    SINGLE_SWITCH = "SingleSwitch"
    SAME_BOARD = "SameBoard"


PCIE_WEIGHTS: Final[Mapping[PcieLink, int]] = {
    PcieLink.CROSS_CPU: 10,
    PcieLink.SAME_CPU: 20,
    PcieLink.HOST_BRIDGE: 30,
    PcieLink.MULTI_SWITCH: 40,
    PcieLink.SINGLE_SWITCH: 50,
    PcieLink.SAME_BOARD: 60,
}


@dataclass(frozen=True, slots=True)
class PairLinks:
    """The links from one GPU to another: ``pcie`` (None when unknown) and ``nvlinks``."""

    pcie: PcieLink | None = None
    nvlinks: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.nvlinks, bool) or not 0 <= self.nvlinks <= MAX_NVLINKS:
            raise ValidationError("nvlinks", self.nvlinks, f"must be 0..{MAX_NVLINKS}")

    @property
    def score(self) -> int:
        """This direction's weight sum (what HAMi adds up per link)."""
        pcie = 0 if self.pcie is None else PCIE_WEIGHTS[self.pcie]
        return pcie + NVLINK_WEIGHT * self.nvlinks

    def describe(self) -> str:
        pcie = "unknown PCIe path" if self.pcie is None else f"PCIe {self.pcie.value}"
        return f"{pcie}, {self.nvlinks} NVLink{'' if self.nvlinks == 1 else 's'}"


LinkTable = Mapping[tuple[str, str], PairLinks]
"""``(from UUID, to UUID)`` → the links that way; an absent direction has no data."""


@dataclass(frozen=True, slots=True)
class AsymmetricPair:
    """A pair whose two directions disagree; ``first`` comes before ``second`` in GPU order."""

    first: str
    second: str
    forward: PairLinks
    """``first`` → ``second``."""
    backward: PairLinks
    """``second`` → ``first``."""

    def message(self) -> str:
        return (
            f"GPU {self.first} -> {self.second}: {self.forward.describe()}; "
            f"{self.second} -> {self.first}: {self.backward.describe()}; "
            "the pair's topology score is 0"
        )


def pair_score(forward: PairLinks | None, backward: PairLinks | None) -> int | None:
    """The score of a pair both ways: 0 with no data either way, None when asymmetric."""
    if forward is None or backward is None:
        return 0
    if forward != backward:
        return None
    return forward.score


def pair_scores(
    gpus: Sequence[str], links: LinkTable
) -> tuple[tuple[DevicePairScore, ...], tuple[AsymmetricPair, ...]]:
    """Every GPU's score to every other GPU (in ``gpus`` order), and the asymmetric pairs."""
    scores: dict[str, dict[str, int]] = {uuid: {} for uuid in gpus}
    asymmetric: list[AsymmetricPair] = []
    for position, first in enumerate(gpus):
        for second in gpus[position + 1 :]:
            if first == second:
                continue
            forward, backward = links.get((first, second)), links.get((second, first))
            score = pair_score(forward, backward)
            if score is None and forward is not None and backward is not None:
                asymmetric.append(AsymmetricPair(first, second, forward, backward))
            scores[first][second] = scores[second][first] = score or 0
    entries = tuple(DevicePairScore(uuid, tuple(scores[uuid].items())) for uuid in scores)
    return entries, tuple(asymmetric)
