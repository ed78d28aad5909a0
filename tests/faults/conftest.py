"""The fault suite's summary is printed at the end of every run, whatever the verbosity."""

from __future__ import annotations

import pytest

SUMMARIES = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUMMARIES] = []


@pytest.fixture
def fault_summary(request: pytest.FixtureRequest) -> list[str]:
    """Append text here to have it printed in the run's terminal summary."""
    return request.config.stash[SUMMARIES]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in terminalreporter.config.stash.get(SUMMARIES, []):
        terminalreporter.write_sep("-", "fault scenarios")
        terminalreporter.write_line(text)
