"""One region file, held open: read with ``pread`` at every pass and scrape, its feedback fields
written with ``pwrite``.  Every call blocks: run them in a worker thread.

Why the monitor maps nothing, where HAMi's maps every region: the file sits in a directory its
container can write, and touching a mapped page the file no longer has (a process truncated it)
kills the process with SIGBUS, so one container could stop the monitoring of its whole node.
``pread`` and ``pwrite`` on a shrunk file come back short, which is a truncated region like any
other.  A read takes only what the metrics need, into a scratch buffer the caller owns: the tail
first (``procnum``, the feedback fields, the last kernel time), then the header, the device table
and the first ``procnum`` process slots: a few kilobytes per region, not the 2 MB of the file.

A feedback write is one aligned 4-byte ``pwrite`` into the page cache HAMi-core has mapped, made
only while the field still holds the value the decision was made on (read just before): a kernel
launch HAMi-core recorded since is not overwritten with a stale decrement.

Files are opened with ``O_NOFOLLOW``: a region path that is a symbolic link (a container pointing
its cache at another container's region) is refused, never followed.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from typing import Final

from hami_protocol.region.codec import RegionError, RegionFault
from hami_protocol.region.layout import (
    HEADER_BYTES,
    MAX_PROCS,
    V1,
    RegionLayout,
    layout_for,
)
from hami_protocol.region.usage import RegionUsage, read_usage

__all__ = ["SCRATCH_BYTES", "FileIdentity", "RegionFile", "RegionFileError"]

SCRATCH_BYTES: Final = 2 * V1.size
"""The scratch buffer a reader needs: larger region files are refused as oversized."""

_OPEN_FLAGS: Final = os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY
"""Read-write for the feedback; non-blocking so a FIFO named ``*.cache`` cannot hang a thread;
never through a symbolic link, never becoming a controlling terminal."""

_INT32: Final = struct.Struct("<i")


class RegionFileError(Exception):
    """The file cannot be opened (``RegionError`` is for its content)."""


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file a path named: a replaced file has another inode."""

    device: int
    inode: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        return cls(status.st_dev, status.st_ino)


def _truncated(size: int, layout: RegionLayout) -> RegionError:
    return RegionError(
        RegionFault.TRUNCATED,
        f"size {size} bytes < {layout.size} (shrank since it was opened)",
        value=size,
    )


class RegionFile:
    """An open region file and its layout; :meth:`open` makes one."""

    def __init__(
        self, path: str, identity: FileIdentity, fd: int, size: int, layout: RegionLayout
    ) -> None:
        self.path = path
        self.identity = identity
        self.layout = layout
        self._fd = fd
        self._size = size

    @classmethod
    def open(cls, path: str) -> RegionFile:
        """Open ``path``.  Raises ``FileNotFoundError`` when it is gone, :class:`RegionFileError`
        when it cannot be opened and ``RegionError`` when it is not a region (size, header)."""
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
            header = os.pread(fd, HEADER_BYTES, 0)
            layout = layout_for(header, status.st_size)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, FileIdentity.of(status), fd, status.st_size, layout)

    @property
    def resized(self) -> bool:
        """The file's size is no longer the one it was opened with (open it again)."""
        return os.fstat(self._fd).st_size != self._size

    def usage(self, scratch: bytearray) -> RegionUsage:
        """The region's usage now, read into ``scratch`` (at least :data:`SCRATCH_BYTES`;
        callers reading from several threads need one each); ``RegionError`` when its content is
        not a region's or the file shrank, ``OSError`` when it cannot be read."""
        layout, size = self.layout, self._size
        with memoryview(scratch) as whole, whole[:size] as view:
            tail = layout.procnum
            if os.preadv(self._fd, [view[tail:]], tail) < size - tail:
                raise _truncated(os.fstat(self._fd).st_size, layout)
            (procnum,) = _INT32.unpack_from(view, tail)
            # The length read only; read_usage refuses a procnum out of range.
            head = layout.procs + min(max(procnum, 0), MAX_PROCS) * layout.proc_size
            if os.preadv(self._fd, [view[:head]], 0) < head:
                raise _truncated(os.fstat(self._fd).st_size, layout)
            return read_usage(view)

    def store(self, offset: int, value: int, *, expected: int) -> bool:
        """Write the int32 at ``offset`` (4-byte aligned) if it still holds ``expected``; False
        when it changed meanwhile (nothing written).  ``RegionError`` when the file shrank."""
        layout = self.layout
        if offset % 4 or not 0 <= offset <= layout.size - 4:
            raise ValueError(f"offset {offset} is not an aligned int32 of the region")
        current = os.pread(self._fd, 4, offset)
        if len(current) < 4:
            raise _truncated(os.fstat(self._fd).st_size, layout)
        if _INT32.unpack(current)[0] != expected:
            return False
        if os.pwrite(self._fd, _INT32.pack(value), offset) < 4:
            raise _truncated(os.fstat(self._fd).st_size, layout)
        return True

    def close(self) -> None:
        """Close the file (again: nothing; a descriptor number is never closed twice, it may
        belong to another file by then)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
