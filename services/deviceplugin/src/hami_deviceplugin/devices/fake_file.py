"""The fake devices file, as both fake sources read it (GPUs:
:mod:`hami_deviceplugin.gpu.backends.fake`, RDMA NICs: :mod:`hami_deviceplugin.rdma.sources`):
its YAML document (a ``gpus`` and a ``nics`` list), the field readers whose errors name the entry
and the field, and :class:`FakeFileSource`, which loads the file at start and again at every
rewrite.

Blocking reads and parsing run in worker threads; a rewrite is noticed by polling the file's
content every ``poll_interval`` seconds (one small read per poll).  A new content is taken only
once two polls in a row read it: a file written in place (``cp``, ``>``, most editors' plain
save) is truncated before it is written, and a poll landing in between reads an empty or half
file, which often parses (an empty file is "no devices"): taken at once, every device would
vanish from the node and come back a poll later.  Writing a temporary file and renaming it over
the old one is still the way to change the file; the second read only makes the in-place write
safe too, at the cost of one poll of delay.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, Generic, TypeVar

import structlog
import yaml

from hami_deviceplugin.errors import FakeDevicesError
from hami_protocol.errors import ValidationError
from hami_protocol.topology.layout import normalize_pci_bus_id, normalize_pcie_root

__all__ = [
    "UNHEALTHY_REASON",
    "FakeFileSource",
    "address_field",
    "bool_field",
    "entry_fields",
    "fail",
    "integer_field",
    "list_field",
    "number_field",
    "parse_document",
    "settled",
    "string_field",
]

log = structlog.get_logger(__name__)

UNHEALTHY_REASON: Final = "marked unhealthy in the fake devices file"
"""Why a device the file marks ``healthy: false`` is unhealthy."""

L = TypeVar("L")


def fail(where: str, message: str) -> FakeDevicesError:
    return FakeDevicesError(f"fake devices: {where}: {message}")


def parse_document(text: str) -> Mapping[str, Any]:
    """The top-level mapping of the file's text ({} for an empty file)."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FakeDevicesError(f"fake devices: not valid YAML: {exc}") from None
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise fail("document", "expected a mapping with 'gpus' and 'nics' lists")
    return document


def list_field(document: Mapping[str, Any], key: str) -> list[Any]:
    """The top-level list ``key`` ([] when absent)."""
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(key, "expected a list")
    return value


def entry_fields(entry: object, allowed: frozenset[str], where: str) -> Mapping[str, Any]:
    """``entry`` as a mapping with no key outside ``allowed`` (a typo cannot pass silently)."""
    if not isinstance(entry, Mapping):
        raise fail(where, "expected a mapping")
    unknown = sorted(str(key) for key in entry if key not in allowed)
    if unknown:
        raise fail(where, f"unknown keys {', '.join(unknown)}")
    return entry


def bool_field(entry: Mapping[str, Any], key: str, where: str, *, default: bool) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise fail(where, f"{key} must be true or false, got {value!r}")
    return value


def string_field(entry: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = entry.get(key)
    if value is None:
        if required:
            raise fail(where, f"{key} is required")
        return ""
    if not isinstance(value, str) or (required and not value.strip()):
        raise fail(where, f"{key} must be a non-empty string, got {value!r}")
    return value.strip()


def integer_field(entry: Mapping[str, Any], key: str, where: str) -> int | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise fail(where, f"{key} must be a non-negative integer, got {value!r}")
    return value


def number_field(entry: Mapping[str, Any], key: str, where: str) -> float | None:
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise fail(where, f"{key} must be a non-negative number, got {value!r}")
    return float(value)


def address_field(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    """A normalised PCI address ("" when empty; None when the entry leaves it out)."""
    text = string_field(entry, key, where)
    if key not in entry:
        return None
    try:
        if key == "pcie_root":
            return normalize_pcie_root(text) if text else ""
        return normalize_pci_bus_id(text) if text else ""
    except ValidationError as exc:
        raise fail(where, f"{key}: {exc.reason}, got {text!r}") from None


def settled(content: bytes, *, previous_read: bytes | None, taken: bytes | None) -> bool:
    """Whether a poll's ``content`` may be acted on: it is the content already taken (nothing to
    do), or the previous poll read the same bytes (a write in place is over, not caught between
    its truncation and its last byte)."""
    return content in (taken, previous_read)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise FakeDevicesError(f"fake devices: cannot read {path}: {exc}") from None


class FakeFileSource(ABC, Generic[L]):
    """Devices from the fake devices file: loaded at start (an error then is the caller's), and
    again whenever the file's content changes, looked at every ``poll_interval`` seconds.  A
    rewrite that cannot be read or loaded is logged and skipped, once per rewrite."""

    _rejected: ClassVar[str]
    """The warning logged for a rewrite that does not load."""

    def __init__(self, path: Path, *, sysfs_root: Path, poll_interval: float = 1.0) -> None:
        self._path = path
        self._sysfs = sysfs_root
        self._poll = poll_interval
        self._content: bytes | None = None

    @property
    def name(self) -> str:
        return "fake"

    @abstractmethod
    def _parse(self, text: str) -> L:
        """The devices the file's text describes (blocking: sysfs fills in what it leaves
        open); raises :class:`FakeDevicesError`."""

    def _load(self, content: bytes) -> L:
        try:
            text = content.decode("utf-8")
        except UnicodeDecodeError:
            raise FakeDevicesError(f"fake devices: {self._path} is not UTF-8") from None
        return self._parse(text)

    async def _open_file(self) -> L:
        content = await asyncio.to_thread(_read, self._path)
        loaded = await asyncio.to_thread(self._load, content)
        self._content = content
        return loaded

    async def _rewrites(self) -> AsyncIterator[L]:
        """What every later content of the file loads to, until cancelled."""
        seen_once: bytes | None = None
        while True:
            await asyncio.sleep(self._poll)
            try:
                content = await asyncio.to_thread(_read, self._path)
            except FakeDevicesError as exc:
                log.warning("fake devices file unreadable", path=str(self._path), error=str(exc))
                continue
            if not settled(content, previous_read=seen_once, taken=self._content):
                seen_once = content
                continue
            seen_once = None
            if content == self._content:
                continue
            # Remembered even when it does not load, so a bad rewrite is reported once.
            self._content = content
            try:
                loaded = await asyncio.to_thread(self._load, content)
            except FakeDevicesError as exc:
                log.warning(self._rejected, error=str(exc))
                continue
            yield loaded
