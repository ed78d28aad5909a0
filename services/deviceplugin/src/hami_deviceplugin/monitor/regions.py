"""The node's mapped regions: discovery under ``$HOOK_PATH/containers``, reads for the scrape,
the priority feedback's writes, and the removal of directories left by pods that are gone.

Every method blocks (directory listings, ``mmap``, reads of mapped pages) and runs in a worker
thread; one lock keeps a pass, a scrape and the final close from overlapping, so no region is
unmapped while another thread reads it.

A pass (:meth:`RegionTable.run_pass`, every feedback interval, only once the pod watch has
synced):

1. each directory is judged by :mod:`~hami_deviceplugin.monitor.discovery`'s rules; one whose pod
   UID is not on this node is skipped (counted ``unknown_pod`` unless the pod was deleted lately),
   and removed with ``rm -rf`` once its mtime is older than the resync interval, as HAMi does;
2. the region of every other directory is mapped once and kept mapped (keyed by path and inode:
   a replaced or resized file is mapped again); a region whose pod is gone, whose directory is
   refused, or whose file is gone is unmapped (a file gone from a directory that stays is counted
   ``vanished``);
3. every mapped region is read and validated; one that fails is counted by its fault and not
   used, one that shrank is unmapped;
4. unless the MIG lock file exists, HAMi's feedback is decided over the regions that validated in
   this pass and written into them.

A file that failed to map is tried again only once its size, mtime or inode changes.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from hami_deviceplugin.monitor.discovery import (
    ContainerDir,
    DirReason,
    judge_files,
    parse_container_dir,
)
from hami_deviceplugin.monitor.mapping import FileIdentity, MappedRegion, RegionFileError
from hami_deviceplugin.monitor.pods import PodIndex, PodRef
from hami_deviceplugin.monitor.problems import FileReason, PodReason, ProblemLog
from hami_protocol.region.codec import RegionError, RegionFault
from hami_protocol.region.feedback import (
    FeedbackInput,
    FeedbackWrite,
    decide_feedback,
    field_offset,
)
from hami_protocol.region.usage import RegionUsage

__all__ = ["ContainerUsage", "PassReport", "RegionTable"]

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
    """Region files that did not (could not be mapped, or their content is not a region's)."""
    writes: tuple[FeedbackWrite, ...] = ()
    paused: bool = False
    """The MIG lock file exists: no feedback was written."""
    removed: tuple[str, ...] = ()
    """Directories removed (pods gone for longer than the resync interval)."""


@dataclass(slots=True)
class _Entry:
    directory: ContainerDir
    dir_path: str
    region: MappedRegion


@dataclass(slots=True)
class _Pass:
    """What one pass saw."""

    seen: set[str] = field(default_factory=set)
    """Paths (directories and region files) present now: problems of others are forgotten."""
    keep: set[str] = field(default_factory=set)
    """Region files to keep mapped."""
    live_dirs: set[str] = field(default_factory=set)
    """Directories of pods on this node that are not refused."""
    region_paths: set[str] = field(default_factory=set)
    removed: list[str] = field(default_factory=list)


class RegionTable:
    """The mapped regions under ``containers_dir`` (see the module docstring)."""

    def __init__(
        self,
        containers_dir: Path,
        problems: ProblemLog,
        *,
        resync_s: float,
        pause_file: Path,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._dir = containers_dir
        self._problems = problems
        self._resync_s = resync_s
        self._pause_file = pause_file
        self._clock = clock
        self._lock = threading.Lock()
        self._mapped: dict[str, _Entry] = {}
        self._failed: dict[str, _FileSignature] = {}
        self._closed = False

    @property
    def mapped(self) -> frozenset[str]:
        """Paths of the regions mapped now."""
        with self._lock:
            return frozenset(self._mapped)

    # --- a pass -------------------------------------------------------------------------------
    def run_pass(self, pods: PodIndex) -> PassReport:
        with self._lock:
            if self._closed:
                return PassReport()
            seen = _Pass()
            for listed in self._list(self._dir):
                if listed.is_dir(follow_symlinks=False):
                    self._visit(listed, pods, seen)
            self._unmap_dropped(seen)
            inputs: list[FeedbackInput] = []
            for path, entry in list(self._mapped.items()):
                usage = self._read(path, entry)
                if usage is not None:
                    inputs.append(_feedback_input(path, usage))
            paused = self._pause_file.exists()
            writes = () if paused else self._feedback(inputs)
            self._problems.retain(seen.seen)
            self._failed = {p: s for p, s in self._failed.items() if p in seen.seen}
            return PassReport(
                valid=len(inputs),
                invalid=len(seen.region_paths) - len(inputs),
                writes=writes,
                paused=paused,
                removed=tuple(seen.removed),
            )

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
        if parsed.container in pod.containers:
            self._problems.resolve(dir_path)
            return
        self._problems.report(
            dir_path,
            PodReason.UNKNOWN_CONTAINER,
            f"pod {pod.namespace}/{pod.name} has no container {parsed.container!r}",
        )

    def _remove(self, dir_path: str) -> None:
        for path in [p for p, e in self._mapped.items() if e.dir_path == dir_path]:
            self._mapped.pop(path).region.close()
        shutil.rmtree(dir_path, ignore_errors=True)
        log.info("removed the directory of a pod no longer on this node", path=dir_path)

    def _map(self, path: str, parsed: ContainerDir, dir_path: str) -> bool:
        """Keep ``path`` mapped; False when it cannot be (its problem reported)."""
        entry = self._mapped.get(path)
        try:
            status = os.stat(path)
        except FileNotFoundError:
            self._problems.report(path, FileReason.VANISHED, "gone before it could be read")
            return False
        except OSError as exc:
            self._problems.report(path, FileReason.UNREADABLE, str(exc))
            return False
        if entry is not None:
            if entry.region.identity == FileIdentity.of(status) and not entry.region.resized:
                return True
            del self._mapped[path]
            entry.region.close()
        signature = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
        if self._failed.get(path) == signature:
            return False
        try:
            region = MappedRegion.open(path)
        except FileNotFoundError:
            self._problems.report(path, FileReason.VANISHED, "gone before it could be mapped")
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
        self._mapped[path] = _Entry(parsed, dir_path, region)
        return True

    def _unmap_dropped(self, seen: _Pass) -> None:
        for path in [p for p in self._mapped if p not in seen.keep]:
            entry = self._mapped.pop(path)
            entry.region.close()
            if entry.dir_path in seen.live_dirs and not os.path.exists(path):
                seen.seen.add(path)
                self._problems.report(path, FileReason.VANISHED, "removed from its directory")

    def _read(self, path: str, entry: _Entry) -> RegionUsage | None:
        """The region's usage, or None (its problem reported; unmapped when it shrank or cannot
        be looked at: it is mapped afresh at the next pass if it can be)."""
        try:
            usage = entry.region.usage()
        except (RegionError, OSError) as exc:
            fault = _reason(exc)
            self._problems.report(path, fault, str(exc))
            if fault in (RegionFault.TRUNCATED, FileReason.UNREADABLE):
                del self._mapped[path]
                entry.region.close()
            return None
        self._problems.resolve(path)
        return usage

    def _feedback(self, inputs: list[FeedbackInput]) -> tuple[FeedbackWrite, ...]:
        """Decide and write; returns the writes made (a file that shrank since it was read in
        this pass is not written, and counted truncated)."""
        made: list[FeedbackWrite] = []
        for write in decide_feedback(inputs):
            region = self._mapped[write.key].region
            try:
                region.store(field_offset(region.layout, write.field), write.value)
            except (RegionError, OSError) as exc:
                self._problems.report(write.key, _reason(exc), str(exc))
                continue
            made.append(write)
        return tuple(made)

    # --- the scrape ---------------------------------------------------------------------------
    def read(self, pods: PodIndex) -> list[ContainerUsage]:
        """Every mapped region of a known pod and container that reads well, read now."""
        rows: list[ContainerUsage] = []
        with self._lock:
            for path, entry in list(self._mapped.items()):
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
        """Unmap every region; later passes and reads find nothing."""
        with self._lock:
            self._closed = True
            for entry in self._mapped.values():
                entry.region.close()
            self._mapped.clear()


def _reason(exc: RegionError | OSError) -> str:
    """A mapped region's fault, or ``unreadable`` when its file cannot be looked at."""
    return exc.fault if isinstance(exc, RegionError) else FileReason.UNREADABLE


def _feedback_input(path: str, usage: RegionUsage) -> FeedbackInput:
    return FeedbackInput(
        key=path,
        uuids=tuple(device.uuid for device in usage.devices),
        priority=usage.priority,
        recent_kernel=usage.recent_kernel,
        utilization_switch=usage.utilization_switch,
    )
