"""Pure: what one plugin decides for one pod (:class:`AllocationDecision`), the decision of a
plugin that serves its containers from one to-allocate list of the pod (:func:`list_decision`),
and what a plugin's preference is asked from (:class:`PreferredRequest`, one container request of
the kubelet's ``GetPreferredAllocation``).

:class:`~hami_deviceplugin.allocation.flow.PodAllocationFlow` asks a plugin for a decision once the
pod is identified, and again after a write conflict; it commits the decision's writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from hami_deviceplugin.allocation.entries import ListPlan

__all__ = ["AllocationDecision", "PreferredRequest", "list_decision"]

R = TypeVar("R")
G = TypeVar("G", bound="_Grant")


@dataclass(frozen=True, slots=True)
class PreferredRequest:
    """One container request of ``GetPreferredAllocation``."""

    available: tuple[str, ...]
    must_include: tuple[str, ...]
    size: int


@dataclass(frozen=True, slots=True)
class AllocationDecision(Generic[R]):
    """What one plugin decided for one pod: the answer and the annotations it consumes."""

    result: R
    writes: Mapping[str, str]
    done: bool
    summary: Mapping[str, object] = field(default_factory=dict)
    """Log fields describing the answer."""


class _Grant(Protocol):
    @property
    def container_name(self) -> str: ...


def list_decision(
    plan: ListPlan[G], *, key: str, **summary: object
) -> AllocationDecision[tuple[G, ...]]:
    """The decision of a plugin that serves containers from the pod's ``key`` list: answer with
    ``plan``'s grants, write the rest of the list; ``summary`` adds log fields to the containers'
    names."""
    return AllocationDecision(
        result=plan.grants,
        writes={key: plan.remaining},
        done=plan.done,
        summary={"containers": [grant.container_name for grant in plan.grants], **summary},
    )
