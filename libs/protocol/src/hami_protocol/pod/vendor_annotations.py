"""The pod annotations vendor device plugins read besides HAMi's device lists.

HAMi's scheduler writes, with a placement, values each vendor's own plugin consumes
(hami-extensions §1.2 ``P``):

* Cambricon (``MLU``): ``CAMBRICON_DSMLU_ASSIGNED`` = ``false`` and ``CAMBRICON_DSMLU_PROFILE`` =
  ``<index>_<cores>_<memory / 256>`` of the first container's first MLU;
* Moore Threads: ``mthreads.com/gpu-index`` (device indices, comma-joined),
  ``mthreads.com/predicate-time`` (unix ns) and ``mthreads.com/predicate-node``;
* Ascend (``Ascend…`` words): ``huawei.com/<word>`` = JSON ``[{"UUID","temp","memory","core"}]``
  per device of the pod (``temp``: template name, empty for a whole card or hami-core) and
  ``predicate-time`` (unix s);
* Kunlun whole XPUs (``kunlun``): ``BAIDU_COM_DEVICE_IDX`` = comma-joined device indices.

A device's index is the number after the last ``-`` of its id: HAMi's ids for capacity-synthesised
devices end so (``<node>-cambricon-mlu-3``), and its builders read the index the same way; an id
without one reads as index 0.

:func:`vendor_pod_annotations` is the one entry point: ``(word, pod devices of that word, node,
unix seconds) → annotations`` (empty for vendors that write nothing more).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from hami_protocol.pod.devices import ContainerDevice, ContainerDevices

__all__ = [
    "ASCEND_PREDICATE_TIME",
    "CAMBRICON_DSMLU_ASSIGNED",
    "CAMBRICON_DSMLU_PROFILE",
    "KUNLUN_DEVICE_IDX",
    "MTHREADS_GPU_INDEX",
    "MTHREADS_PREDICATE_NODE",
    "MTHREADS_PREDICATE_TIME",
    "ascend_annotations",
    "cambricon_annotations",
    "device_index",
    "kunlun_annotations",
    "mthreads_annotations",
    "vendor_pod_annotations",
]

CAMBRICON_DSMLU_ASSIGNED: Final = "CAMBRICON_DSMLU_ASSIGNED"
CAMBRICON_DSMLU_PROFILE: Final = "CAMBRICON_DSMLU_PROFILE"
CAMBRICON_MEMORY_UNIT_MIB: Final = 256
MTHREADS_GPU_INDEX: Final = "mthreads.com/gpu-index"
MTHREADS_PREDICATE_TIME: Final = "mthreads.com/predicate-time"
MTHREADS_PREDICATE_NODE: Final = "mthreads.com/predicate-node"
ASCEND_PREDICATE_TIME: Final = "predicate-time"
ASCEND_RESOURCE_PREFIX: Final = "huawei.com/"
KUNLUN_DEVICE_IDX: Final = "BAIDU_COM_DEVICE_IDX"

_NS: Final = 1_000_000_000

Builder = Callable[[str, Sequence[ContainerDevices], str, int], dict[str, str]]


def device_index(uuid: str) -> int:
    """The index HAMi reads from a device id: the number after its last ``-`` (else 0)."""
    tail = uuid.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _devices(pod: Sequence[ContainerDevices]) -> list[ContainerDevice]:
    return [device for container in pod for device in container]


def _indices(pod: Sequence[ContainerDevices]) -> str:
    return ",".join(str(device_index(device.uuid)) for device in _devices(pod))


def cambricon_annotations(
    word: str, pod: Sequence[ContainerDevices], node: str, now_unix: int
) -> dict[str, str]:
    devices = _devices(pod)
    if not devices:
        return {}
    first = devices[0]
    profile = (
        f"{device_index(first.uuid)}_{first.usedcores}_{first.usedmem // CAMBRICON_MEMORY_UNIT_MIB}"
    )
    return {CAMBRICON_DSMLU_ASSIGNED: "false", CAMBRICON_DSMLU_PROFILE: profile}


def mthreads_annotations(
    word: str, pod: Sequence[ContainerDevices], node: str, now_unix: int
) -> dict[str, str]:
    if not _devices(pod):
        return {}
    return {
        MTHREADS_GPU_INDEX: _indices(pod),
        MTHREADS_PREDICATE_TIME: str(now_unix * _NS),
        MTHREADS_PREDICATE_NODE: node,
    }


def ascend_annotations(
    word: str, pod: Sequence[ContainerDevices], node: str, now_unix: int
) -> dict[str, str]:
    devices = _devices(pod)
    if not devices:
        return {}
    record = [
        {"UUID": d.uuid, "temp": "", "memory": d.usedmem, "core": d.usedcores} for d in devices
    ]
    return {
        f"{ASCEND_RESOURCE_PREFIX}{word}": json.dumps(record, separators=(",", ":")),
        ASCEND_PREDICATE_TIME: str(now_unix),
    }


def kunlun_annotations(
    word: str, pod: Sequence[ContainerDevices], node: str, now_unix: int
) -> dict[str, str]:
    return {KUNLUN_DEVICE_IDX: _indices(pod)} if _devices(pod) else {}


_BY_WORD: Final[Mapping[str, Builder]] = {
    "MLU": cambricon_annotations,
    "Mthreads": mthreads_annotations,
    "kunlun": kunlun_annotations,
}
_BY_PREFIX: Final[tuple[tuple[str, Builder], ...]] = (("Ascend", ascend_annotations),)


def vendor_pod_annotations(
    word: str, pod: Sequence[ContainerDevices], *, node: str, now_unix: int
) -> dict[str, str]:
    """The annotations vendor ``word``'s plugin reads for the pod's devices (module doc)."""
    builder = _BY_WORD.get(word)
    if builder is None:
        builder = next((b for prefix, b in _BY_PREFIX if word.startswith(prefix)), None)
    return {} if builder is None else builder(word, pod, node, now_unix)
