"""One running system for the whole fault suite, and its summary printed at the end of every
run, whatever the verbosity."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from hami_kubesim.stack.chaos import ChaosSummary, chaos_spec
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system

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


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def chaos_system() -> AsyncIterator[System]:
    """The system every fault scenario of the suite runs on (started once: about 10 s)."""
    async with running_system(chaos_spec()) as running:
        yield running


@pytest.fixture(scope="package")
def scenarios() -> ChaosSummary:
    """The results of the scenarios run so far in the suite."""
    return ChaosSummary()
