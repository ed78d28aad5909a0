"""The topology-aware GPU policy: which of the fitting devices to take, by link quality.

Pair scores come from ``hami.io/node-nvidia-score`` (higher = better connected; a missing pair
scores 0; scores may be negative).  Given the devices that passed every fit check, in the order
the fit accepted them:

* one device wanted: the device with the **lowest** sum of scores towards the other candidates
  (the worst-connected one, keeping well-connected sets free); ties → earliest candidate;
* ``k > 1`` wanted: the ``k``-subset with the **highest** sum of pairwise scores; ties → the
  first subset in lexicographic candidate order.

HAMi enumerates every subset.  We do too while the number of subsets is at most
:data:`EXACT_SUBSET_LIMIT` — always on 8-GPU nodes (at most C(8,4) = 70 subsets) and on 16-GPU
nodes for k ≤ 5 or k ≥ 11 (C(16,5) = 4,368).  Beyond that (C(16,8) = 12,870 subsets of 28 pairs
each would cost tens of milliseconds in Python per node) we build a set greedily from the best
pair, adding the device with the largest gain, then apply single swaps while any strictly
improves the sum.  That is exact for the usual NVLink shapes (cliques joined by weak links) and
otherwise a local optimum; it is deterministic and costs O(k·n²) per improving pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import combinations
from math import comb
from typing import Final, TypeVar

__all__ = ["EXACT_SUBSET_LIMIT", "PairScore", "best_subset", "worst_connected"]

EXACT_SUBSET_LIMIT: Final = 5000

PairScore = Callable[[str, str], int]
"""``(uuid, peer) -> score`` (directional, as the annotation stores it)."""

_T = TypeVar("_T")


def worst_connected(uuids: Sequence[str], score: PairScore) -> int:
    """Position of the candidate with the lowest total score towards the others."""
    best_position, best_total = 0, 0
    for position, uuid in enumerate(uuids):
        total = sum(score(uuid, peer) for peer in uuids if peer != uuid)
        if position == 0 or total < best_total:
            best_position, best_total = position, total
    return best_position


def _matrix(uuids: Sequence[str], score: PairScore) -> list[list[int]]:
    return [[score(a, b) if a != b else 0 for b in uuids] for a in uuids]


def _subset_total(subset: Sequence[int], matrix: list[list[int]]) -> int:
    return sum(matrix[a][b] for i, a in enumerate(subset) for b in subset[i + 1 :])


def best_subset(uuids: Sequence[str], k: int, score: PairScore) -> tuple[int, ...]:
    """Positions (ascending) of the ``k`` candidates with the best total pairwise score."""
    n = len(uuids)
    if k >= n:
        return tuple(range(n))
    matrix = _matrix(uuids, score)
    if comb(n, k) <= EXACT_SUBSET_LIMIT:
        best: tuple[int, ...] = ()
        best_total = 0
        for subset in combinations(range(n), k):
            total = _subset_total(subset, matrix)
            if not best or total > best_total:
                best, best_total = subset, total
        return best
    return _greedy_subset(n, k, matrix)


def _pair(matrix: list[list[int]], a: int, b: int) -> int:
    """Score of the unordered pair as the exhaustive sum counts it (earlier → later)."""
    return matrix[a][b] if a < b else matrix[b][a]


def _greedy_subset(n: int, k: int, matrix: list[list[int]]) -> tuple[int, ...]:
    # max() keeps the first of equal pairs, i.e. the lexicographically earliest.
    first, second = max(combinations(range(n), 2), key=lambda ab: matrix[ab[0]][ab[1]])
    chosen = [first, second]
    while len(chosen) < k:
        rest = [c for c in range(n) if c not in chosen]
        chosen.append(_argmax(rest, lambda c: sum(_pair(matrix, c, m) for m in chosen)))
    improved = True
    while improved:
        improved = False
        for slot, member in enumerate(chosen):
            others = [m for m in chosen if m != member]
            current = sum(_pair(matrix, member, m) for m in others)
            for outsider in range(n):
                if outsider in chosen:
                    continue
                if sum(_pair(matrix, outsider, m) for m in others) > current:
                    chosen[slot] = outsider
                    improved = True
                    break
            if improved:
                break
    return tuple(sorted(chosen))


def _argmax(items: Sequence[_T], key: Callable[[_T], int]) -> _T:
    best, best_value = items[0], key(items[0])
    for item in items[1:]:
        value = key(item)
        if value > best_value:
            best, best_value = item, value
    return best
