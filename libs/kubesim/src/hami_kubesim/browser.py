"""Headless Chromium for browser tests, driven over the DevTools protocol (no extra package).

Debian's ``chromium`` is found on ``PATH`` (or ``$HAMI_CHROMIUM``) or installed with apt, the way
the deployment checks get Prometheus: :func:`find_or_install_chromium`.  :func:`launch` starts it
headless with a fresh profile and no background networking (this machine's network is closed:
Chromium's own update and sync calls would only fail), and talks to it over the DevTools
WebSocket with aiohttp, which the suite already has::

    async with launch(executable, profile_dir) as browser:
        page = await browser.new_page()
        await page.goto(url)                      # waits for the load event
        html = await page.html()                  # the rendered DOM
        texts = await page.texts("table.cards th[scope=row]")
        await page.fill("input[name=gpus]", "2")
        await page.click_and_wait("form button")  # submits; waits for the next page's load
        await page.screenshot(path)               # the whole page, PNG
        page.responses, page.console_errors       # what it fetched, what it complained about

Pages run with their own Content-Security-Policy in force; only the test's DevTools calls
(``Runtime.evaluate``) are exempt, as DevTools always is.  The pytest plugin of this package
exposes it as the ``chromium_executable`` (session; skips, saying why, when Chromium cannot be
had), ``browser`` and ``screenshot_dir`` fixtures.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import aiohttp

__all__ = [
    "Browser",
    "BrowserError",
    "ChromiumUnavailableError",
    "Page",
    "Response",
    "find_or_install_chromium",
    "launch",
]

CALL_TIMEOUT_S: Final = 30.0
START_TIMEOUT_S: Final = 30.0
INSTALL_TIMEOUT_S: Final = 600
"""All of an install may take (browser tests set their pytest timeout above it)."""
MAX_SCREENSHOT_HEIGHT: Final = 8000
FLAGS: Final = (
    "--headless",
    "--no-sandbox",  # tests run as root in containers, where Chromium's sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class ChromiumUnavailableError(RuntimeError):
    """Chromium is not installed and could not be installed here (the message says why)."""


class BrowserError(RuntimeError):
    """A DevTools call failed, a page did not load, or a script threw."""


def find_or_install_chromium() -> Path:
    """``$HAMI_CHROMIUM``, else ``chromium`` on ``PATH``, else Debian's package through apt.

    Installing needs root and apt (as CI has); the package pulls in its libraries, which is why
    it is installed rather than unpacked like Prometheus.  Raises :class:`ChromiumUnavailableError`.
    """
    configured = os.environ.get("HAMI_CHROMIUM")
    if configured:
        if Path(configured).is_file():
            return Path(configured)
        raise ChromiumUnavailableError(f"HAMI_CHROMIUM={configured} does not exist")
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return Path(found)
    if not shutil.which("apt-get"):
        raise ChromiumUnavailableError("chromium is not installed and apt-get is not available")
    if os.geteuid() != 0:
        raise ChromiumUnavailableError(
            "chromium is not installed and installing it needs root (apt-get install chromium)"
        )
    install = [
        "install", "-y", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", "chromium"
    ]  # fmt: skip
    deadline = time.monotonic() + INSTALL_TIMEOUT_S
    try:
        done = _apt(install, deadline)
        if done.returncode != 0:  # stale package lists: refresh once, then try again
            _apt(["update"], deadline)
            done = _apt(install, deadline)
    except (subprocess.SubprocessError, OSError) as exc:
        raise ChromiumUnavailableError(f"apt-get install chromium failed: {exc}") from exc
    found = shutil.which("chromium")
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ChromiumUnavailableError(f"apt-get install chromium failed: {' / '.join(tail)}")
    return Path(found)


def _apt(args: list[str], deadline: float) -> subprocess.CompletedProcess[str]:
    """``apt-get args``, killed at ``deadline`` (the install's whole budget, not each step's)."""
    return subprocess.run(
        ["apt-get", *args],
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        capture_output=True,
        text=True,
        timeout=max(deadline - time.monotonic(), 1.0),
        check=False,
    )


@dataclass(frozen=True, slots=True)
class Response:
    """One HTTP response a page received (main document or sub-resource)."""

    url: str
    status: int


class _DevTools:
    """One DevTools WebSocket: numbered calls answered by id, events handed to waiters."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._next_id = 0
        self._calls: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: list[tuple[str, str | None, asyncio.Future[dict[str, Any]]]] = []
        self.listeners: dict[str, list[Any]] = {}
        self._reader = asyncio.get_running_loop().create_task(self._read(), name="devtools-read")

    async def call(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        answer = asyncio.get_running_loop().create_future()
        self._calls[self._next_id] = answer
        await self._ws.send_str(json.dumps(message))
        async with asyncio.timeout(CALL_TIMEOUT_S):
            reply = await answer
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def expect(self, method: str, session: str | None) -> asyncio.Future[dict[str, Any]]:
        """A future for the next ``method`` event: register it *before* the action causing it."""
        waiter: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiters.append((method, session, waiter))
        return waiter

    async def _read(self) -> None:
        async for frame in self._ws:
            if frame.type != aiohttp.WSMsgType.TEXT:
                break
            message = json.loads(frame.data)
            if "id" in message:
                answer = self._calls.pop(message["id"], None)
                if answer is not None and not answer.done():
                    answer.set_result(message)
                continue
            method, session = message.get("method"), message.get("sessionId")
            for listener in self.listeners.get(f"{session}:{method}", ()):
                listener(message.get("params", {}))
            for waiter_entry in list(self._waiters):
                wanted, wanted_session, waiter = waiter_entry
                if wanted == method and wanted_session == session:
                    self._waiters.remove(waiter_entry)
                    if not waiter.done():
                        waiter.set_result(message.get("params", {}))
        closed = BrowserError("the DevTools connection closed")
        for pending in [*self._calls.values(), *(w for _, _, w in self._waiters)]:
            if not pending.done():
                pending.set_exception(closed)

    async def close(self) -> None:
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader


@dataclass
class Page:
    """One tab.  ``responses`` and ``console_errors`` accumulate over its whole life."""

    _tools: _DevTools
    _session: str
    responses: list[Response] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def _listen(self) -> None:
        def response(params: dict[str, Any]) -> None:
            got = params.get("response", {})
            self.responses.append(Response(str(got.get("url")), int(got.get("status", 0))))

        def log(params: dict[str, Any]) -> None:
            entry = params.get("entry", {})
            if entry.get("level") == "error":
                self.console_errors.append(f"{entry.get('source')}: {entry.get('text')}")

        def thrown(params: dict[str, Any]) -> None:
            self.console_errors.append(f"exception: {params.get('exceptionDetails')}")

        for method, listener in (
            ("Network.responseReceived", response),
            ("Log.entryAdded", log),
            ("Runtime.exceptionThrown", thrown),
        ):
            self._tools.listeners.setdefault(f"{self._session}:{method}", []).append(listener)

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._tools.call(method, params, self._session)

    async def _until_loaded(self, action: Awaitable[None]) -> None:
        loaded = self._tools.expect("Page.loadEventFired", self._session)
        try:
            await action
            async with asyncio.timeout(CALL_TIMEOUT_S):
                await loaded
        finally:
            loaded.cancel()

    async def goto(self, url: str) -> None:
        """Navigate and wait for the load event; a network failure raises."""

        async def navigate() -> None:
            result = await self._call("Page.navigate", {"url": url})
            if result.get("errorText"):
                raise BrowserError(f"{url}: {result['errorText']}")

        await self._until_loaded(navigate())

    async def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page; a thrown error raises."""
        result = await self._call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    async def url(self) -> str:
        return str(await self.evaluate("location.href"))

    async def html(self) -> str:
        """The rendered DOM, serialized (what ``--dump-dom`` prints)."""
        return str(await self.evaluate("document.documentElement.outerHTML"))

    async def texts(self, selector: str) -> list[str]:
        """The visible text (``innerText``) of every element matching ``selector``."""
        found = await self.evaluate(
            f"Array.from(document.querySelectorAll({json.dumps(selector)}), e => e.innerText)"
        )
        return [str(text) for text in found or ()]

    async def fill(self, selector: str, value: str) -> None:
        """Set the value of the (first) form field matching ``selector``."""
        ok = await self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
            f" if (!e) return false; e.value = {json.dumps(value)}; return true; }})()"
        )
        if not ok:
            raise BrowserError(f"no form field matches {selector!r}")

    async def click_and_wait(self, selector: str) -> None:
        """Click the (first) element matching ``selector``; wait for the page it loads."""

        async def click() -> None:
            ok = await self.evaluate(
                f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                " if (!e) return false; e.click(); return true; })()"
            )
            if not ok:
                raise BrowserError(f"nothing matches {selector!r}")

        await self._until_loaded(click())

    async def screenshot(self, path: Path, *, width: int = 1280) -> Path:
        """A PNG of the whole page (up to :data:`MAX_SCREENSHOT_HEIGHT` px), ``width`` wide."""
        height = await self.evaluate("document.documentElement.scrollHeight")
        height = max(min(int(height or 800), MAX_SCREENSHOT_HEIGHT), 200)
        await self._call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        shot = await self._call(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True}
        )
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))
        return path


@dataclass
class Browser:
    """A running headless Chromium; :meth:`new_page` opens tabs."""

    _tools: _DevTools
    stderr_tail: deque[str]

    async def new_page(self) -> Page:
        target = await self._tools.call("Target.createTarget", {"url": "about:blank"})
        attached = await self._tools.call(
            "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
        )
        page = Page(self._tools, str(attached["sessionId"]))
        page._listen()
        for domain in ("Page", "Network", "Log", "Runtime"):
            await page._call(f"{domain}.enable")
        return page


@asynccontextmanager
async def launch(executable: Path, profile_dir: Path) -> AsyncIterator[Browser]:
    """Chromium headless with a fresh profile in ``profile_dir``; stopped (and waited for) on
    exit, with every task it needed."""
    await asyncio.to_thread(profile_dir.mkdir, parents=True, exist_ok=True)
    process = await asyncio.create_subprocess_exec(
        str(executable),
        *FLAGS,
        f"--user-data-dir={profile_dir}",
        "about:blank",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    stderr_tail: deque[str] = deque(maxlen=50)
    drain: asyncio.Task[None] | None = None
    session: aiohttp.ClientSession | None = None
    tools: _DevTools | None = None
    try:
        url = await _devtools_url(process.stderr, stderr_tail)
        drain = asyncio.get_running_loop().create_task(
            _drain(process.stderr, stderr_tail), name="chromium-stderr"
        )
        session = aiohttp.ClientSession()
        ws = await session.ws_connect(url, max_msg_size=0)
        tools = _DevTools(ws)
        yield Browser(tools, stderr_tail)
    finally:
        if tools is not None:
            with contextlib.suppress(BrowserError, TimeoutError, ConnectionError):
                await tools.call("Browser.close")
            await tools.close()
        if session is not None:
            await session.close()
        if process.returncode is None:
            try:
                async with asyncio.timeout(10):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        if drain is not None:
            drain.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await drain


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


async def _devtools_url(stderr: asyncio.StreamReader, tail: deque[str]) -> str:
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            while line := (await stderr.readline()).decode(errors="replace"):
                tail.append(line.rstrip())
                if match := _LISTENING.search(line):
                    return match.group(1)
    except TimeoutError:
        pass
    raise BrowserError("chromium did not start: " + " / ".join(tail))


async def _drain(stderr: asyncio.StreamReader, tail: deque[str]) -> None:
    """Keep reading Chromium's log so that a full pipe never blocks it (the tail is kept)."""
    while line := await stderr.readline():
        tail.append(line.decode(errors="replace").rstrip())
