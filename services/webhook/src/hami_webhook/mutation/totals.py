"""Capacity totals in the pod (``--write-capacity-totals``): each container's NVIDIA request
written under ``hami.io/nvidia-memory`` and ``hami.io/nvidia-cores`` so that kube-scheduler's
in-tree filters, its default preemption and the cluster-autoscaler can count it
(:mod:`hami_protocol.totals` has the rule and the units).

Applied to the containers as the webhook leaves them (after the NVIDIA defaults: the default
count, cores 100 for a whole card), init containers too:

* a container with an NVIDIA request gets both names in ``limits`` and ``requests``, equal (the
  API server refuses an extended resource whose request differs from its limit), zeros included,
  so every such container says what it counts;
* a container without one loses the two names if it carries them.

Values already there are overwritten, not refused: they are derived, like the defaults the
webhook injects, and a copied manifest or a hand-written guess must not make kube-scheduler
count something the extender does not (or let a pod hold in-tree capacity without devices).
Pure.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from hami_protocol.totals import TOTALS_RESOURCES, Totals, container_totals
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import set_quantity

__all__ = ["write_totals"]

_SECTIONS = ("limits", "requests")


def _containers(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for key in ("initContainers", "containers"):
        for ctr in spec.get(key) or ():
            if isinstance(ctr, dict):
                yield ctr


def _asks(ctr: dict[str, Any], vendor: Vendor) -> bool:
    resources = ctr.get("resources")
    if not isinstance(resources, dict):
        return False
    return any(
        isinstance(values, dict) and vendor.count_resource in values
        for values in (resources.get(section) for section in _SECTIONS)
    )


def _set(ctr: dict[str, Any], totals: Totals) -> None:
    for section in _SECTIONS:
        for name, text in totals.resources().items():
            set_quantity(ctr, section, name, text)


def _drop(ctr: dict[str, Any]) -> None:
    resources = ctr.get("resources")
    if not isinstance(resources, dict):
        return
    for section in _SECTIONS:
        values = resources.get(section)
        if isinstance(values, dict) and any(name in values for name in TOTALS_RESOURCES):
            resources[section] = {k: v for k, v in values.items() if k not in TOTALS_RESOURCES}


def write_totals(spec: dict[str, Any], vendor: Vendor | None) -> None:
    """Write (or remove) the totals of every container of ``spec`` in place; ``vendor`` is the
    NVIDIA row (None: no NVIDIA configured, every container loses the names).

    Raises :class:`~hami_protocol.errors.RequestError` for a container whose request does not
    parse (the caller has already refused such a pod).
    """
    for ctr in _containers(spec):
        if vendor is not None and _asks(ctr, vendor):
            _set(ctr, container_totals(ctr, vendor))
        else:
            _drop(ctr)
