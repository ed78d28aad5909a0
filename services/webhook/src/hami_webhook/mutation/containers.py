"""The pass over every container of a pod (rule 4 of :mod:`hami_webhook.mutation.admit`), pure.

:func:`mutate_containers` applies NVIDIA's defaults and every other vendor's rule to each
unprivileged container, init containers first, and returns a :class:`ContainerScan`: which
devices the pod asks for, the privileged container to name, and what the vendor rules ask of the
pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_kube.objects import ContainerView
from hami_protocol.topology.layout import RDMA_RESOURCE
from hami_protocol.vendor.table import NVIDIA
from hami_webhook.mutation.edits import mapping, sections
from hami_webhook.mutation.nvidia import check_percentage, mutate_nvidia
from hami_webhook.mutation.patch import copy_json
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.mutation.vendors.apply import mutate_container
from hami_webhook.mutation.vendors.rule_set import PodEdits

__all__ = ["ContainerScan", "mutate_containers"]


@dataclass(slots=True)
class ContainerScan:
    """What the pass over the containers found."""

    has_devices: bool = False
    has_nvidia: bool = False
    has_other: bool = False
    """Devices other than NVIDIA GPUs (other vendors, RDMA NICs): they keep our scheduler."""
    privileged: str | None = None
    """The privileged container to name: the first one asking for devices, else the first."""
    privileged_asks: bool = False
    edits: PodEdits = field(default_factory=PodEdits)
    """What unprivileged containers' vendor rules ask of the pod."""


def _privileged(ctr: Mapping[str, Any]) -> bool:
    return mapping(ctr.get("securityContext")).get("privileged") is True


def mutate_containers(
    spec: dict[str, Any], rules: MutationRules, annotations: Mapping[str, str]
) -> ContainerScan:
    """Edit ``spec``'s container lists in place (copies of them: see ``admit_pod``)."""
    scan = ContainerScan()
    nvidia = rules.nvidia_row
    others = tuple(v for v in rules.vendors if v.common_word != NVIDIA)
    for key in ("initContainers", "containers"):
        for ctr in spec.get(key) or ():
            if not isinstance(ctr, dict):
                continue  # a null entry: nothing to edit (the request decoder read it as empty)
            view = ContainerView(ctr)
            check_percentage(view, rules.nvidia)
            privileged = _privileged(ctr)
            # A privileged container is left as it is, but what it asks for still counts.
            target = copy_json(ctr) if privileged else ctr
            found_nvidia = nvidia is not None and mutate_nvidia(target, rules.nvidia, nvidia)
            # A privileged container's vendor rules still run (a refusal is a refusal), but what
            # they would ask of the pod is dropped with the container's edits.
            edits = PodEdits() if privileged else scan.edits
            found_vendor = mutate_container(target, annotations, rules.rule_set, edits)
            # RDMA NICs (koordinator.sh/rdma) are placed by our scheduler together with GPUs.
            limits, requests = sections(view)
            found_other = (
                found_vendor
                or any(
                    v.count_resource in limits
                    or (not v.limits_only and v.count_resource in requests)
                    for v in others
                )
                or RDMA_RESOURCE in limits
                or RDMA_RESOURCE in requests
            )
            found = found_nvidia or found_other
            scan.has_nvidia |= found_nvidia and not privileged
            scan.has_other |= found_other
            scan.has_devices |= found
            if privileged and (scan.privileged is None or (found and not scan.privileged_asks)):
                scan.privileged = view.name
                scan.privileged_asks = found
    return scan
