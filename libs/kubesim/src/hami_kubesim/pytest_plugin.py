"""The pytest plugin kubesim ships (entry point ``pytest11: hami_kubesim``).

Fixtures:

- ``sim``: a running kubesim API server on a real socket (``127.0.0.1``, a free port), a
  :class:`~hami_kubesim.testing.RunningApiServer`; ``@pytest.mark.kubesim(**options)`` passes
  options to :func:`~hami_kubesim.testing.running_apiserver` (``bookmark_interval=0.2``, ...).
  A test package's own ``sim`` fixture overrides this one.
- ``kube``: a :class:`hami_kube.rest.KubeClient` for ``sim`` (10 s request timeout).
- ``chromium_executable`` (session): Debian's headless Chromium, found or installed with apt
  (:func:`~hami_kubesim.browser.find_or_install_chromium`); tests using it skip, saying why,
  where it cannot be had.  ``browser``: a :class:`~hami_kubesim.browser.Browser` running it for
  the test (function-scoped loop; a test on a longer-lived loop uses
  :func:`~hami_kubesim.browser.launch` itself).  ``screenshot_dir`` (session): where browser tests
  keep screenshots for a person to look at: ``$HAMI_SCREENSHOT_DIR``, else ``build/screenshots``
  under the root dir (git-ignored).
- ``no_leaked_tasks``: fails the test when an asyncio task it started is still pending once the
  test and its fixtures are torn down; the failure names each task and where it waits.  It is
  autouse for the async tests under the paths of the ``kubesim_task_guard`` ini option (see
  below).  A test whose event loop lives longer than the test (``loop_scope="module"`` or
  ``"package"``) is checked once per loop instead: after the last test of that module or package
  and every fixture of that scope are torn down.

Markers:

- ``@pytest.mark.looptime``: the test's event loop runs on virtual time (:mod:`.virtual_clock`):
  ``loop.time()`` stands still while anything can run and jumps to the next timer when the loop
  is idle, so sleeps, timeouts and back-offs take no real time and fire in a fixed order.
  ``@pytest.mark.looptime(idle=0.002)`` sets how long a real ``select`` confirms idleness
  before each jump (default :data:`~.virtual_clock.IDLE_CONFIRM_S`).  Only for function-scoped
  loops.  Code under test must read time from its loop (``loop.time()``), not from
  ``time.monotonic()``.
- ``@pytest.mark.kubesim(**options)``: options of the ``sim`` fixture.

Ini options (``[tool.pytest.ini_options]``):

- ``kubesim_task_guard``: paths (relative to the root dir) under which ``no_leaked_tasks`` is
  autouse for every async test.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import pytest_asyncio

from hami_kube.config import KubeSettings
from hami_kube.rest import KubeClient, open_client
from hami_kubesim.browser import Browser, ChromiumUnavailableError, find_or_install_chromium, launch
from hami_kubesim.testing import RunningApiServer, running_apiserver
from hami_kubesim.virtual_clock import IDLE_CONFIRM_S, virtual_time
from hami_runtime.lifecycle import describe_tasks

__all__ = [
    "browser",
    "chromium_executable",
    "kube",
    "no_leaked_tasks",
    "screenshot_dir",
    "sim",
]

GUARD_INI: Final = "kubesim_task_guard"
_SETTLE_CYCLES: Final = 20
"""Loop iterations a task that is already finishing gets before it counts as leaked."""
_SETTLE_S: Final = 0.5
"""Then how long (real time) tasks still ending get, e.g. closing a connection."""
_GUARD_BY_SCOPE: Final = {
    "function": "no_leaked_tasks",
    "module": "_no_leaked_tasks_in_module",
    "package": "_no_leaked_tasks_in_package",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        GUARD_INI,
        type="paths",
        default=[],
        help="paths under which every async test fails when it leaves asyncio tasks running",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "looptime(idle=0.001): run the test's event loop on virtual time (hami_kubesim plugin)",
    )
    config.addinivalue_line(
        "markers", "kubesim(**options): options of the sim fixture's API server (hami_kubesim)"
    )


def _loop_scope(item: pytest.Item) -> str:
    marker = item.get_closest_marker("asyncio")
    scope = marker.kwargs.get("loop_scope") if marker is not None else None
    return str(scope or item.config.getini("asyncio_default_test_loop_scope") or "function")


def _guarded(item: pytest.Item, roots: list[Path]) -> bool:
    path = Path(str(item.path))
    return pytest_asyncio.is_async_test(item) and any(path.is_relative_to(r) for r in roots)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    roots = [Path(p) for p in config.getini(GUARD_INI)]
    for item in items:
        fixtures: list[str] = getattr(item, "fixturenames", [])
        if roots and _guarded(item, roots):
            guard = _GUARD_BY_SCOPE.get(_loop_scope(item))
            if guard is not None and guard not in fixtures:
                # First: set up before (and torn down after) every fixture of the test.
                fixtures.insert(0, guard)
        if item.get_closest_marker("looptime") is not None:
            if _loop_scope(item) != "function":
                raise pytest.UsageError(f"{item.nodeid}: looptime needs a function-scoped loop")
            if "_looptime" not in fixtures:
                # Outermost, even around the guard: every teardown then runs on the virtual
                # clock too.  Back on real time, a timer set in virtual time would lie ahead of
                # the real clock by all that was skipped, and a teardown waiting on one would
                # wait that long.
                fixtures.insert(0, "_looptime")


# --- sim and kube ---------------------------------------------------------------------------


@pytest.fixture
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[RunningApiServer]:
    """A kubesim API server on a real socket for the duration of the test."""
    marker = request.node.get_closest_marker("kubesim")
    options: dict[str, Any] = dict(marker.kwargs) if marker is not None else {}
    async with running_apiserver(**options) as running:
        yield running


@pytest.fixture
async def kube(sim: RunningApiServer) -> AsyncIterator[KubeClient]:
    """A hami_kube client for ``sim``."""
    async with open_client(KubeSettings(kube_url=sim.url, request_timeout_s=10.0)) as client:
        yield client


# --- a headless browser ------------------------------------------------------------------------


@pytest.fixture(scope="session")
def chromium_executable() -> Path:
    """Headless Chromium's executable; skips the tests using it where it cannot be had."""
    try:
        return find_or_install_chromium()
    except ChromiumUnavailableError as exc:
        pytest.skip(f"no headless Chromium for the browser tests: {exc}")


