"""One region file mapped into memory: opened and mapped ``MAP_SHARED`` read-write once, read in
place at every pass and scrape, written in place by the feedback (aligned int32 stores, as
HAMi's monitor does), unmapped when it goes.  Every call blocks: run them in a worker thread.

A mapped file that shrinks under its mapping would make a read of the lost pages kill the
process (SIGBUS), so every read first checks the file's size (``fstat`` on the mapping's own
descriptor) against its layout's and refuses a shrunk file as truncated.
"""

from __future__ import annotations

import mmap
import os
import stat
from dataclasses import dataclass
from typing import Final

from hami_protocol.region.codec import RegionError, RegionFault
from hami_protocol.region.layout import RegionLayout, detect_layout
from hami_protocol.region.usage import RegionUsage, read_usage

__all__ = ["FileIdentity", "MappedRegion", "RegionFileError"]

_OPEN_FLAGS: Final = os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK
"""Read-write for the feedback; non-blocking so a FIFO named ``*.cache`` cannot hang a thread."""


class RegionFileError(Exception):
    """The file cannot be opened or mapped (``RegionError`` is for its content)."""


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file a path named: a replaced file has another inode."""

    device: int
    inode: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        return cls(status.st_dev, status.st_ino)


class MappedRegion:
    """A region file's mapping and its layout; :meth:`open` makes one."""

    def __init__(self, path: str, identity: FileIdentity, mm: mmap.mmap, layout: RegionLayout):
        self.path = path
        self.identity = identity
        self.layout = layout
        self._mm = mm

    @classmethod
    def open(cls, path: str) -> MappedRegion:
        """Map ``path``.  Raises ``FileNotFoundError`` when it is gone, :class:`RegionFileError`
        when it cannot be mapped and ``RegionError`` when its header is not a region's."""
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            raise
        except OSError as exc:
            raise RegionFileError(f"cannot open: {exc.strerror or exc}") from None
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise RegionFileError("not a regular file")
            if status.st_size == 0:
                detect_layout(b"")  # raises: an empty file is a truncated region
            try:
                mm = mmap.mmap(fd, status.st_size, flags=mmap.MAP_SHARED)
            except (OSError, ValueError) as exc:
                raise RegionFileError(f"cannot map: {exc}") from None
        finally:
            os.close(fd)
        try:
            with memoryview(mm) as view:
                layout = detect_layout(view)
        except BaseException:
            mm.close()
            raise
        return cls(path, FileIdentity.of(status), mm, layout)

    def _check_size(self) -> None:
        size = self._mm.size()
        if size < self.layout.size:
            raise RegionError(
                RegionFault.TRUNCATED,
                f"size {size} bytes < {self.layout.size} (shrank under its mapping)",
                value=size,
            )

    @property
    def resized(self) -> bool:
        """The file's size is no longer the mapping's (map it again)."""
        return self._mm.size() != len(self._mm)

    def usage(self) -> RegionUsage:
        """The region's usage now; ``RegionError`` when its content is not a region's (or the
        file shrank), ``OSError`` when the file cannot be looked at."""
        self._check_size()
        with memoryview(self._mm) as view:
            return read_usage(view)

    def store(self, offset: int, value: int) -> None:
        """Write the int32 at ``offset`` (4-byte aligned) with a single store."""
        if offset % 4 or not 0 <= offset <= self.layout.size - 4:
            raise ValueError(f"offset {offset} is not an aligned int32 of the region")
        self._check_size()
        with memoryview(self._mm) as view, view[: self.layout.size].cast("i") as words:
            words[offset // 4] = value

    def close(self) -> None:
        self._mm.close()
