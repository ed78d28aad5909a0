"""The vendor facts vendor fits read, from a node's annotations and registrations and from a
pod's annotations (:mod:`hami_scheduler.core.vendors.context`).

* :func:`node_vendor_facts` — per node, rebuilt with its layout: ``hami-vnpu-core``
  (``"true"``/``"false"``; anything else counts as absent), the Enflame DRS profiles of its
  ``enflame.com/gcu-drs-capacity`` devices, MetaX's ``metax-tech.com/gpu.topology.losses`` and
  ``.scores`` (JSON objects: GPUs asked → number).  A topology map that does not decode scores
  nothing and is named in :func:`vendor_note_problems` (reported like a bad annotation).
* :func:`pod_vendor_facts` — per pod, read only for pods asking Ascend or MetaX sGPU devices.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Final

from hami_protocol import keys
from hami_protocol.config.device import DeviceConfig
from hami_protocol.vendor.annotations import drs_profiles
from hami_protocol.vendor.table import ENFLAME_DRS, METAX_SGPU
from hami_scheduler.cache.nodes import NodeFacts
from hami_scheduler.core.vendors.context import (
    NO_NODE_FACTS,
    NO_POD_FACTS,
    DrsProfile,
    NodeVendorFacts,
    VendorPodFacts,
)

__all__ = [
    "node_vendor_facts",
    "pod_vendor_facts",
    "vendor_note_problems",
]

_ASCEND_PREFIX: Final = "Ascend"
_TRUE: Final = ("true", "True", "TRUE", "1")
_FALSE: Final = ("false", "False", "FALSE", "0")


def _topology_map(key: str, raw: str) -> Mapping[int, float]:
    """A MetaX topology map; ``ValueError`` naming ``key`` when it is not ``{"<n>": number}``."""
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"node annotation {key} is invalid: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ValueError(f"node annotation {key} is invalid: expected a JSON object")
    table: dict[int, float] = {}
    for name, value in document.items():
        try:
            count = int(name)
        except ValueError:
            raise ValueError(
                f"node annotation {key} is invalid: key {name!r} is not a device count"
            ) from None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise ValueError(f"node annotation {key} is invalid: {name!r} is not a number")
        table[count] = float(value)
    return MappingProxyType(table)


def vendor_note_problems(facts: NodeFacts) -> list[tuple[str, str, str]]:
    """``(key, problem, raw)`` for each vendor node annotation of ``facts`` that does not decode."""
    problems: list[tuple[str, str, str]] = []
    for key in (keys.METAX_GPU_TOPOLOGY_LOSSES, keys.METAX_GPU_TOPOLOGY_SCORES):
        raw = facts.note(key)
        if raw is None:
            continue
        try:
            _topology_map(key, raw)
        except ValueError as exc:
            problems.append((key, str(exc), raw))
    return problems


def _safe_map(facts: NodeFacts, key: str) -> Mapping[int, float]:
    raw = facts.note(key)
    if raw is None:
        return MappingProxyType({})
    try:
        return _topology_map(key, raw)
    except ValueError:
        return MappingProxyType({})


def _drs(facts: NodeFacts) -> tuple[DrsProfile, ...]:
    registration = facts.registration(ENFLAME_DRS)
    if registration is None or not registration.devices:
        return ()
    first = registration.devices[0].custom_info
    profiles = first.get("profiles")
    max_slice = first.get("maxSlice")
    if not isinstance(profiles, Mapping) or not isinstance(max_slice, int):
        return ()
    return tuple(
        DrsProfile(p.name, p.id, p.slices, p.memory_gb)
        for p in drs_profiles({str(k): str(v) for k, v in profiles.items()}, max_slice)
    )


def node_vendor_facts(facts: NodeFacts) -> NodeVendorFacts:
    """The node's vendor facts (module doc); :data:`NO_NODE_FACTS` for a node with none."""
    hami_core_raw = facts.note(keys.ASCEND_NODE_VNPU_CORE)
    hami_core = True if hami_core_raw in _TRUE else False if hami_core_raw in _FALSE else None
    drs = _drs(facts)
    losses = _safe_map(facts, keys.METAX_GPU_TOPOLOGY_LOSSES)
    scores = _safe_map(facts, keys.METAX_GPU_TOPOLOGY_SCORES)
    if hami_core is None and not drs and not losses and not scores:
        return NO_NODE_FACTS
    return NodeVendorFacts(
        ascend_hami_core=hami_core, drs_profiles=drs, metax_losses=losses, metax_scores=scores
    )


def pod_vendor_facts(
    annotations: Mapping[str, str], words: Collection[str], config: DeviceConfig
) -> VendorPodFacts:
    """The pod's vendor facts for the vendors it asks (``words``); :data:`NO_POD_FACTS` when
    it asks none that reads them."""
    ascend = any(word.startswith(_ASCEND_PREFIX) for word in words)
    sgpu = METAX_SGPU in words
    if not ascend and not sgpu:
        return NO_POD_FACTS
    aware = annotations.get(keys.METAX_SGPU_TOPOLOGY_AWARE)
    return VendorPodFacts(
        ascend_vnpu_mode=annotations.get(keys.ASCEND_VNPU_MODE, "") if ascend else "",
        ascend_hami_core_default=config.vnpus.hami_vnpu_core,
        sgpu_qos=annotations.get(keys.METAX_SGPU_QOS_POLICY, "") if sgpu else "",
        sgpu_app_class=annotations.get(keys.METAX_SGPU_APP_CLASS, "") if sgpu else "",
        sgpu_topology_aware=(
            sgpu
            and (aware.strip().lower() == "true" if aware else config.metax.sgpu_topology_aware)
        ),
    )
