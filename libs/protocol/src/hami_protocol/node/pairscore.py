"""GPU pair scores (``hami.io/node-nvidia-score``): how well each pair of GPUs is connected.

Value: a JSON array ``[{"uuid": "GPU-a", "score": {"GPU-b": 200, ...}}, ...]`` with Go
``omitempty`` semantics.  The topology-aware GPU policy sums these to pick well-connected sets.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hami_protocol._goparse import (
    INT64_MAX,
    INT64_MIN,
    JSONObject,
    JSONReader,
    check_int,
    check_text,
    dump_go_json,
    go_json_int,
)
from hami_protocol.keys import NVIDIA_SCORE

__all__ = ["DevicePairScore", "decode_pair_scores", "encode_pair_scores"]


@dataclass(frozen=True, slots=True)
class DevicePairScore:
    """Link quality from device ``uuid`` to each peer, as ``(peer, score)`` sorted by peer."""

    uuid: str
    scores: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        # One canonical form (sorted, last duplicate wins) so equal maps compare equal.
        object.__setattr__(self, "scores", tuple(sorted(dict(self.scores).items())))

    def score_to(self, peer: str) -> int:
        """The score towards ``peer``; 0 when no link is reported."""
        return dict(self.scores).get(peer, 0)


def decode_pair_scores(value: str, *, key: str = NVIDIA_SCORE) -> tuple[DevicePairScore, ...]:
    """Decode the annotation.  ``null`` entries and fields read as empty, as Go reads them."""
    reader = JSONReader(key, value)
    result: list[DevicePairScore] = []
    for position, item in enumerate(reader.array_items(reader.load(), "document")):
        where = f"entry {position}"
        if item is None:
            result.append(DevicePairScore(uuid=""))
            continue
        fields = reader.obj_fields(item, where, ("uuid", "score"))
        raw_scores = fields.get("score")
        scores: dict[str, int] = {}
        if raw_scores is not None:
            if not isinstance(raw_scores, JSONObject):
                raise reader.fail(where, "score must be a JSON object")
            for peer, raw in raw_scores.pairs:
                parsed = 0 if raw is None else go_json_int(raw, low=INT64_MIN, high=INT64_MAX)
                if parsed is None:
                    raise reader.fail(where, f"score for {peer!r} must be an integer")
                scores[peer] = parsed
        uuid = reader.text(fields, "uuid", where)
        result.append(DevicePairScore(uuid=uuid, scores=tuple(scores.items())))
    return tuple(result)


def encode_pair_scores(scores: Iterable[DevicePairScore]) -> str:
    """The canonical value: peers sorted, empty ``uuid``/``score`` omitted, compact like Go."""
    documents: list[dict[str, object]] = []
    for position, entry in enumerate(scores):
        where = f"entry {position}"
        check_text(where, "uuid", entry.uuid)
        document: dict[str, object] = {}
        if entry.uuid:
            document["uuid"] = entry.uuid
        for peer, score in entry.scores:
            check_text(where, "peer", peer)
            check_int(where, "score", score, INT64_MIN, INT64_MAX)
        if entry.scores:
            document["score"] = dict(entry.scores)
        documents.append(document)
    return dump_go_json(documents)
