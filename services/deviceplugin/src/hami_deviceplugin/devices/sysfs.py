"""Where a PCI device sits, read from sysfs under a configurable root (tests use a fake tree).

* NUMA node: ``<root>/bus/pci/devices/<bdf>/numa_node``; a negative value (``-1``: the platform
  does not say) or a missing/unreadable file reads as 0, as HAMi registers it.
* PCIe placement: ``<root>/bus/pci/devices/<bdf>`` is a link into ``<root>/devices/pci<dom>:<bus>/
  <root port>/.../<bdf>``.  The root complex is the ``pci<dom>:<bus>`` component; the switch is the
  upstream port (the bridge right below the root port) when the device sits at least two bridges
  below the root port, otherwise the root port itself; "" when the path says nothing.

Plain blocking file reads: callers run them in a thread.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hami_protocol.errors import ValidationError
from hami_protocol.topology.layout import normalize_pci_bus_id, normalize_pcie_root

__all__ = ["PciePlacement", "pci_device_dir", "pcie_placement", "read_numa_node"]


@dataclass(frozen=True, slots=True)
class PciePlacement:
    pcie_switch: str = ""
    pcie_root: str = ""


def pci_device_dir(sysfs_root: Path, bus_id: str) -> Path:
    return sysfs_root / "bus" / "pci" / "devices" / bus_id


def read_numa_node(sysfs_root: Path, bus_id: str) -> int:
    """The NUMA node of ``bus_id`` (normalised form), 0 when unknown."""
    try:
        text = (pci_device_dir(sysfs_root, bus_id) / "numa_node").read_text(encoding="ascii")
        value = int(text.strip())
    except (OSError, ValueError, UnicodeDecodeError):
        return 0
    return max(value, 0)


def _as_bus_id(component: str) -> str | None:
    try:
        return normalize_pci_bus_id(component)
    except ValidationError:
        return None


def _as_root(component: str) -> str | None:
    try:
        return normalize_pcie_root(component)
    except ValidationError:
        return None


def pcie_placement(sysfs_root: Path, bus_id: str) -> PciePlacement:
    """The PCIe switch and root complex above ``bus_id``; empty fields when unknown."""
    link = pci_device_dir(sysfs_root, bus_id)
    try:
        resolved = Path(os.path.realpath(link, strict=True))
    except OSError:
        return PciePlacement()
    root = ""
    chain: list[str] = []
    for component in resolved.parts:
        found_root = _as_root(component)
        if found_root is not None:
            root, chain = found_root, []
            continue
        if root:
            bdf = _as_bus_id(component)
            if bdf is not None:
                chain.append(bdf)
    if not root or not chain:
        return PciePlacement()
    # chain = [root port, bridges..., endpoint]
    if len(chain) >= 4:
        switch = chain[1]
    elif len(chain) >= 2:
        switch = chain[0]
    else:
        switch = ""
    return PciePlacement(pcie_switch=switch, pcie_root=root)
