"""The extender's last verdict per pending pod: every node's reason, grouped, kept in memory.

kube-scheduler's ``FailedScheduling`` Event carries the moment's message only, and only when no
node fits; the filter's own reasons are gone once it answers.  :class:`Verdicts` keeps, per pod
UID, what the last ``/filter`` of that pod found over **all** the nodes it was given — fitting or
not — as :class:`Verdict`: how many nodes, how many fit, the node chosen, and the refusals
grouped by reason word (:func:`group_reasons`) with their count and a few example nodes.

Bounded: a verdict is dropped when its pod is bound or deleted (the pending-pods watch and the
bound-pods watch say so, :meth:`Verdicts.pod_event`), and at most ``capacity`` pods are kept —
the least recently filtered go first.  A verdict costs a few hundred bytes whatever the fleet
size (counts and at most :data:`EXAMPLES` names per reason).

Only the replica that answered the filter has the verdict: with leader election that is the
leader (docs/gpumap.md says what a follower answers).
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami_kube.objects import PodView
from hami_scheduler.core.reasons import reason_words

__all__ = [
    "DEFAULT_CAPACITY",
    "EXAMPLES",
    "MAX_REASON",
    "ReasonGroup",
    "Verdict",
    "Verdicts",
    "group_reasons",
    "kubernetes_causes",
]

EXAMPLES: Final = 5
"""Example nodes kept per reason."""
MAX_REASON: Final = 200
"""A free-text reason (a vendor's unreadable annotation) is cut to this many characters."""
DEFAULT_CAPACITY: Final = 50_000


@dataclass(frozen=True, slots=True)
class ReasonGroup:
    reason: str
    """A reason word (``CardInsufficientMemory``) or, for free text, the text (bounded)."""
    nodes: int
    examples: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Verdict:
    """One filter of one pod."""

    namespace: str
    name: str
    at: float
    """Unix seconds."""
    nodes: int
    """Nodes the filter was given."""
    fitting: int
    chosen: str | None
    reasons: tuple[ReasonGroup, ...]
    error: str = ""
    """The filter's answer when it could not judge the pod at all (an invalid annotation)."""
    texts: tuple[str, ...] = ()
    """The distinct refusal texts, as sent back in ``FailedNodes``: kube-scheduler's own message
    repeats them, and :func:`kubernetes_causes` takes them out of it."""


def group_reasons(
    failed: Mapping[str, str], *, examples: int = EXAMPLES
) -> tuple[ReasonGroup, ...]:
    """Refused node → reason text, grouped by reason word (a node whose text names two words
    counts under each), most nodes first.

    Many nodes share one text, so each distinct text is split once; example nodes are taken in
    the map's order, and the walk stops as soon as every text has its examples."""
    tally = Counter(failed.values())
    wanted = {text: min(count, examples) for text, count in tally.items()}
    owed = sum(wanted.values())
    picked: dict[str, list[str]] = {text: [] for text in tally}
    if owed:
        for node, text in failed.items():
            names = picked[text]
            if len(names) < wanted[text]:
                names.append(node)
                owed -= 1
                if not owed:
                    break
    groups: dict[str, tuple[int, list[str]]] = {}
    for text, count in tally.items():
        for word in dict.fromkeys(reason_words(text)):
            key = word[:MAX_REASON]
            known, names = groups.get(key, (0, []))
            for name in picked[text]:
                if len(names) < examples and name not in names:
                    names.append(name)
            groups[key] = (known + count, names)
    ordered = sorted(groups.items(), key=lambda item: (-item[1][0], item[0]))
    return tuple(ReasonGroup(word, count, tuple(names)) for word, (count, names) in ordered)


class Verdicts:
    """Pod UID → its last :class:`Verdict` (see the module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = max(1, capacity)
        self._by_uid: OrderedDict[str, Verdict] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_uid)

    def get(self, uid: str) -> Verdict | None:
        return self._by_uid.get(uid)

    def record(self, uid: str, verdict: Verdict) -> None:
        if not uid:
            return
        by_uid = self._by_uid
        by_uid.pop(uid, None)
        by_uid[uid] = verdict
        while len(by_uid) > self.capacity:
            by_uid.popitem(last=False)

    def drop(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    # A cache listener (the bound-pods watch): a pod seen bound has no pending verdict.
    def pod_event(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        del deleted
        self.drop(PodView(obj).uid)

    def node_event(self, obj: Mapping[str, Any], *, deleted: bool) -> None:
        del obj, deleted


_FIT_ERROR = re.compile(r"^0/(?P<total>\d+) nodes are available:(?P<body>.*?)\.?$", re.S)
_PREEMPTION = " preemption: "


def kubernetes_causes(message: str, extender_texts: Iterable[str]) -> tuple[list[str], str]:
    """kube-scheduler's ``FailedScheduling`` text without what this extender said: the
    Kubernetes-side causes (``["1 Insufficient cpu", ...]``) and the preemption part.

    ``FitError.Error`` writes ``0/N nodes are available: <count> <reason>, ... .`` over every
    node's reasons, this extender's ``FailedNodes`` texts among them, then ``preemption: ...``.
    An extender text may itself hold ``", "`` (``"1/2 A, 1/2 B"``), so the histogram cannot be
    split blindly: each ``<count> <text>`` this extender sent is taken out first, and what is
    left is split.  A message of another shape is returned whole, as one cause."""
    head, _, preemption = message.partition(_PREEMPTION)
    matched = _FIT_ERROR.match(head.strip())
    if matched is None:
        return ([head.strip()] if head.strip() else []), preemption.strip()
    body = " " + matched.group("body").strip()
    for text in sorted(set(extender_texts), key=len, reverse=True):
        if text:
            body = re.sub(rf"(^|,) \d+ {re.escape(text)}(?=,|$)", "", body)
    causes = [part.strip() for part in body.split(",") if part.strip()]
    return causes, preemption.strip().removesuffix(".")
