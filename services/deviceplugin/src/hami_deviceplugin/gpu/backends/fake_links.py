"""The links between the fake backend's GPUs: the optional ``links`` list of the fake devices file.

Entry shape (unknown keys are refused)::

    links:
      - from: GPU-0a1b...     # required: a GPU of the file
        to: GPU-2c3d...       # required: another GPU of the file
        pcie: SingleSwitch    # optional: CrossCPU, SameCPU, HostBridge, MultiSwitch,
                              #   SingleSwitch or SameBoard; default: derived (below)
        nvlinks: 4            # optional, 0..18, default 0
        symmetric: true       # default true: the entry describes both directions;
                              #   false: only from → to (the other keeps its default)

A pair the list does not name gets the PCIe class the file's placement implies, with no NVLinks:
the same ``pcie_switch`` → SingleSwitch, else the same ``pcie_root`` → HostBridge, else the same
NUMA node → SameCPU, else CrossCPU (unknown switches and roots never match).  Naming a direction
twice is an error, so ``symmetric: false`` with an entry for each direction is how a test
declares an asymmetric pair.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from hami_deviceplugin.devices.fake_file import (
    bool_field,
    entry_fields,
    fail,
    integer_field,
    string_field,
)
from hami_deviceplugin.gpu.backends.base import Gpu
from hami_protocol.errors import ValidationError
from hami_protocol.topology.links import LinkTable, PairLinks, PcieLink

__all__ = ["FakeLink", "default_pcie", "link_table", "parse_links"]

_LINK_KEYS: Final = frozenset({"from", "to", "pcie", "nvlinks", "symmetric"})


@dataclass(frozen=True, slots=True)
class FakeLink:
    """One parsed entry: ``pcie`` None leaves the class to the placement rule."""

    source: str
    target: str
    pcie: PcieLink | None
    nvlinks: int
    symmetric: bool
    where: str


def _parse_link(raw: object, position: int, uuids: frozenset[str]) -> FakeLink:
    where = f"links[{position}]"
    entry = entry_fields(raw, _LINK_KEYS, where)
    source = string_field(entry, "from", where, required=True)
    target = string_field(entry, "to", where, required=True)
    for key, uuid in (("from", source), ("to", target)):
        if uuid not in uuids:
            raise fail(where, f"{key} {uuid!r} is not a GPU of this file")
    if source == target:
        raise fail(where, "from and to must be different GPUs")
    pcie_text = string_field(entry, "pcie", where)
    try:
        pcie = PcieLink(pcie_text) if pcie_text else None
    except ValueError:
        words = ", ".join(c.value for c in PcieLink)
        raise fail(where, f"pcie must be one of {words}, got {pcie_text!r}") from None
    nvlinks = integer_field(entry, "nvlinks", where) or 0
    try:
        PairLinks(pcie, nvlinks)
    except ValidationError as exc:
        raise fail(where, f"nvlinks {exc.reason}, got {nvlinks}") from None
    return FakeLink(
        source=source,
        target=target,
        pcie=pcie,
        nvlinks=nvlinks,
        symmetric=bool_field(entry, "symmetric", where, default=True),
        where=where,
    )


def parse_links(raw: Sequence[Any], uuids: Iterable[str]) -> tuple[FakeLink, ...]:
    """The ``links`` list; raises :class:`~hami_deviceplugin.errors.FakeDevicesError` naming
    the bad entry (a direction named twice included)."""
    known = frozenset(uuids)
    parsed = tuple(_parse_link(entry, position, known) for position, entry in enumerate(raw))
    named: dict[tuple[str, str], str] = {}
    for link in parsed:
        directions = [(link.source, link.target)]
        if link.symmetric:
            directions.append((link.target, link.source))
        for direction in directions:
            if direction in named:
                raise fail(
                    link.where,
                    f"{direction[0]} -> {direction[1]} is already described by {named[direction]}",
                )
            named[direction] = link.where
    return parsed


def default_pcie(first: Gpu, second: Gpu) -> PcieLink:
    """The PCIe class the file's placement fields imply (see the module docstring)."""
    if first.pcie_switch and first.pcie_switch == second.pcie_switch:
        return PcieLink.SINGLE_SWITCH
    if first.pcie_root and first.pcie_root == second.pcie_root:
        return PcieLink.HOST_BRIDGE
    if first.numa == second.numa:
        return PcieLink.SAME_CPU
    return PcieLink.CROSS_CPU


def link_table(gpus: Sequence[Gpu], links: Iterable[FakeLink]) -> LinkTable:
    """Every ordered pair of ``gpus``: the placement default, overridden by ``links``."""
    by_uuid: Mapping[str, Gpu] = {gpu.uuid: gpu for gpu in gpus}
    table: dict[tuple[str, str], PairLinks] = {
        (a.uuid, b.uuid): PairLinks(default_pcie(a, b))
        for a in gpus
        for b in gpus
        if a.uuid != b.uuid
    }
    for link in links:
        if link.source not in by_uuid or link.target not in by_uuid:
            continue
        pcie = link.pcie or default_pcie(by_uuid[link.source], by_uuid[link.target])
        table[(link.source, link.target)] = PairLinks(pcie, link.nvlinks)
        if link.symmetric:
            table[(link.target, link.source)] = PairLinks(pcie, link.nvlinks)
    return table
