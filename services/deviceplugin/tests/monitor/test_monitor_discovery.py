"""HAMi's naming rules for region directories and files (pure), and the problem log's counting."""

from __future__ import annotations

from collections import Counter

import structlog.testing
from hypothesis import given
from hypothesis import strategies as st

from hami_deviceplugin.monitor.discovery import (
    ContainerDir,
    DirReason,
    DirVerdict,
    judge_files,
    parse_container_dir,
)
from hami_deviceplugin.monitor.problems import REASONS, ProblemLog


def test_directory_names_split_at_the_first_underscore() -> None:
    assert parse_container_dir("0b7e_main") == ContainerDir("0b7e_main", "0b7e", "main")
    assert parse_container_dir("uid_my_container") == ContainerDir(
        "uid_my_container", "uid", "my_container"
    )
    assert parse_container_dir("uid_") == ContainerDir("uid_", "uid", "")
    assert parse_container_dir("no-separator") is None
    assert parse_container_dir("_main") is None


def test_file_rules() -> None:
    assert judge_files([]) == DirVerdict()
    assert judge_files(["libvgpu.so"]) == DirVerdict()
    assert judge_files(["notes.txt", "b.cache", "a.cache"]) == DirVerdict(region="a.cache")
    assert judge_files(["libvgpu.so", "x.cache"]) == DirVerdict(region="x.cache")
    assert judge_files(["a.cache", "b.cache", "libvgpu.so.1"]) == DirVerdict(
        refused=DirReason.TOO_MANY_FILES
    )
    # Files matching neither pattern do not count (a writer's staging file, say).
    assert judge_files([".a.cache.new", "x.cache", "y.txt", "z.log"]) == DirVerdict(
        region="x.cache"
    )


names = st.lists(
    st.sampled_from(["a.cache", "b.cache", "libvgpu.so", "libvgpu.so.cache", "x.txt", "c.cache"]),
    unique=True,
)


@given(names)
def test_a_region_is_a_listed_cache_file_of_a_directory_that_is_not_refused(
    listed: list[str],
) -> None:
    verdict = judge_files(listed)
    counted = [n for n in listed if n.endswith(".cache") or "libvgpu.so" in n]
    assert (verdict.refused is not None) == (len(counted) > 2)
    if verdict.region is not None:
        assert verdict.refused is None
        assert verdict.region in listed
        assert verdict.region.endswith(".cache")
        assert "libvgpu.so" not in verdict.region
    assert judge_files(reversed(listed)) == verdict


def test_a_problem_counts_once_per_occurrence_and_logs_once_per_subject_and_reason() -> None:
    counted: Counter[str] = Counter()
    problems = ProblemLog(lambda reason: counted.update([reason]))
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            problems.report("/c/a.cache", "magic")
        problems.resolve("/c/a.cache")
        problems.report("/c/a.cache", "magic")
        problems.report("/c/a.cache", "devices")
        problems.report("/c/b", "bad_directory")
        problems.retain({"/c/a.cache"})
    assert counted == {"magic": 2, "devices": 1, "bad_directory": 1}
    assert [(e["path"], e["reason"]) for e in logs] == [
        ("/c/a.cache", "magic"),
        ("/c/a.cache", "devices"),
        ("/c/b", "bad_directory"),
    ]
    assert problems.current() == {"/c/a.cache": "devices"}
    assert set(counted) <= set(REASONS)
