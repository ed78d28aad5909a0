"""The node's region files: discovery under ``$HOOK_PATH/containers``, reads for the scrape,
the priority feedback's writes, and the removal of directories left by pods that are gone.

Every method blocks (directory listings, file reads, the feedback's mapped stores) and runs in a
worker thread; one lock keeps the reads of a pass and of a scrape and the final close apart, so
no region file is closed while another thread reads it, and one scratch buffer serves every
read.  A pass takes the lock for a chunk of directories or regions at a time, so a scrape never
waits for a whole pass.

A pass (:meth:`RegionTable.run_pass`, every feedback interval, only once the pod watch has
synced):

1. each directory is judged by :mod:`~hami_deviceplugin.monitor.discovery`'s rules; one whose pod
   UID is not on this node is skipped (counted ``unknown_pod`` unless the pod was deleted lately),
   and removed with ``rm -rf`` once its mtime is older than the resync interval, as HAMi does;
2. the region file of every other directory is opened once and held (keyed by path and inode: a
   replaced or resized file is opened again); a region whose pod is gone, whose directory is
   refused, or whose file is gone is closed (a file gone from a directory that stays is counted
   ``vanished``);
3. every held region is read and validated; one that fails is counted by its fault and not
   used, one that shrank is closed;
4. unless the MIG lock file exists, HAMi's feedback is decided over the regions that validated in
   this pass and written into them.

A file that failed to open is tried again only once its size, mtime or inode changes.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import structlog

from hami_deviceplugin.monitor.discovery import (
    ContainerDir,
    DirReason,
    judge_files,
    parse_container_dir,
)
from hami_deviceplugin.monitor.pods import PodIndex, PodRef
from hami_deviceplugin.monitor.problems import FileReason, PodReason, ProblemLog
from hami_deviceplugin.monitor.region_file import (
    SCRATCH_BYTES,
    FileIdentity,
    RegionFile,
    RegionFileError,
)
from hami_protocol.region.codec import RegionError, RegionFault
from hami_protocol.region.feedback import (
    FeedbackField,
    FeedbackInput,
    FeedbackWrite,
    decide_feedback,
    field_offset,
)
from hami_protocol.region.usage import RegionUsage

__all__ = ["CHUNK", "ContainerUsage", "PassReport", "RegionTable"]

CHUNK: Final = 200
"""Directories visited, or regions read, per hold of the table's lock in a pass."""

_T = TypeVar("_T")

log = structlog.get_logger("hami_deviceplugin.monitor")

_FileSignature = tuple[int, int, int, int]
"""(device, inode, size, mtime_ns) of a file that failed to map."""


@dataclass(frozen=True, slots=True)
class ContainerUsage:
    """One exported region: its pod's names and what it reads."""

    namespace: str
    pod: str
    container: str
    usage: RegionUsage


@dataclass(frozen=True, slots=True)
class PassReport:
    valid: int = 0
    """Regions that validated."""
    invalid: int = 0
    """Region files that did not (could not be opened, or their content is not a region's)."""
    writes: tuple[FeedbackWrite, ...] = ()
    paused: bool = False
    """The MIG lock file exists: no feedback was written."""
    removed: tuple[str, ...] = ()
    """Directories removed (pods gone for longer than the resync interval)."""


@dataclass(slots=True)
class _Entry:
    directory: ContainerDir
    dir_path: str
    region: RegionFile


@dataclass(slots=True)
class _Pass:
    """What one pass saw."""

    seen: set[str] = field(default_factory=set)
    """Paths (directories and region files) present now: problems of others are forgotten."""
    keep: set[str] = field(default_factory=set)
    """Region files to keep open."""
    live_dirs: set[str] = field(default_factory=set)
    """Directories of pods on this node that are not refused."""
    region_paths: set[str] = field(default_factory=set)
    removed: list[str] = field(default_factory=list)


