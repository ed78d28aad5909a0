"""kube-scheduler's per-node filter statuses and the ``FitError`` text built from them.

From ``k8s.io/kube-scheduler/framework`` (``Code``, ``Status``) and
``pkg/scheduler/framework/types.go`` (``NodeToStatus``, ``FitError.Error``).  A node's status says
*why* it was rejected and whether preemption might help:

- ``UNSCHEDULABLE``: removing pods may make room (the only code preemption looks at);
- ``UNRESOLVABLE`` (``UnschedulableAndUnresolvable``): no preemption can help (taints, affinity,
  a request larger than the whole node, an extender's ``FailedAndUnresolvableNodes``, a node an
  extender left out without naming it);
- ``ERROR``: something failed while checking (preemption's own errors).

A node without a recorded status reads the diagnosis' *absent* status: UnschedulableAndUnresolvable
with no reason while filtering, ``Preemption is not helpful for scheduling`` in preemption's own
``FitError``.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "PREEMPTION_NOT_HELPFUL",
    "Code",
    "NodeStatus",
    "fit_error_message",
    "unresolvable",
    "unschedulable",
]

PREEMPTION_NOT_HELPFUL = "Preemption is not helpful for scheduling"


class Code(enum.Enum):
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """One node's rejection: its code and reasons, in the order the checks gave them."""

    code: Code
    reasons: tuple[str, ...]

    @property
    def message(self) -> str:
        """``Status.Message()``: the reasons joined by ``, ``."""
        return ", ".join(self.reasons)

    def with_reason(self, reason: str, *, code: Code | None = None) -> NodeStatus:
        """``AppendReason`` (and a new code when given, as an unresolvable extender verdict)."""
        return NodeStatus(code or self.code, (*self.reasons, reason))


def unschedulable(*reasons: str) -> NodeStatus:
    return NodeStatus(Code.UNSCHEDULABLE, reasons)


def unresolvable(*reasons: str) -> NodeStatus:
    return NodeStatus(Code.UNRESOLVABLE, reasons)


def fit_error_message(
    num_nodes: int,
    statuses: Mapping[str, NodeStatus | Sequence[str]],
    *,
    absent_reasons: Sequence[str] = (),
    post_filter: str = "",
) -> str:
    """``FitError.Error``: ``0/N nodes are available: <histogram>.`` then `` <post filter>.``.

    Reasons are counted over nodes and the ``"<count> <reason>"`` strings sorted as strings;
    the nodes without a status count ``absent_reasons`` each.  ``statuses`` values may be plain
    reason lists."""
    histogram: Counter[str] = Counter()
    for status in statuses.values():
        histogram.update(status.reasons if isinstance(status, NodeStatus) else status)
    absent = num_nodes - len(statuses)
    if absent > 0:
        for reason in absent_reasons:
            histogram[reason] += absent
    message = f"0/{num_nodes} nodes are available:"
    parts = sorted(f"{count} {reason}" for reason, count in histogram.items())
    if parts:
        message += " " + ", ".join(parts) + "."
    if post_filter:
        message += f" {post_filter}."
    return message
