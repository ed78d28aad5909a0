"""The links between GPUs as NVML reports them (blocking: the nvml backend runs this in a worker
thread), in the shape the pair scores are computed from.

Per ordered pair: the PCIe class from ``nvmlDeviceGetTopologyCommonAncestor`` (INTERNAL →
SameBoard, SINGLE → SingleSwitch, MULTIPLE → MultiSwitch, HOSTBRIDGE → HostBridge, NODE →
SameCPU, SYSTEM → CrossCPU; another level is an unknown class), and the NVLinks: the enabled
links (``nvmlDeviceGetNvLinkState``) whose remote PCI bus id (``nvmlDeviceGetNvLinkRemotePciInfo``)
is the peer's, compared in canonical form.  With no direct link and NVSwitch remotes on both GPUs
(``nvmlDeviceGetNvLinkRemoteDeviceType``), the count is the smaller of their switch-link counts
(at most 18): every GPU on the switch fabric reaches every other.

Each GPU's NVLink table is read once per call (not once per pair).  A link NVML reports as not
supported or out of range is no link; any other NVML error leaves every pair of that GPU (or the
one pair, for the common ancestor) without data, logged once per distinct problem: link data must
never stop the plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from hami_protocol.errors import ValidationError
from hami_protocol.topology.layout import normalize_pci_bus_id
from hami_protocol.topology.links import MAX_NVLINKS, LinkTable, PairLinks, PcieLink

__all__ = ["LinkedGpu", "read_link_table"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LinkedGpu:
    """What the reader needs of one GPU: its UUID, canonical bus id ("" unknown), NVML handle."""

    uuid: str
    bus_id: str
    handle: Any


@dataclass(frozen=True, slots=True)
class _NvLinks:
    remote_bus_ids: tuple[str, ...]
    """The canonical remote bus id of every enabled link ("" when unreadable)."""
    switch_links: int


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def _canonical(bus_id: str) -> str:
    try:
        return normalize_pci_bus_id(bus_id)
    except ValidationError:
        return ""


def _pcie_levels(nvml: Any) -> dict[int, PcieLink]:
    return {
        int(nvml.NVML_TOPOLOGY_INTERNAL): PcieLink.SAME_BOARD,
        int(nvml.NVML_TOPOLOGY_SINGLE): PcieLink.SINGLE_SWITCH,
        int(nvml.NVML_TOPOLOGY_MULTIPLE): PcieLink.MULTI_SWITCH,
        int(nvml.NVML_TOPOLOGY_HOSTBRIDGE): PcieLink.HOST_BRIDGE,
        int(nvml.NVML_TOPOLOGY_NODE): PcieLink.SAME_CPU,
        int(nvml.NVML_TOPOLOGY_SYSTEM): PcieLink.CROSS_CPU,
    }


def _nvlinks(nvml: Any, handle: Any) -> _NvLinks:
    """One GPU's enabled links; raises ``NVMLError`` for anything but "no such link"."""
    no_link = {int(nvml.NVML_ERROR_NOT_SUPPORTED), int(nvml.NVML_ERROR_INVALID_ARGUMENT)}
    remotes: list[str] = []
    switches = 0
    for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
        try:
            state = nvml.nvmlDeviceGetNvLinkState(handle, link)
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) in no_link:
                continue
            raise
        if int(state) != int(nvml.NVML_FEATURE_ENABLED):
            continue
        remotes.append(_canonical(_text(nvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId)))
        try:
            kind = int(nvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link))
        except nvml.NVMLError as exc:
            # Drivers without the call still report direct links; only the switch rule is lost.
            if getattr(exc, "value", None) not in no_link:
                raise
            continue
        if kind == int(nvml.NVML_NVLINK_DEVICE_TYPE_SWITCH):
            switches += 1
    return _NvLinks(tuple(remotes), switches)


def _nvlink_count(own: _NvLinks, peer: _NvLinks, peer_bus_id: str) -> int:
    direct = sum(1 for remote in own.remote_bus_ids if remote and remote == peer_bus_id)
    if direct == 0 and own.switch_links and peer.switch_links:
        direct = min(own.switch_links, peer.switch_links)
    return min(direct, MAX_NVLINKS)


def _report(problems: set[str], key: str, **fields: object) -> None:
    if key not in problems:
        problems.add(key)
        log.warning("GPU link data unavailable; the pair scores 0", **fields)


def read_link_table(nvml: Any, gpus: Sequence[LinkedGpu], problems: set[str]) -> LinkTable:
    """Every ordered pair of ``gpus`` whose links could be read.  ``problems`` remembers what was
    already logged (kept by the caller between calls)."""
    tables: dict[str, _NvLinks] = {}
    for gpu in gpus:
        try:
            tables[gpu.uuid] = _nvlinks(nvml, gpu.handle)
        except nvml.NVMLError as exc:
            _report(
                problems, f"nvlink {gpu.uuid} {exc}", gpu=gpu.uuid, call="NVLink", error=str(exc)
            )
    levels = _pcie_levels(nvml)
    table: dict[tuple[str, str], PairLinks] = {}
    for gpu in gpus:
        for peer in gpus:
            if gpu.uuid == peer.uuid or gpu.uuid not in tables or peer.uuid not in tables:
                continue
            try:
                level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(gpu.handle, peer.handle))
            except nvml.NVMLError as exc:
                _report(
                    problems,
                    f"ancestor {gpu.uuid} {peer.uuid} {exc}",
                    gpu=gpu.uuid,
                    peer=peer.uuid,
                    call="nvmlDeviceGetTopologyCommonAncestor",
                    error=str(exc),
                )
                continue
            count = _nvlink_count(tables[gpu.uuid], tables[peer.uuid], peer.bus_id)
            table[(gpu.uuid, peer.uuid)] = PairLinks(levels.get(level), count)
    return table
