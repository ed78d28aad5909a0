"""Pure: the GPUs a node registers, the ``hami.io/node-nvidia-register`` value, and which node
annotations need writing (the RDMA register included).

Per GPU (HAMi's ``plugin/register.go``): ``id`` = UUID, ``index`` = NVML index, ``count`` =
split count, ``devmem`` = ⌊MiB × memory scaling⌋, ``devcore`` = int(core scaling × 100),
``type`` = the model prefixed with ``NVIDIA-`` unless it already starts with ``NVIDIA``, ``numa``,
``health``, ``mode`` = the operating mode, plus our optional topology fields (PCI bus id, PCIe
switch and root; left out when unknown, ignored by HAMi).  GPUs listed in ``filterdevices`` (by
UUID or index) are not registered at all, nor advertised to the kubelet.

``operatingmode: mig``: a GPU registers ``mode: "mig"``, its unscaled MiB as ``devmem``,
``devcore`` 100, ``count`` = the most instances any of its allowed profiles can have (7 on an
A100), and ``migProfiles`` = the profiles ``nvidia.migProfileAllowlist`` allows on its model
(:func:`~hami_protocol.config.mig_allowlist.allowed_mig_profiles`) that the GPU offers, each with
``core`` = ⌈profile SMs × 100 / GPU SMs⌉.  A GPU with no such profile (or not MIG-capable) is not
registered.  ``operatingmode: mps`` registers ``mode: "mps"`` and is otherwise hami-core (HAMi
has no working MPS path; the scheduler and Allocate treat such GPUs as hami-core).

Writes: the register value when it differs from the node's; the handshake ``Reported <now>``
whenever the node's handshake is not a ``Reported`` value (absent, or rewritten by the scheduler
to ``Requesting_<ts>``); ``hami.io/node-rdma-register`` when the RDMA plugin runs and its value
differs, or its removal when the RDMA plugin does not run and the node still has one; with
topology scoring on, ``hami.io/node-nvidia-score`` (every GPU's pair scores,
:func:`pair_score_value`) when it differs.  With scoring off the score annotation is left as it is
(as HAMi leaves it).  Nothing else, so an unchanged node costs no write.

Capacity totals (``--advertise-capacity-totals``, :func:`capacity_to_write`): the node's
``status.capacity`` carries ``hami.io/nvidia-memory`` and ``hami.io/nvidia-cores`` computed from
the register value we write (:func:`~hami_protocol.totals.node_totals_from_register`: healthy
devices, after scaling), so they always say what the scheduler reads.  With the mode off a node
that still carries them (a previous run had it on) has them removed: stale totals would make
kube-scheduler and the kubelet count capacity the devices no longer back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from hami_deviceplugin.gpu.backends.base import Gpu
from hami_deviceplugin.gpu.mig.model import registered_profiles
from hami_protocol.config.device import MigProfileAllow
from hami_protocol.config.mig_allowlist import allowed_mig_profiles
from hami_protocol.config.node import FilterDevices, NodeSettings
from hami_protocol.errors import ProtocolError
from hami_protocol.keys import (
    NODE_ALLOCATE_IDENTITY,
    NVIDIA_HANDSHAKE,
    NVIDIA_REGISTER,
    NVIDIA_SCORE,
    RDMA_REGISTER,
)
from hami_protocol.node.handshake import format_reported, parse_handshake
from hami_protocol.node.identity import format_identity, identity_needs_stamp
from hami_protocol.node.pairscore import encode_pair_scores
from hami_protocol.node.registry import DeviceInfo, MigProfile, encode_node_devices_json
from hami_protocol.request.quantity import json_quantity
from hami_protocol.topology.links import AsymmetricPair, LinkTable, pair_scores
from hami_protocol.totals import TOTALS_RESOURCES, Totals

__all__ = [
    "annotations_to_withdraw",
    "annotations_to_write",
    "capacity_to_write",
    "device_infos",
    "device_type",
    "handshake_needs_answer",
    "mig_profiles_of",
    "pair_score_value",
    "register_value",
    "visible_gpus",
]


def device_type(model: str) -> str:
    """``NVIDIA-<model>`` unless the model already starts with ``NVIDIA`` (``NVIDIA A30``)."""
    return model if model.startswith("NVIDIA") else f"NVIDIA-{model}"


def visible_gpus(gpus: Iterable[Gpu], filters: FilterDevices) -> tuple[Gpu, ...]:
    """The GPUs not excluded by ``filterdevices``, in index order."""
    hidden_uuids = set(filters.uuids)
    hidden_indexes = set(filters.indexes)
    kept = [g for g in gpus if g.uuid not in hidden_uuids and g.index not in hidden_indexes]
    return tuple(sorted(kept, key=lambda g: (g.index, g.uuid)))


def device_infos(
    gpus: Iterable[Gpu], node: NodeSettings, *, mig_allowlist: Sequence[MigProfileAllow] = ()
) -> tuple[DeviceInfo, ...]:
    """One :class:`DeviceInfo` per GPU with the node's split and scaling applied (in ``mig``
    mode: per GPU with an allowed MIG profile, see the module docstring)."""
    if node.operating_mode == "mig":
        return tuple(info for gpu in gpus if (info := _mig_info(gpu, mig_allowlist)) is not None)
    return tuple(
        DeviceInfo(
            id=gpu.uuid,
            index=gpu.index,
            count=node.device_split_count,
            devmem=int(gpu.memory_mib * node.device_memory_scaling),
            devcore=int(node.device_core_scaling * 100),
            type=device_type(gpu.model),
            numa=max(gpu.numa, 0),
            health=gpu.healthy,
            mode=node.operating_mode,
            pci_bus_id=gpu.pci_bus_id,
            pcie_switch=gpu.pcie_switch,
            pcie_root=gpu.pcie_root,
        )
        for gpu in gpus
    )


def mig_profiles_of(gpu: Gpu, mig_allowlist: Sequence[MigProfileAllow]) -> tuple[MigProfile, ...]:
    """The MIG profiles ``gpu`` registers (() when it is not MIG-capable or none is allowed)."""
    if gpu.mig is None:
        return ()
    return registered_profiles(gpu.mig, allowed_mig_profiles(gpu.model, mig_allowlist))


def _mig_info(gpu: Gpu, mig_allowlist: Sequence[MigProfileAllow]) -> DeviceInfo | None:
    profiles = mig_profiles_of(gpu, mig_allowlist)
    if gpu.mig is None or not profiles:
        return None
    names = {profile.name for profile in profiles}
    count = max(spec.instance_count for spec in gpu.mig.profiles if spec.name in names)
    return DeviceInfo(
        id=gpu.uuid,
        index=gpu.index,
        count=count,
        devmem=gpu.memory_mib,
        devcore=100,
        type=device_type(gpu.model),
        numa=max(gpu.numa, 0),
        health=gpu.healthy,
        mode="mig",
        mig_profiles=profiles,
        pci_bus_id=gpu.pci_bus_id,
        pcie_switch=gpu.pcie_switch,
        pcie_root=gpu.pcie_root,
    )


def register_value(
    gpus: Iterable[Gpu], node: NodeSettings, *, mig_allowlist: Sequence[MigProfileAllow] = ()
) -> str:
    """The JSON register annotation value (HAMi's ``MarshalNodeDevices`` bytes)."""
    return encode_node_devices_json(device_infos(gpus, node, mig_allowlist=mig_allowlist))


def pair_score_value(
    gpus: Iterable[Gpu], links: LinkTable
) -> tuple[str, tuple[AsymmetricPair, ...]]:
    """The ``hami.io/node-nvidia-score`` value for ``gpus`` (in index order), and the pairs whose
    two directions disagree (scored 0)."""
    scores, asymmetric = pair_scores([gpu.uuid for gpu in gpus], links)
    return encode_pair_scores(scores), asymmetric


def handshake_needs_answer(value: str | None) -> bool:
    """Whether the handshake must be (re)written: anything but a ``Reported`` value."""
    return parse_handshake(value).state != "reported"


def annotations_to_write(
    current: Mapping[str, str],
    *,
    register: str,
    now: datetime,
    rdma_register: str | None = None,
    identity: str | None = None,
    score: str | None = None,
) -> dict[str, str | None]:
    """The node annotations to patch (empty when the node already says it all).

    ``rdma_register`` is the RDMA register value, or None when the node must not have one (the
    value None in the result removes the annotation); ``identity`` is the mode
    ``hami.io/node-allocate-identity`` must say (while the kubelet's PodResources API answers, so
    the scheduler may bind without the node lock), or None for no annotation: it is written with
    ``now`` as its stamp, and restamped once the node's stamp is older than the refresh period
    (:mod:`hami_protocol.node.identity`: a plugin that stops restamping loses the lock-free
    binds).  ``score`` is the pair-score value, or None when
    topology scoring is off (the node's value, if any, is then left alone).
    """
    writes: dict[str, str | None] = {}
    if current.get(NVIDIA_REGISTER) != register:
        writes[NVIDIA_REGISTER] = register
    if handshake_needs_answer(current.get(NVIDIA_HANDSHAKE)):
        writes[NVIDIA_HANDSHAKE] = format_reported(now)
    if current.get(RDMA_REGISTER) != rdma_register:
        writes[RDMA_REGISTER] = rdma_register
    if identity_needs_stamp(current.get(NODE_ALLOCATE_IDENTITY), identity, now):
        writes[NODE_ALLOCATE_IDENTITY] = (
            None if identity is None else format_identity(now, identity)
        )
    if score is not None and current.get(NVIDIA_SCORE) != score:
        writes[NVIDIA_SCORE] = score
    return writes


WITHDRAWN_IN_DRA_MODE = (
    NVIDIA_REGISTER,
    NVIDIA_HANDSHAKE,
    NVIDIA_SCORE,
    NODE_ALLOCATE_IDENTITY,
    RDMA_REGISTER,
)
"""What a node agent in DRA mode removes: with no register annotation the extender finds no
GPUs on the node (its GPUs are DRA devices, allocated by kube-scheduler from the ResourceSlice),
so no GPU is counted twice when a node switches from the device-plugin protocol to DRA."""


def annotations_to_withdraw(current: Mapping[str, str]) -> dict[str, str | None]:
    """The merge-patch removing the device-plugin path's annotations the node still has."""
    return {key: None for key in WITHDRAWN_IN_DRA_MODE if key in current}


def _same_quantity(current: object, wanted: str) -> bool:
    try:
        return json_quantity(current, key="capacity") == json_quantity(wanted, key="capacity")
    except ProtocolError:
        return False


def capacity_to_write(
    capacity: Mapping[str, object], totals: Totals | None
) -> dict[str, str | None]:
    """The ``status.capacity`` entries to merge-patch (None removes one; empty: nothing to do).

    ``totals`` is what the node must advertise, or None when the mode is off (then the names are
    removed where present)."""
    if totals is None:
        return {name: None for name in TOTALS_RESOURCES if name in capacity}
    return {
        name: text
        for name, text in totals.resources().items()
        if name not in capacity or not _same_quantity(capacity[name], text)
    }
