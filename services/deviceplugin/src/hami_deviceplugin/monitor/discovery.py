"""Which entries under ``$HOOK_PATH/containers`` hold a region, by HAMi's rules on names: pure
functions of directory and file names.

A container's directory is ``<podUID>_<containerName>``, split at the first ``_`` (a name without
one, or with nothing before it, is refused).  Of its files, more than two matching
``*libvgpu.so*`` or ``*.cache`` refuse the directory; otherwise its region is the first ``*.cache``
file by name that is not a ``libvgpu.so`` (HAMi maps one region per container), and a directory
without one is skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Final

__all__ = [
    "CACHE_SUFFIX",
    "MAX_FILES",
    "ContainerDir",
    "DirReason",
    "DirVerdict",
    "judge_files",
    "parse_container_dir",
]

CACHE_SUFFIX: Final = ".cache"
MAX_FILES: Final = 2
"""More ``*libvgpu.so*`` / ``*.cache`` files than this refuse a directory (HAMi's rule)."""
_COUNTED: Final = ("*libvgpu.so*", "*.cache")


class DirReason(StrEnum):
    """Why a directory's region is not read (the ``reason`` of the error counter)."""

    BAD_DIRECTORY = "bad_directory"
    TOO_MANY_FILES = "too_many_files"


@dataclass(frozen=True, slots=True)
class ContainerDir:
    """A well-named container directory."""

    name: str
    pod_uid: str
    container: str


def parse_container_dir(name: str) -> ContainerDir | None:
    """``<podUID>_<containerName>`` → its parts; ``None`` for any other name."""
    pod_uid, sep, container = name.partition("_")
    if not sep or not pod_uid:
        return None
    return ContainerDir(name=name, pod_uid=pod_uid, container=container)


@dataclass(frozen=True, slots=True)
class DirVerdict:
    """The directory's region file name (``None``: no region), or why it is refused."""

    region: str | None = None
    refused: DirReason | None = None


def judge_files(names: Iterable[str]) -> DirVerdict:
    """The verdict on a container directory holding the files ``names``."""
    listed = sorted(names)
    counted = [n for n in listed if any(fnmatchcase(n, pattern) for pattern in _COUNTED)]
    if len(counted) > MAX_FILES:
        return DirVerdict(refused=DirReason.TOO_MANY_FILES)
    for name in counted:
        if name.endswith(CACHE_SUFFIX) and "libvgpu.so" not in name:
            return DirVerdict(region=name)
    return DirVerdict()
