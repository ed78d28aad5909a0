"""kubesim's pytest plugin, run on small test files in a scratch directory (``pytester``)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
kubesim_task_guard = guarded
"""


def _run(pytester: pytest.Pytester, files: dict[str, str]) -> pytest.RunResult:
    pytester.makefile(".ini", pytest=INI)
    for path, text in files.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "--import-mode=importlib", "-q")


LEAKY = """
import asyncio

async def test_leaves_a_sleeper():
    asyncio.create_task(asyncio.sleep(300), name="forgotten-sleeper")

async def test_cleans_up():
    task = asyncio.create_task(asyncio.sleep(300), name="awaited-sleeper")
    task.cancel()

async def test_short_lived_tasks_are_fine():
    await asyncio.gather(*(asyncio.sleep(0) for _ in range(10)))

def test_sync_tests_are_not_guarded():
    pass
"""


def test_a_leaked_task_fails_its_test_with_its_name_and_where_it_waits(
    pytester: pytest.Pytester,
) -> None:
    result = _run(pytester, {"guarded/test_leaky.py": LEAKY, "free/test_leaky.py": LEAKY})
    result.assert_outcomes(passed=8, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_leaves_a_sleeper*",
            "*test test_leaves_a_sleeper left 1 asyncio task(s) running:*",
            "*forgotten-sleeper at sleep (tasks.py:*)*",
        ]
    )
    assert "awaited-sleeper" not in result.stdout.str()


def test_a_fixture_that_leaks_is_caught_after_its_teardown(pytester: pytest.Pytester) -> None:
    source = """
import asyncio
import pytest

@pytest.fixture
async def background():
    task = asyncio.create_task(asyncio.Event().wait(), name="fixture-waiter")
    yield task
    # forgets to cancel it

@pytest.fixture
async def tidy():
    task = asyncio.create_task(asyncio.Event().wait(), name="tidy-waiter")
    yield task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

async def test_uses_a_leaky_fixture(background):
    assert not background.done()

async def test_uses_a_tidy_fixture(tidy):
    assert not tidy.done()
"""
    result = _run(pytester, {"guarded/test_fixture.py": source})
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*ERROR at teardown of test_uses_a_leaky_fixture*", "*fixture-waiter at wait (*"]
    )
    assert "tidy-waiter" not in result.stdout.str()


def test_a_module_scoped_loop_is_checked_once_after_its_fixtures(
    pytester: pytest.Pytester,
) -> None:
    source = """
import asyncio
import pytest
import pytest_asyncio

pytestmark = pytest.mark.asyncio(loop_scope="module")
STARTED = []

@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def service():
    task = asyncio.create_task(asyncio.Event().wait(), name="module-service")
    yield task
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

async def test_one(service):
    # Tasks of a longer-lived fixture outlive each test: not a leak of the test.
    STARTED.append(asyncio.create_task(asyncio.sleep(0.01), name="quick"))

async def test_two(service):
    STARTED.append(asyncio.create_task(asyncio.Event().wait(), name="module-straggler"))
"""
    result = _run(pytester, {"guarded/test_module.py": source})
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*module test_module.py left 1 asyncio task(s) running:*", "*module-straggler at wait*"]
    )
    assert "module-service at" not in result.stdout.str()


def test_sim_and_kube_fixtures_and_the_kubesim_marker(pytester: pytest.Pytester) -> None:
    source = """
import pytest
from hami_kube.resources import NAMESPACES

async def test_a_client_talks_to_the_served_api_server(sim, kube):
    await kube.create(NAMESPACES, {"metadata": {"name": "plugin-test"}})
    assert sim.server.try_get("namespaces", "plugin-test") is not None
    assert sim.url.startswith("http://127.0.0.1:")

@pytest.mark.kubesim(watch_queue_limit=7)
async def test_options_reach_the_api_server(sim):
    assert sim.server.watch_queue_limit == 7
"""
    result = _run(pytester, {"guarded/test_sim.py": source})
    result.assert_outcomes(passed=2)


def test_looptime_marker_and_its_misuse(pytester: pytest.Pytester) -> None:
    source = """
import asyncio
import time
import pytest

@pytest.mark.looptime
async def test_an_hour_passes_at_once():
    loop = asyncio.get_running_loop()
    start, real = loop.time(), time.monotonic()
    await asyncio.sleep(3600)
    assert loop.time() - start == pytest.approx(3600)
    assert time.monotonic() - real < 2

async def test_without_the_marker_time_is_real():
    loop = asyncio.get_running_loop()
    start = loop.time()
    await asyncio.sleep(0.05)
    assert 0.04 <= loop.time() - start < 2
"""
    misuse = """
import asyncio
import pytest

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.looptime]

async def test_shared_loop():
    await asyncio.sleep(1)
"""
    result = _run(pytester, {"guarded/test_looptime.py": source})
    result.assert_outcomes(passed=2)
    bad = _run(pytester, {"guarded/test_looptime.py": misuse})
    bad.stderr.fnmatch_lines(["*looptime needs a function-scoped loop*"])