@pytest.fixture
async def browser(chromium_executable: Path, tmp_path: Path) -> AsyncIterator[Browser]:
    """Chromium, headless, with a fresh profile, for the duration of the test."""
    async with launch(chromium_executable, tmp_path / "chromium-profile") as running:
        yield running


@pytest.fixture(scope="session")
def screenshot_dir(pytestconfig: pytest.Config) -> Path:
    """``$HAMI_SCREENSHOT_DIR``, else ``<rootdir>/build/screenshots``; created."""
    configured = os.environ.get("HAMI_SCREENSHOT_DIR")
    path = Path(configured) if configured else pytestconfig.rootpath / "build" / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


# --- virtual time -----------------------------------------------------------------------------


@pytest.fixture
async def _looptime(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    marker = request.node.get_closest_marker("looptime")
    idle = float(marker.kwargs.get("idle", IDLE_CONFIRM_S)) if marker is not None else 0.0
    with virtual_time(asyncio.get_running_loop(), idle_confirm_s=idle):
        yield


# --- the leaked-task guard --------------------------------------------------------------------


async def _leftovers(before: set[asyncio.Task[Any]]) -> list[asyncio.Task[Any]]:
    """Tasks started since ``before`` was taken that do not end by themselves right away."""
    me = asyncio.current_task()

    def pending() -> list[asyncio.Task[Any]]:
        return [t for t in asyncio.all_tasks() if t is not me and t not in before and not t.done()]

    for _ in range(_SETTLE_CYCLES):
        if not pending():
            return []
        await asyncio.sleep(0)
    left = pending()
    if left:
        await asyncio.wait(left, timeout=_SETTLE_S)
    return pending()


def _report(what: str, leaked: list[asyncio.Task[Any]]) -> str:
    lines = "\n  ".join(describe_tasks(leaked))
    return f"{what} left {len(leaked)} asyncio task(s) running:\n  {lines}"


@asynccontextmanager
async def _guard(what: str) -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    leaked = await _leftovers(before)
    if leaked:
        pytest.fail(_report(what, leaked), pytrace=False)


@pytest.fixture
async def no_leaked_tasks(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    """Fail the test when it leaves asyncio tasks running (see the module docstring)."""
    async with _guard(f"test {request.node.name}"):
        yield


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def _no_leaked_tasks_in_module(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    async with _guard(f"module {request.node.name}"):
        yield


@pytest_asyncio.fixture(scope="package", loop_scope="package")
async def _no_leaked_tasks_in_package(request: pytest.FixtureRequest) -> AsyncIterator[None]:
    async with _guard(f"package {request.node.name}"):
        yield
