"""GPU pair scores from link descriptions (HAMi's calculate_score.go weights)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.errors import ValidationError
from hami_protocol.node.pairscore import DevicePairScore, decode_pair_scores, encode_pair_scores
from hami_protocol.topology.links import (
    MAX_NVLINKS,
    AsymmetricPair,
    PairLinks,
    PcieLink,
    pair_score,
    pair_scores,
)

A, B, C = "GPU-a", "GPU-b", "GPU-c"


def both_ways(
    links: PairLinks, first: str = A, second: str = B
) -> dict[tuple[str, str], PairLinks]:
    return {(first, second): links, (second, first): links}


@pytest.mark.parametrize(
    ("pcie", "expected"),
    [
        (PcieLink.CROSS_CPU, 10),
        (PcieLink.SAME_CPU, 20),
        (PcieLink.HOST_BRIDGE, 30),
        (PcieLink.MULTI_SWITCH, 40),
        (PcieLink.SINGLE_SWITCH, 50),
        (PcieLink.SAME_BOARD, 60),
    ],
)
def test_every_pcie_class_weighs_as_hami_says(pcie: PcieLink, expected: int) -> None:
    scores, asymmetric = pair_scores((A, B), both_ways(PairLinks(pcie)))
    assert scores == (DevicePairScore(A, ((B, expected),)), DevicePairScore(B, ((A, expected),)))
    assert asymmetric == ()


@pytest.mark.parametrize("nvlinks", [1, 2, 4, 12, MAX_NVLINKS])
def test_each_nvlink_adds_100(nvlinks: int) -> None:
    links = PairLinks(PcieLink.SINGLE_SWITCH, nvlinks)
    assert pair_score(links, links) == 50 + 100 * nvlinks
    assert pair_score(PairLinks(None, nvlinks), PairLinks(None, nvlinks)) == 100 * nvlinks


def test_hami_class_names_are_the_wire_words() -> None:
    assert [c.value for c in PcieLink] == [
        "CrossCPU",
        "SameCPU",
        "HostBridge",
        "MultiSwitch",
        "SingleSwitch",
        "SameBoard",
    ]


@pytest.mark.parametrize(
    ("forward", "backward"),
    [
        (PairLinks(PcieLink.SAME_CPU, 4), PairLinks(PcieLink.SAME_CPU, 2)),
        (PairLinks(PcieLink.SAME_CPU, 4), PairLinks(PcieLink.SAME_CPU, 0)),
        (PairLinks(PcieLink.SAME_CPU), PairLinks(PcieLink.CROSS_CPU)),
        (PairLinks(None, 2), PairLinks(PcieLink.SAME_CPU, 2)),
    ],
)
def test_asymmetric_pair_scores_zero_both_ways_and_is_reported(
    forward: PairLinks, backward: PairLinks
) -> None:
    links = {
        (A, B): forward,
        (B, A): backward,
        **both_ways(PairLinks(PcieLink.SAME_BOARD), A, C),
        **both_ways(PairLinks(PcieLink.SAME_BOARD), B, C),
    }
    scores, asymmetric = pair_scores((A, B, C), links)
    by_uuid = {entry.uuid: entry for entry in scores}
    assert by_uuid[A].score_to(B) == by_uuid[B].score_to(A) == 0
    assert by_uuid[A].score_to(C) == by_uuid[C].score_to(B) == 60
    assert asymmetric == (AsymmetricPair(A, B, forward, backward),)
    assert A in asymmetric[0].message()
    assert "NVLink" in asymmetric[0].message()


def test_missing_link_data_scores_zero_without_a_report() -> None:
    one_way = {(A, B): PairLinks(PcieLink.SAME_BOARD, 4)}
    scores, asymmetric = pair_scores((A, B, C), one_way)
    assert asymmetric == ()
    assert scores == (
        DevicePairScore(A, ((B, 0), (C, 0))),
        DevicePairScore(B, ((A, 0), (C, 0))),
        DevicePairScore(C, ((A, 0), (B, 0))),
    )


def test_every_gpu_gets_an_entry_naming_every_peer() -> None:
    scores, _ = pair_scores((A,), {})
    assert scores == (DevicePairScore(A),)
    assert pair_scores((), {}) == ((), ())


@pytest.mark.parametrize("nvlinks", [-1, MAX_NVLINKS + 1, True])
def test_nvlink_count_out_of_range_is_refused(nvlinks: int) -> None:
    with pytest.raises(ValidationError, match="nvlinks"):
        PairLinks(PcieLink.SAME_CPU, nvlinks)


_LINKS = st.builds(
    PairLinks,
    st.one_of(st.none(), st.sampled_from(PcieLink)),
    st.integers(min_value=0, max_value=MAX_NVLINKS),
)
_UUIDS = st.lists(st.sampled_from([f"GPU-{n}" for n in range(6)]), unique=True, max_size=6)


@st.composite
def _tables(draw: st.DrawFn) -> tuple[list[str], dict[tuple[str, str], PairLinks]]:
    gpus = draw(_UUIDS)
    pairs = [(a, b) for a in gpus for b in gpus if a != b]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True) if pairs else st.just([]))
    return gpus, {pair: draw(_LINKS) for pair in chosen}


@given(_tables())
def test_scores_are_symmetric_unless_reported_asymmetric(
    table: tuple[list[str], dict[tuple[str, str], PairLinks]],
) -> None:
    gpus, links = table
    scores, asymmetric = pair_scores(gpus, links)
    by_uuid = {entry.uuid: entry for entry in scores}
    reported = {frozenset((pair.first, pair.second)) for pair in asymmetric}
    for a in gpus:
        assert {peer for peer, _ in by_uuid[a].scores} == set(gpus) - {a}
        for b in gpus:
            if a == b:
                continue
            assert by_uuid[a].score_to(b) == by_uuid[b].score_to(a)
            forward, backward = links.get((a, b)), links.get((b, a))
            if frozenset((a, b)) in reported:
                assert by_uuid[a].score_to(b) == 0
            elif forward is not None and backward is not None:
                assert by_uuid[a].score_to(b) == forward.score


@given(_tables())
def test_scores_survive_the_annotation_codec(
    table: tuple[list[str], dict[tuple[str, str], PairLinks]],
) -> None:
    scores, _ = pair_scores(*table)
    assert decode_pair_scores(encode_pair_scores(scores)) == scores
