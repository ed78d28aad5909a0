"""One region file as the monitor holds it: reads through ``pread`` and feedback through
``pwrite`` (a file truncated under the monitor comes back short and reads as truncated; a mapped
page it lost would kill the process), a store only over the value the decision saw, and no
symbolic link followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_deviceplugin.monitor.region_file import SCRATCH_BYTES, RegionFile, RegionFileError
from hami_kubesim.hamicore import RegionWriter
from hami_protocol.region.codec import RegionError, RegionFault
from hami_protocol.region.feedback import FeedbackField, field_offset
from hami_protocol.region.layout import V1, RegionVersion

GIB = 1 << 30


def _mapped(path: Path) -> bool:
    """Whether this process has ``path`` mapped now."""
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("version", list(RegionVersion))
def test_reads_and_stores_take_no_mapping(tmp_path: Path, version: RegionVersion) -> None:
    path = tmp_path / "r.cache"
    scratch = bytearray(SCRATCH_BYTES)
    with RegionWriter.create(path, version=version, devices=[("GPU-a", GIB, 30)]) as writer:
        writer.set_process(7, used_bytes=[GIB // 4], sm_util=[12])
        writer.launch_kernel(now=1000.0)
        region = RegionFile.open(str(path))
        try:
            usage = region.usage(scratch)
            assert _mapped(path)  # the writer's mapping only: the reader's is checked below
            writer.close()
            assert not _mapped(path)
            assert region.usage(scratch) == usage
            assert not _mapped(path)
            offset = field_offset(region.layout, FeedbackField.RECENT_KERNEL)
            assert region.store(offset, -1, expected=2)
            assert not _mapped(path)
            assert region.usage(scratch).recent_kernel == -1
            # HAMi-core launched a kernel since the decision: its 2 is not overwritten.
            assert not region.store(offset, 0, expected=1)
            assert region.usage(scratch).recent_kernel == -1
        finally:
            region.close()
            region.close()  # twice: nothing
    assert not _mapped(path)
    assert usage.devices[0].used_bytes == GIB // 4
    assert usage.devices[0].sm_util == 12
    assert usage.recent_kernel == 2


def test_a_file_truncated_after_it_was_opened_reads_as_truncated(tmp_path: Path) -> None:
    path = tmp_path / "r.cache"
    with RegionWriter.create(path, devices=[("GPU-a", GIB, 0)]) as writer:
        writer.set_process(1, used_bytes=[1], sm_util=[1])
    region = RegionFile.open(str(path))
    try:
        with path.open("r+b") as file:
            file.truncate(V1.size - 100)  # the tail (procnum, feedback fields) is gone
        with pytest.raises(RegionError) as caught:
            region.usage(bytearray(SCRATCH_BYTES))
        assert caught.value.fault is RegionFault.TRUNCATED
        assert "shrank" in str(caught.value)
        with pytest.raises(RegionError):
            region.store(field_offset(V1, FeedbackField.UTILIZATION_SWITCH), 1, expected=0)
    finally:
        region.close()


def test_the_reads_ignore_what_an_earlier_region_left_in_the_scratch(tmp_path: Path) -> None:
    """One scratch buffer serves every region: bytes a busier region left there beyond this
    one's process slots are never read."""
    busy, quiet = tmp_path / "busy.cache", tmp_path / "quiet.cache"
    scratch = bytearray(SCRATCH_BYTES)
    with (
        RegionWriter.create(busy, devices=[("GPU-a", GIB, 0)]) as a,
        RegionWriter.create(quiet, devices=[("GPU-a", GIB, 0)]) as b,
    ):
        for pid in range(1, 6):
            a.set_process(pid, used_bytes=[100], sm_util=[10])
        b.set_process(9, used_bytes=[1], sm_util=[1])
        first, second = RegionFile.open(str(busy)), RegionFile.open(str(quiet))
        try:
            assert first.usage(scratch).devices[0].used_bytes == 500
            assert second.usage(scratch).devices[0].used_bytes == 1
            assert second.usage(scratch).active_procs == 1
        finally:
            first.close()
            second.close()


def test_a_region_path_that_is_a_symbolic_link_is_refused(tmp_path: Path) -> None:
    """A container may point its cache at another container's region: following the link would
    report the victim's usage as the linker's and write feedback into the victim's file."""
    victim = tmp_path / "victim.cache"
    with RegionWriter.create(victim, devices=[("GPU-a", GIB, 0)]) as writer:
        writer.set_process(1, used_bytes=[1], sm_util=[1])
    link = tmp_path / "link.cache"
    link.symlink_to(victim)
    with pytest.raises(RegionFileError, match="cannot open"):
        RegionFile.open(str(link))
