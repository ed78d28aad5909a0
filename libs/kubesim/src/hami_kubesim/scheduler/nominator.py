"""kube-scheduler's pod nominator: which pending pods wait for room on which node.

From ``pkg/scheduler/backend/queue/nominator.go``.  A pending pod is *nominated* to a node when
its preemption picked that node (the cycle records it at once) or when its
``status.nominatedNodeName`` says so (the watch).  The nomination ends when the pod is bound (or
assumed), deleted, or its status loses the field; an update whose old and new versions both lack
the field keeps an in-memory nomination the status write has not reached yet
(``updateNominatedPodUnlocked``).

Nominated pods of equal or higher priority count on their node for every other pod's in-tree
filters (``RunFilterPluginsWithNominatedPods``), so a lower-priority pod cannot take the room a
preemption freed.  Plain data, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hami_kube.objects import PodView

__all__ = ["Nomination", "Nominator"]


@dataclass(frozen=True, slots=True)
class Nomination:
    """``pod`` (its latest version) waits for room on ``node``; ``requests`` as the filters
    count them."""

    node: str
    pod: PodView
    requests: Mapping[str, int]


class Nominator:
    """Nominations by pod key."""

    def __init__(self) -> None:
        self._by_key: dict[str, Nomination] = {}

    def __len__(self) -> int:
        return len(self._by_key)

    def node_of(self, key: str) -> str:
        """The node ``key`` is nominated to (``""``: none)."""
        nomination = self._by_key.get(key)
        return nomination.node if nomination else ""

    def nominations(self) -> dict[str, str]:
        """Pod key -> node."""
        return {key: n.node for key, n in self._by_key.items()}

    def nominate(self, key: str, node: str, pod: PodView, requests: Mapping[str, int]) -> None:
        """``AddNominatedPod`` with ``ModeOverride``: ``node`` empty clears the nomination."""
        if node:
            self._by_key[key] = Nomination(node, pod, dict(requests))
        else:
            self._by_key.pop(key, None)

    def delete(self, key: str) -> None:
        """The pod is bound, assumed or gone."""
        self._by_key.pop(key, None)

    def pod_updated(
        self, key: str, old: PodView | None, new: PodView, requests: Mapping[str, int]
    ) -> None:
        """A pending pod was added or changed (the caller deletes bound and finished ones)."""
        node = new.nominated_node_name
        if not node and (old is None or not old.nominated_node_name):
            node = self.node_of(key)  # an in-memory nomination its status has yet to show
        self.nominate(key, node, new, requests)

    def for_node(self, node: str) -> list[Nomination]:
        """The nominations to ``node``, in the order they were made."""
        return [n for n in self._by_key.values() if n.node == node]

    def reserving_for(self, pod: PodView, node: str) -> list[Nomination]:
        """``addGENominatedPods``: the other pods nominated to ``node`` whose priority is at least
        ``pod``'s; ``pod`` must leave their room to them."""
        return [
            n
            for n in self.for_node(node)
            if n.pod.priority >= pod.priority and n.pod.uid != pod.uid
        ]
