"""Who evicted whom: the preemptions a snapshot's Events record.

A victim is gone once its preemption finished, so only Events are left to say what happened:

* kube-scheduler's ``Preempted`` on the victim (kubesim's scheduling loop writes it as
  ``prepareCandidate`` does): ``Preempted by pod <preemptor uid> on node <node>``;
* the extender's ``PreemptedForGPU`` on the victim (``hami_scheduler.preempt_events``):
  ``Evicted by <ns>/<preemptor> (priority X) on node <node> to free <uuid>[,...]: <MiB> MiB,
  <cores>% cores``.

The victim is named by the Events' ``involvedObject`` (namespace and name); the preemptor by
the pod of that UID in the snapshot, else by the extender's message. Pure: reads a
:class:`~hami_kubesim.stack.state.ClusterState`, parses message texts, never raises on odd ones
(an unreadable message reads as absent).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from hami_kube.objects import PodView, key_for
from hami_kubesim.stack.state import ClusterState, pod_key

__all__ = ["PREEMPTED", "PREEMPTED_FOR_GPU", "Preemption", "preemptions"]

PREEMPTED: Final = "Preempted"
PREEMPTED_FOR_GPU: Final = "PreemptedForGPU"
_SCHEDULER_NOTE: Final = re.compile(r"^Preempted by pod (?P<uid>\S+) on node (?P<node>\S+)$")
_EXTENDER_NOTE: Final = re.compile(
    r"^Evicted by (?P<by>\S+) \(priority -?\d+\) on node (?P<node>\S+) to free (?P<frees>.+)$"
)


@dataclass(frozen=True, slots=True)
class Preemption:
    """One victim's eviction, as its Events tell it."""

    victim: str
    """``namespace/name``."""
    preemptor: str
    """``namespace/name`` (``pod <uid>`` when neither the pod nor the extender names it)."""
    preemptor_uid: str
    node: str
    frees: str = ""
    """What the victim held, from the extender's Event: ``<uuid>[,...]: <MiB> MiB, <cores>%
    cores`` (empty when the extender recorded none)."""
    extender_preemptor: str = ""
    """The preemptor the extender's Event names (``namespace/name``; empty without one)."""


def _victim_key(event: Mapping[str, Any]) -> str | None:
    involved = event.get("involvedObject")
    if not isinstance(involved, Mapping) or involved.get("kind") not in (None, "Pod"):
        return None
    name = involved.get("name")
    return key_for(str(involved.get("namespace") or "default"), str(name)) if name else None


def preemptions(state: ClusterState) -> tuple[Preemption, ...]:
    """Every victim with a ``Preempted`` Event, oldest first, joined with the extender's
    ``PreemptedForGPU`` on the same victim."""
    by_uid = {PodView(p).uid: pod_key(p) for p in state.pods if PodView(p).uid}
    gpu_notes: dict[str, re.Match[str]] = {}
    found: list[tuple[str, str, re.Match[str]]] = []
    for event in state.events:
        victim = _victim_key(event)
        message = str(event.get("message") or "")
        if victim is None:
            continue
        if event.get("reason") == PREEMPTED_FOR_GPU and (note := _EXTENDER_NOTE.match(message)):
            gpu_notes[victim] = note
        elif event.get("reason") == PREEMPTED and (note := _SCHEDULER_NOTE.match(message)):
            when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
            found.append((when, victim, note))
    result = []
    for _, victim, note in sorted(found, key=lambda item: item[0]):
        uid = note["uid"]
        gpu = gpu_notes.get(victim)
        by_extender = gpu["by"] if gpu else ""
        result.append(
            Preemption(
                victim=victim,
                preemptor=by_uid.get(uid) or by_extender or f"pod {uid}",
                preemptor_uid=uid,
                node=note["node"],
                frees=gpu["frees"] if gpu else "",
                extender_preemptor=by_extender,
            )
        )
    return tuple(result)
