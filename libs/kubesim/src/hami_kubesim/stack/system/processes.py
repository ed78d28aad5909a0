"""Services as child processes: start, wait until ready, stop, kill, restart, capture logs.

A :class:`ServiceProcess` runs ``python -m <module> <args>`` with this interpreter (the same
virtual environment), its stdout and stderr appended to one log file, and polls its plain-http
``/readyz`` (or ``/healthz``) until it answers 200. Stopping sends SIGTERM and waits a bounded
time before SIGKILL; :meth:`ServiceProcess.kill` is the crash (SIGKILL at once).

A child never outlives the process that started it: each one is launched through a small
bootstrap that asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``) before it
runs the module, so a test run killed from outside leaves nothing behind. Normal teardown stops
every child explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

__all__ = [
    "ProcessExitedError",
    "ServiceProcess",
    "ServiceSpec",
    "log_tail",
    "stop_all",
]

# Runs in the child before the module: die with the parent (Linux), and leave at once when the
# parent is already gone. Elsewhere the child is only stopped by the explicit teardown.
_BOOTSTRAP = """
import os, runpy, signal, sys
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    if os.getppid() != int(sys.argv[1]):
        sys.exit(70)
module = sys.argv[2]
sys.argv = [module, *sys.argv[3:]]
if module.endswith(".py"):
    runpy.run_path(module, run_name="__main__")
else:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
"""

_POLL_INTERVAL = 0.05


class ProcessExitedError(RuntimeError):
    """The service exited while it was expected to start or serve; carries its log tail."""


def log_tail(path: Path, *, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file ("" when there is none)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    """How to run one service process."""

    name: str
    """Short unique name (``webhook``, ``scheduler-0``, ``deviceplugin-gpu-node-a``)."""
    module: str
    """Run as ``python -m <module>`` (or ``python <module>`` when it names a ``.py`` file)."""
    args: tuple[str, ...]
    ready_url: str
    """Polled until it answers 200 (plain http, e.g. the metrics port's ``/readyz``)."""
    metrics_url: str = ""
    log_file: Path = Path("service.log")
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to this process's environment."""
    ready_timeout: float = 30.0
    stop_timeout: float = 8.0


class ServiceProcess:
    """One service as a child process; ``start`` again after ``stop``/``kill`` to restart it."""

    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        self.starts = 0
        self._process: asyncio.subprocess.Process | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.returncode

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.spec.log_file, lines=lines)

    async def start(self, *, wait: bool = True) -> None:
        """Launch the process (a no-op while it runs) and, with ``wait``, wait until ready."""
        if self.running:
            return
        spec = self.spec
        spec.log_file.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
        with spec.log_file.open("ab") as log:
            log.write(f"--- start #{self.starts + 1} of {spec.name} ---\n".encode())
            log.flush()
            self._process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _BOOTSTRAP,
                str(os.getpid()),
                spec.module,
                *spec.args,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
            )
        self.starts += 1
        if wait:
            await self.wait_ready()

    async def wait_ready(self, *, within: float | None = None, url: str | None = None) -> None:
        """Poll the ready URL until 200; :class:`ProcessExitedError` if the process exits,
        ``TimeoutError`` after ``within`` (default: the spec's) seconds."""
        target = url or self.spec.ready_url
        limit = self.spec.ready_timeout if within is None else within
        deadline = time.monotonic() + limit
        probe_timeout = aiohttp.ClientTimeout(total=2.0)
        async with aiohttp.ClientSession(timeout=probe_timeout) as http:
            while True:
                self._raise_if_exited("while starting")
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with http.get(target) as response:
                        if response.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{self.name} not ready at {target} within {limit} s; log tail:\n"
                        f"{self.log_tail()}"
                    )
                await asyncio.sleep(_POLL_INTERVAL)

    def _raise_if_exited(self, when: str) -> None:
        if self._process is not None and self._process.returncode is not None:
            raise ProcessExitedError(
                f"{self.name} exited with {self._process.returncode} {when}; log tail:\n"
                f"{self.log_tail()}"
            )

    async def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after ``stop_timeout`` seconds; returns the exit status."""
        return await self._end(signal.SIGTERM)

    async def kill(self) -> int | None:
        """SIGKILL at once (a crash); returns the exit status."""
        return await self._end(signal.SIGKILL)

    async def restart(self, *, crash: bool = False) -> None:
        """Stop (or kill, with ``crash``) and start again, waiting until ready."""
        await (self.kill() if crash else self.stop())
        await self.start()

    async def _end(self, how: signal.Signals) -> int | None:
        process = self._process
        if process is None:
            return None
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(how)
            try:
                async with asyncio.timeout(self.spec.stop_timeout):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        return process.returncode

    def kill_now(self) -> None:
        """SIGKILL without waiting (for teardown paths that cannot await)."""
        if self._process is not None and self._process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()


async def stop_all(processes: Sequence[ServiceProcess]) -> None:
    """Stop every process concurrently; a failure to stop one never leaves another running."""
    results = await asyncio.gather(*(p.stop() for p in processes), return_exceptions=True)
    for process, result in zip(processes, results, strict=True):
        if isinstance(result, BaseException):
            process.kill_now()
