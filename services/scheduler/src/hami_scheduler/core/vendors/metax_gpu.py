"""MetaX whole GPUs (``Metax-GPU``): the standard loop plus a custom filter, and a node score
from the plugin's topology annotations.

Fit: :mod:`.standard` (requests ask 100 percent of memory and 100 cores), with the custom filter
``CardNotFoundCustomFilterRule`` refusing a GPU other than the one every earlier container of
the pod was given (:attr:`VendorContext.pod_uuids <.context.VendorContext.pod_uuids>`).

Node score (:func:`score`): the plugin publishes, per total number ``n`` of GPUs a pod asks,
the interconnect *loss* (``metax-tech.com/gpu.topology.losses``) and *score*
(``metax-tech.com/gpu.topology.scores``) of its best placement; binpack scores
``2000 − losses[n]``, spread ``2000 − scores[n]``; no entry for ``n`` (or another policy)
scores 0.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core.fit import FitContext, FitResult
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.vendors.standard import standard_fit

__all__ = [
    "LOSSES_ANNOTATION",
    "METAX_GPU",
    "SCORES_ANNOTATION",
    "fit",
    "on_pod_device",
    "score",
]

METAX_GPU: Final = "Metax-GPU"
LOSSES_ANNOTATION: Final = "metax-tech.com/gpu.topology.losses"
SCORES_ANNOTATION: Final = "metax-tech.com/gpu.topology.scores"
_BASE: Final = 2000.0


def on_pod_device(dev: DeviceUsage, pod_uuids: Sequence[str]) -> bool:
    """The custom filter: ``dev`` is the device of every earlier container (or there is none)."""
    return all(uuid == dev.uuid for uuid in pod_uuids)


def fit(
    devices: Sequence[DeviceUsage], request: ContainerDeviceRequest, ctx: FitContext
) -> FitResult:
    """The standard loop with the same-device custom filter."""
    pod_uuids = ctx.vendor.pod_uuids
    if not pod_uuids:
        return standard_fit(devices, request, ctx)
    return standard_fit(
        devices, request, ctx, custom_filter=lambda dev: on_pod_device(dev, pod_uuids)
    )


def score(
    node_policy: str,
    requested: int,
    losses: Mapping[int, float],
    scores: Mapping[int, float],
) -> float:
    """The MetaX node score of a pod asking ``requested`` GPUs in all, under ``node_policy``
    (``binpack``/``spread``), from the node's decoded loss and score maps."""
    table = {"binpack": losses, "spread": scores}.get(node_policy)
    if table is None or requested not in table:
        return 0.0
    return _BASE - table[requested]