class RegionTable:
    """The region files under ``containers_dir`` (see the module docstring)."""

    def __init__(
        self,
        containers_dir: Path,
        problems: ProblemLog,
        *,
        resync_s: float,
        pause_file: Path,
        clock: Callable[[], float] = time.time,
        chunk: int = CHUNK,
    ) -> None:
        self._dir = containers_dir
        self._problems = problems
        self._resync_s = resync_s
        self._pause_file = pause_file
        self._clock = clock
        self._chunk = chunk
        self._lock = threading.Lock()
        self._held: dict[str, _Entry] = {}
        self._scratch = bytearray(SCRATCH_BYTES)  # reads happen under the lock, one at a time
        self._failed: dict[str, _FileSignature] = {}
        self._closed = False

    @property
    def held(self) -> frozenset[str]:
        """Paths of the region files held open now."""
        with self._lock:
            return frozenset(self._held)

    # --- a pass -------------------------------------------------------------------------------
    def run_pass(self, pods: PodIndex) -> PassReport:
        # The lock is taken per chunk of directories and of reads, not for the whole pass: a
        # scrape waits for one chunk at most, not for a pass over thousands of regions.
        with self._lock:
            if self._closed:
                return PassReport()
            listed = [e for e in self._list(self._dir) if e.is_dir(follow_symlinks=False)]
        seen = _Pass()
        for directories in _chunks(listed, self._chunk):
            with self._lock:
                if self._is_closed():
                    return PassReport()
                for directory in directories:
                    self._visit(directory, pods, seen)
        with self._lock:
            if self._is_closed():
                return PassReport()
            self._close_dropped(seen)
            held = list(self._held.items())
        inputs: list[FeedbackInput] = []
        validated: dict[str, _Entry] = {}
        for regions in _chunks(held, self._chunk):
            with self._lock:
                for path, entry in regions:
                    if self._held.get(path) is not entry:  # closed by a scrape meanwhile
                        continue
                    usage = self._read(path, entry)
                    if usage is not None:
                        inputs.append(_feedback_input(path, usage))
                        validated[path] = entry
        with self._lock:
            if self._is_closed():
                return PassReport()
            paused = self._pause_file.exists()
            writes = () if paused else self._feedback(inputs, validated)
            self._problems.retain(seen.seen)
            self._failed = {p: s for p, s in self._failed.items() if p in seen.seen}
        return PassReport(
            valid=len(inputs),
            invalid=len(seen.region_paths) - len(inputs),
            writes=writes,
            paused=paused,
            removed=tuple(seen.removed),
        )

    def _is_closed(self) -> bool:
        """Whether :meth:`close` ran (a method: a pass reads it again after each wait for the
        lock)."""
        return self._closed

    def _list(self, directory: Path) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as entries:
                return list(entries)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self._problems.report(str(directory), FileReason.UNREADABLE, str(exc))
            return []

    def _visit(self, entry: os.DirEntry[str], pods: PodIndex, seen: _Pass) -> None:
        dir_path = entry.path
        parsed = parse_container_dir(entry.name)
        if parsed is None:
            seen.seen.add(dir_path)
            self._problems.report(dir_path, DirReason.BAD_DIRECTORY, "no '_' after the pod UID")
            return
        pod = pods.pods.get(parsed.pod_uid)
        if pod is None:
            self._unknown_pod(entry, parsed, pods, seen)
            return
        seen.seen.add(dir_path)
        try:
            names = os.listdir(dir_path)
        except FileNotFoundError:
            return
        except OSError as exc:
            self._problems.report(dir_path, FileReason.UNREADABLE, str(exc))
            return
        verdict = judge_files(names)
        if verdict.refused is not None:
            self._problems.report(dir_path, verdict.refused, f"{len(names)} files")
            return
        self._check_container(dir_path, parsed, pod)
        seen.live_dirs.add(dir_path)
        if verdict.region is None:
            return
        path = os.path.join(dir_path, verdict.region)
        seen.seen.add(path)
        seen.region_paths.add(path)
        if self._map(path, parsed, dir_path):
            seen.keep.add(path)

    def _unknown_pod(
        self, entry: os.DirEntry[str], parsed: ContainerDir, pods: PodIndex, seen: _Pass
    ) -> None:
        dir_path = entry.path
        try:
            mtime = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            return
        if mtime + self._resync_s < self._clock():
            self._remove(dir_path)
            seen.removed.append(dir_path)
            return
        seen.seen.add(dir_path)
        if parsed.pod_uid not in pods.ended:
            self._problems.report(dir_path, PodReason.UNKNOWN_POD, f"pod UID {parsed.pod_uid}")

    def _check_container(self, dir_path: str, parsed: ContainerDir, pod: PodRef) -> None:
        # An init container that asked for a GPU has a directory too (the device plugin makes
        # one per Allocate); it is not reported, as in HAMi, and it is no error either.
        if parsed.container in pod.containers or parsed.container in pod.init_containers:
            self._problems.resolve(dir_path)
            return
        self._problems.report(
            dir_path,
            PodReason.UNKNOWN_CONTAINER,
            f"pod {pod.namespace}/{pod.name} has no container {parsed.container!r}",
        )

    def _remove(self, dir_path: str) -> None:
        for path in [p for p, e in self._held.items() if e.dir_path == dir_path]:
            self._held.pop(path).region.close()
        shutil.rmtree(dir_path, ignore_errors=True)
        log.info("removed the directory of a pod no longer on this node", path=dir_path)

    def _map(self, path: str, parsed: ContainerDir, dir_path: str) -> bool:
        """Keep ``path`` open; False when it cannot be (its problem reported)."""
        entry = self._held.get(path)
        try:
            status = os.lstat(path)  # a symbolic link is refused at open, not followed
        except FileNotFoundError:
            self._problems.report(path, FileReason.VANISHED, "gone before it could be read")
            return False
        except OSError as exc:
            self._problems.report(path, FileReason.UNREADABLE, str(exc))
            return False
        if entry is not None:
            if entry.region.identity == FileIdentity.of(status) and not entry.region.resized:
                return True
            del self._held[path]
            entry.region.close()
        signature = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        if self._failed.get(path) == signature:
            return False
        try:
            region = RegionFile.open(path)
        except FileNotFoundError:
            self._problems.report(path, FileReason.VANISHED, "gone before it could be opened")
            return False
        except RegionError as exc:
            self._problems.report(path, exc.fault, str(exc))
            self._failed[path] = signature
            return False
        except RegionFileError as exc:
            self._problems.report(path, FileReason.UNREADABLE, str(exc))
            self._failed[path] = signature
            return False
        self._failed.pop(path, None)
        self._held[path] = _Entry(parsed, dir_path, region)
        return True

    def _close_dropped(self, seen: _Pass) -> None:
        for path in [p for p in self._held if p not in seen.keep]:
            entry = self._held.pop(path)
            entry.region.close()
            if entry.dir_path in seen.live_dirs and not os.path.exists(path):
                seen.seen.add(path)
                self._problems.report(path, FileReason.VANISHED, "removed from its directory")

    def _read(self, path: str, entry: _Entry) -> RegionUsage | None:
        """The region's usage, or None (its problem reported; closed when it shrank or cannot
        be read: it is opened afresh at the next pass if it can be)."""
        try:
            usage = entry.region.usage(self._scratch)
        except (RegionError, OSError) as exc:
            fault = _reason(exc)
            self._problems.report(path, fault, str(exc))
            if fault in (RegionFault.TRUNCATED, FileReason.UNREADABLE):
                del self._held[path]
                entry.region.close()
            return None
        self._problems.resolve(path)
        return usage

    def _feedback(
        self, inputs: list[FeedbackInput], validated: dict[str, _Entry]
    ) -> tuple[FeedbackWrite, ...]:
        """Decide and write; returns the writes made.  Only into the very files read in this
        pass (one a scrape closed since, because it shrank, is skipped), and only over the value
        the decision was made on: a field HAMi-core changed since keeps its new value."""
        read_as = {region.key: region for region in inputs}
        made: list[FeedbackWrite] = []
        for write in decide_feedback(inputs):
            entry = validated[write.key]
            if self._held.get(write.key) is not entry:
                continue
            region = entry.region
            seen = read_as[write.key]
            expected = (
                seen.recent_kernel
                if write.field is FeedbackField.RECENT_KERNEL
                else seen.utilization_switch
            )
            try:
                written = region.store(
                    field_offset(region.layout, write.field), write.value, expected=expected
                )
            except (RegionError, OSError) as exc:
                self._problems.report(write.key, _reason(exc), str(exc))
                continue
            if written:
                made.append(write)
        return tuple(made)

    # --- the scrape ---------------------------------------------------------------------------
    def read(self, pods: PodIndex) -> list[ContainerUsage]:
        """Every held region of a known pod and container that reads well, read now."""
        rows: list[ContainerUsage] = []
        with self._lock:
            for path, entry in list(self._held.items()):
                pod = pods.pods.get(entry.directory.pod_uid)
                if pod is None or entry.directory.container not in pod.containers:
                    continue
                usage = self._read(path, entry)
                if usage is not None:
                    rows.append(
                        ContainerUsage(pod.namespace, pod.name, entry.directory.container, usage)
                    )
        return rows

    def close(self) -> None:
        """Close every region file; later passes and reads find nothing."""
        with self._lock:
            self._closed = True
            for entry in self._held.values():
                entry.region.close()
            self._held.clear()


def _chunks(items: list[_T], size: int) -> list[list[_T]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _reason(exc: RegionError | OSError) -> str:
    """A held region's fault, or ``unreadable`` when its file cannot be looked at."""
    return exc.fault if isinstance(exc, RegionError) else FileReason.UNREADABLE


def _feedback_input(path: str, usage: RegionUsage) -> FeedbackInput:
    return FeedbackInput(
        key=path,
        uuids=tuple(device.uuid for device in usage.devices),
        priority=usage.priority,
        recent_kernel=usage.recent_kernel,
        utilization_switch=usage.utilization_switch,
    )
