"""hami_kubesim.browser without a browser: how Chromium is found, and a start that fails.

Driving a real Chromium is tested where it is used: the GPU map page's browser tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_kubesim.browser import (
    BrowserError,
    ChromiumUnavailableError,
    find_or_install_chromium,
    launch,
)


def test_hami_chromium_names_the_executable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    executable = tmp_path / "chromium"
    executable.write_text("")
    monkeypatch.setenv("HAMI_CHROMIUM", str(executable))
    assert find_or_install_chromium() == executable
    monkeypatch.setenv("HAMI_CHROMIUM", str(tmp_path / "missing"))
    with pytest.raises(ChromiumUnavailableError, match="does not exist"):
        find_or_install_chromium()


async def test_a_browser_that_does_not_start_says_so(tmp_path: Path) -> None:
    script = tmp_path / "not-chromium"
    script.write_text("#!/bin/sh\necho 'no display here' >&2\nexit 1\n")
    script.chmod(0o755)
    with pytest.raises(BrowserError, match="chromium did not start: no display here"):
        async with launch(script, tmp_path / "profile"):
            pass
