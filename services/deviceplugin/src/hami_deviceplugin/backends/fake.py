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
        memory_used_mib: 1024       # optional: exported as hami_host_gpu_memory_used_bytes
        utilization: 35             # optional: hami_host_gpu_utilization_ratio
        memory_utilization: 10      # optional: hami_host_gpu_memory_controller_utilization_ratio
    nics: []                        # RDMA NICs, read by the fake NIC source (backends.fake_nics)

The file is re-read every ``poll_interval`` seconds; when its content changes the new list is
reported, so a test flips ``healthy`` by rewriting the file.  A rewrite that does not parse is
logged and ignored (the previous list stays); a file that does not parse at start is an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog
import yaml

from hami_deviceplugin.backends.base import BackendError, Gpu, GpuUsage
from hami_deviceplugin.sysfs import pcie_placement, read_numa_node
from hami_protocol.errors import ValidationError
from hami_protocol.topology import normalize_pci_bus_id, normalize_pcie_root

__all__ = ["FakeBackend", "FakeDevicesError", "FakeGpu", "parse_fake_devices"]

log = structlog.get_logger(__name__)

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
    }
)
_TOP_KEYS: Final = frozenset({"gpus", "nics"})


class FakeDevicesError(BackendError):
    """The fake-devices file is missing or malformed; the message names the field."""


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


def _fail(where: str, message: str) -> FakeDevicesError:
    return FakeDevicesError(f"fake devices: {where}: {message}")


def _text(entry: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = entry.get(key)
    if value is None:
        if required:
            raise _fail(where, f"{key} is required")
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise _fail(where, f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def _integer(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(where, f"{key} must be a non-negative integer, got {value!r}")
    return value


def _number(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _fail(where, f"{key} must be a non-negative number, got {value!r}")
    return float(value)


def _address(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    text = _text(entry, key, where)
    if key not in entry:
        return None
    try:
        if key == "pcie_root":
            return normalize_pcie_root(text) if text else ""
        return normalize_pci_bus_id(text) if text else ""
    except ValidationError as exc:
        raise _fail(where, f"{key}: {exc.reason}, got {text!r}") from None


def _parse_gpu(entry: object, position: int) -> FakeGpu:
    where = f"gpus[{position}]"
    if not isinstance(entry, Mapping):
        raise _fail(where, "each GPU must be a mapping")
    unknown = sorted(str(key) for key in entry if key not in _GPU_KEYS)
    if unknown:
        raise _fail(where, f"unknown keys {', '.join(unknown)}")
    memory = _integer(entry, "memory_mib", where)
    if memory is None:
        raise _fail(where, "memory_mib is required")
    healthy = entry.get("healthy", True)
    if not isinstance(healthy, bool):
        raise _fail(where, f"healthy must be true or false, got {healthy!r}")
    used_mib = _integer(entry, "memory_used_mib", where)
    index = _integer(entry, "index", where)
    return FakeGpu(
        uuid=_text(entry, "uuid", where, required=True),
        index=position if index is None else index,
        model=_text(entry, "model", where, required=True),
        memory_mib=memory,
        healthy=healthy,
        pci_bus_id=_address(entry, "pci_bus_id", where) or "",
        numa=_integer(entry, "numa", where),
        pcie_switch=_address(entry, "pcie_switch", where),
        pcie_root=_address(entry, "pcie_root", where),
        usage=GpuUsage(
            memory_used_bytes=None if used_mib is None else used_mib * 1024 * 1024,
            utilization_percent=_number(entry, "utilization", where),
            memory_utilization_percent=_number(entry, "memory_utilization", where),
        ),
    )


def parse_fake_devices(text: str) -> tuple[FakeGpu, ...]:
    """Parse the file's text; raises :class:`FakeDevicesError`."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FakeDevicesError(f"fake devices: not valid YAML: {exc}") from None
    if document is None:
        return ()
    if not isinstance(document, Mapping):
        raise _fail("document", "expected a mapping with a 'gpus' list")
    unknown = sorted(str(key) for key in document if key not in _TOP_KEYS)
    if unknown:
        raise _fail("document", f"unknown keys {', '.join(unknown)}")
    gpus = document.get("gpus")
    nics = document.get("nics")
    gpus = [] if gpus is None else gpus
    nics = [] if nics is None else nics
    if not isinstance(gpus, list):
        raise _fail("gpus", "expected a list")
    if not isinstance(nics, list):
        raise _fail("nics", "expected a list")
    parsed = tuple(_parse_gpu(entry, position) for position, entry in enumerate(gpus))
    for field_name in ("uuid", "index"):
        values = [getattr(gpu, field_name) for gpu in parsed]
        if len(set(values)) != len(values):
            raise _fail("gpus", f"every GPU needs a distinct {field_name}")
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
        reason="" if entry.healthy else "marked unhealthy in the fake devices file",
    )


class FakeBackend:
    """GPUs from a YAML file, re-read when it changes."""

    def __init__(self, path: Path, *, sysfs_root: Path, poll_interval: float = 1.0) -> None:
        self._path = path
        self._sysfs = sysfs_root
        self._poll = poll_interval
        self._content: bytes | None = None
        self._entries: tuple[FakeGpu, ...] = ()
        self._gpus: tuple[Gpu, ...] = ()

    @property
    def name(self) -> str:
        return "fake"

    def _load(self) -> tuple[bytes, tuple[FakeGpu, ...], tuple[Gpu, ...]]:
        try:
            content = self._path.read_bytes()
        except OSError as exc:
            raise FakeDevicesError(f"fake devices: cannot read {self._path}: {exc}") from None
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise FakeDevicesError(f"fake devices: {self._path} is not UTF-8") from None
        entries = parse_fake_devices(text)
        return content, entries, tuple(_resolve(entry, self._sysfs) for entry in entries)

    async def open(self) -> tuple[Gpu, ...]:
        self._content, self._entries, self._gpus = await asyncio.to_thread(self._load)
        return self._gpus

    async def updates(self) -> AsyncIterator[tuple[Gpu, ...]]:
        while True:
            await asyncio.sleep(self._poll)
            try:
                content = await asyncio.to_thread(self._path.read_bytes)
            except OSError as exc:
                log.warning("fake devices file unreadable", path=str(self._path), error=str(exc))
                continue
            if content == self._content:
                continue
            try:
                loaded, entries, gpus = await asyncio.to_thread(self._load)
            except FakeDevicesError as exc:
                # Remember the bad content so the warning is logged once per rewrite.
                self._content = content
                log.warning("fake devices file rejected, keeping the previous list", error=str(exc))
                continue
            self._content, self._entries = loaded, entries
            if gpus != self._gpus:
                self._gpus = gpus
                yield gpus

    async def usage(self) -> Mapping[str, GpuUsage]:
        return {entry.uuid: entry.usage for entry in self._entries if entry.usage != GpuUsage()}

    async def close(self) -> None:
        return None
