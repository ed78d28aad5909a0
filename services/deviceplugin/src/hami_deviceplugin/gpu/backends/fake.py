"""The ``fake`` backend: GPUs described in a YAML file, for tests, demos and machines without GPUs.

File shape (unknown keys are refused, so a typo cannot pass silently)::

    gpus:
      - uuid: GPU-0a1b...          # required
        model: Tesla V100-PCIE-32GB # required; registered as NVIDIA-<model> unless it starts so
        memory_mib: 32768           # required, >= 0
        index: 0                    # default: position in the list
        numa: 0                     # default: read from sysfs for pci_bus_id, else 0
        healthy: true               # default true
        pci_bus_id: 0000:1b:00.0    # default "" (unknown); any NVML/sysfs/lspci spelling
        pcie_switch: 0000:18:00.0   # default: from sysfs for pci_bus_id, else ""
        pcie_root: pci0000:17       # default: from sysfs for pci_bus_id, else ""
        memory_used_mib: 1024       # optional: the monitor's hami_host_gpu_memory_used_bytes
        utilization: 35             # optional: hami_host_gpu_utilization_ratio
        memory_utilization: 10      # optional: hami_host_gpu_memory_controller_utilization_ratio
        mig:                        # optional: MIG-capable (the model needs a profile table,
          mode: enabled             #   gpu.mig.tables); keys in gpu.mig.fake_control
          fail_create_after: 3
          busy: false
    nics: []                        # RDMA NICs, read by the fake NIC source (rdma.sources)
    links: []                       # NVLinks and PCIe classes between GPUs (fake_links)

The file is re-read every ``poll_interval`` seconds; when its content changes the new list is
reported, so a test flips ``healthy`` by rewriting the file.  A rewrite that does not parse is
logged and ignored (the previous list stays); a file that does not parse at start is an error.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from hami_deviceplugin.devices.fake_file import (
    UNHEALTHY_REASON,
    FakeFileSource,
    address_field,
    bool_field,
    entry_fields,
    fail,
    integer_field,
    list_field,
    number_field,
    parse_document,
    string_field,
)
from hami_deviceplugin.devices.sysfs import pcie_placement, read_numa_node
from hami_deviceplugin.gpu.backends.base import Gpu, GpuUsage
from hami_deviceplugin.gpu.backends.fake_links import link_table, parse_links
from hami_deviceplugin.gpu.mig.fake_control import (
    MIG_MODES,
    FakeMigControl,
    FakeMigGpu,
    state_file_for,
)
from hami_deviceplugin.gpu.mig.model import MigMode
from hami_deviceplugin.gpu.mig.tables import fake_capability
from hami_protocol.topology.links import LinkTable

__all__ = ["FakeBackend", "FakeGpu", "parse_fake_devices"]

_GPU_KEYS: Final = frozenset(
    {
        "uuid",
        "index",
        "model",
        "memory_mib",
        "numa",
        "healthy",
        "pci_bus_id",
        "pcie_switch",
        "pcie_root",
        "memory_used_mib",
        "utilization",
        "memory_utilization",
        "mig",
    }
)
_MIG_KEYS: Final = frozenset({"mode", "fail_create_after", "busy"})
_TOP_KEYS: Final = frozenset({"gpus", "nics", "links"})


@dataclass(frozen=True, slots=True)
class FakeGpu:
    """One parsed entry: ``numa``/``pcie_*`` are ``None`` when the file leaves them to sysfs."""

    uuid: str
    index: int
    model: str
    memory_mib: int
    healthy: bool
    pci_bus_id: str
    numa: int | None
    pcie_switch: str | None
    pcie_root: str | None
    usage: GpuUsage
    mig: FakeMigGpu | None = None


def _parse_mig(entry: Mapping[str, Any], model: str, where: str) -> FakeMigGpu | None:
    if entry.get("mig") is None:
        return None
    where = f"{where}.mig"
    fields = entry_fields(entry["mig"], _MIG_KEYS, where)
    capability = fake_capability(model)
    if capability is None:
        raise fail(where, f"no MIG profile table for model {model!r}")
    mode = fields.get("mode", "enabled")
    if mode not in MIG_MODES:
        raise fail(where, f"mode must be one of {', '.join(MIG_MODES)}, got {mode!r}")
    return FakeMigGpu(
        capability=capability,
        mode=cast("MigMode", mode),
        fail_create_after=integer_field(fields, "fail_create_after", where),
        busy=bool_field(fields, "busy", where, default=False),
    )


def _parse_gpu(raw: object, position: int) -> FakeGpu:
    where = f"gpus[{position}]"
    entry = entry_fields(raw, _GPU_KEYS, where)
    memory = integer_field(entry, "memory_mib", where)
    if memory is None:
        raise fail(where, "memory_mib is required")
    used_mib = integer_field(entry, "memory_used_mib", where)
    index = integer_field(entry, "index", where)
    model = string_field(entry, "model", where, required=True)
    return FakeGpu(
        uuid=string_field(entry, "uuid", where, required=True),
        index=position if index is None else index,
        model=model,
        memory_mib=memory,
        healthy=bool_field(entry, "healthy", where, default=True),
        pci_bus_id=address_field(entry, "pci_bus_id", where) or "",
        numa=integer_field(entry, "numa", where),
        pcie_switch=address_field(entry, "pcie_switch", where),
        pcie_root=address_field(entry, "pcie_root", where),
        usage=GpuUsage(
            memory_used_bytes=None if used_mib is None else used_mib * 1024 * 1024,
            utilization_percent=number_field(entry, "utilization", where),
            memory_utilization_percent=number_field(entry, "memory_utilization", where),
        ),
        mig=_parse_mig(entry, model, where),
    )


@dataclass(frozen=True, slots=True)
class _Loaded:
    entries: tuple[FakeGpu, ...]
    gpus: tuple[Gpu, ...]
    links: LinkTable


def parse_fake_devices(text: str) -> tuple[FakeGpu, ...]:
    """Parse the file's text; raises :class:`~hami_deviceplugin.errors.FakeDevicesError`."""
    document = parse_document(text)
    gpus = _parse_gpus(document)
    parse_links(list_field(document, "links"), (gpu.uuid for gpu in gpus))
    return gpus


