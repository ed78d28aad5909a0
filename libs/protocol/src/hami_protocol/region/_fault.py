"""What can be wrong with a shared region's content (re-exported by :mod:`.codec`)."""

from __future__ import annotations

from enum import StrEnum

from hami_protocol.errors import DecodeError

__all__ = ["RegionError", "RegionFault"]


class RegionFault(StrEnum):
    TRUNCATED = "truncated"
    OVERSIZED = "oversized"
    MAGIC = "magic"
    VERSION = "version"
    DEVICES = "devices"
    """``num`` above the 16 device slots."""
    PROCNUM = "procnum"
    """``procnum`` below 0 or above the 1024 process slots."""


class RegionError(DecodeError):
    """A buffer is not a shared region HAMi-core could have written.

    ``fault`` classifies it; the message names the offending value (``num 17 > 16 devices``).
    """

    def __init__(self, fault: RegionFault, message: str, *, value: object = None) -> None:
        # ProtocolError would append a quoted value to the text; the message already names it.
        self.fault = fault
        self.key = ""
        self.value = value
        self.reason = message
        ValueError.__init__(self, message)