def _parse_gpus(document: Mapping[str, Any]) -> tuple[FakeGpu, ...]:
    unknown = sorted(str(key) for key in document if key not in _TOP_KEYS)
    if unknown:
        raise fail("document", f"unknown keys {', '.join(unknown)}")
    gpus = list_field(document, "gpus")
    list_field(document, "nics")  # read by the NIC source; its shape is checked here too
    parsed = tuple(_parse_gpu(entry, position) for position, entry in enumerate(gpus))
    for field_name in ("uuid", "index"):
        values = [getattr(gpu, field_name) for gpu in parsed]
        if len(set(values)) != len(values):
            raise fail("gpus", f"every GPU needs a distinct {field_name}")
    return parsed


def _resolve(entry: FakeGpu, sysfs_root: Path) -> Gpu:
    numa = entry.numa
    switch, root = entry.pcie_switch, entry.pcie_root
    if entry.pci_bus_id and (numa is None or switch is None or root is None):
        placement = pcie_placement(sysfs_root, entry.pci_bus_id)
        if numa is None:
            numa = read_numa_node(sysfs_root, entry.pci_bus_id)
        switch = placement.pcie_switch if switch is None else switch
        root = placement.pcie_root if root is None else root
    return Gpu(
        uuid=entry.uuid,
        index=entry.index,
        model=entry.model,
        memory_mib=entry.memory_mib,
        numa=numa or 0,
        healthy=entry.healthy,
        pci_bus_id=entry.pci_bus_id,
        pcie_switch=switch or "",
        pcie_root=root or "",
        reason="" if entry.healthy else UNHEALTHY_REASON,
        mig=None if entry.mig is None else entry.mig.capability,
    )


class FakeBackend(FakeFileSource[_Loaded]):
    """GPUs from a YAML file, re-read when it changes."""

    _rejected = "fake devices file rejected, keeping the previous list"

    def __init__(self, path: Path, *, sysfs_root: Path, poll_interval: float = 1.0) -> None:
        super().__init__(path, sysfs_root=sysfs_root, poll_interval=poll_interval)
        self._entries: tuple[FakeGpu, ...] = ()
        self._gpus: tuple[Gpu, ...] = ()
        self._links: LinkTable = {}

    def _parse(self, text: str) -> _Loaded:
        document = parse_document(text)
        entries = _parse_gpus(document)
        gpus = tuple(_resolve(entry, self._sysfs) for entry in entries)
        links = parse_links(list_field(document, "links"), (gpu.uuid for gpu in gpus))
        return _Loaded(entries, gpus, link_table(gpus, links))

    async def open(self) -> tuple[Gpu, ...]:
        loaded = await self._open_file()
        self._entries, self._gpus, self._links = loaded.entries, loaded.gpus, loaded.links
        return self._gpus

    async def updates(self) -> AsyncIterator[tuple[Gpu, ...]]:
        async for loaded in self._rewrites():
            # The entries carry the usage figures and the links, which change without the GPU
            # list changing.
            self._entries, self._links = loaded.entries, loaded.links
            if loaded.gpus != self._gpus:
                self._gpus = loaded.gpus
                yield loaded.gpus

    async def links(self) -> LinkTable:
        return self._links

    async def usage(self) -> Mapping[str, GpuUsage]:
        return {entry.uuid: entry.usage for entry in self._entries if entry.usage != GpuUsage()}

    def mig_control(self, state_file: Path | None = None) -> FakeMigControl:
        """The GPUs' MIG, kept in ``state_file`` (default: beside the fake devices file)."""

        def described() -> dict[str, FakeMigGpu]:
            return {e.uuid: e.mig for e in self._entries if e.mig is not None}

        return FakeMigControl(described, state_file or state_file_for(self._path))

    async def close(self) -> None:
        return None
