"""Start-up cost of each service process (and of the vGPU monitor): from exec to ``/readyz``
answering 200.

The bench starts the emulator itself (``python -m hami_kubesim cluster``: an API server and one
node with a kubelet stand-in), then for each service runs ``python -m <service>`` against it
several times and prints, per service, the fastest and the median time from ``exec`` to the
first 200 of ``/readyz`` (polled every 10 ms) and the process's resident memory (VmRSS) at that
moment.  Each process is stopped with SIGTERM before the next starts.  Then it runs the demo
(``python -m hami_kubesim.demo``) once and prints the time from its exec to its "system up" line,
next to the figure the demo prints itself.  Figures only, no assertions: the machine's load moves
them.

Run: ``uv run --frozen python bench/startup.py [--repeat N] [--skip-demo]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

NODE = "bench-node"
POLL_S = 0.01
READY_WITHIN_S = 60.0
_SYSTEM_UP = re.compile(r"system up in ([0-9.]+) s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mib(pid: int) -> float:
    """VmRSS of ``pid`` in MiB (0 when /proc cannot tell)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass(frozen=True, slots=True)
class Emulator:
    url: str
    plugin_dir: Path
    work: Path


@dataclass(slots=True)
class Figures:
    seconds: list[float] = field(default_factory=list)
    rss: list[float] = field(default_factory=list)

    def line(self, name: str) -> str:
        if not self.seconds:
            return f"{name:<14} no successful start"
        return (
            f"{name:<14} exec→/readyz min {min(self.seconds):5.2f} s  "
            f"median {statistics.median(self.seconds):5.2f} s   "
            f"RSS median {statistics.median(self.rss):6.1f} MiB  (n={len(self.seconds)})"
        )


@contextlib.asynccontextmanager
async def emulator(work: Path) -> AsyncIterator[Emulator]:
    """``hami-kubesim cluster`` with one node and its kubelet stand-in, as a process."""
    config = {
        "apiServer": {"host": "127.0.0.1", "port": 0},
        "namespaces": ["default", "kube-system"],
        "kubelet": {"pluginRoot": str(work / "p")},
        "nodes": [{"name": NODE, "labels": {"gpu": "on"}}],
        "admission": {"enabled": False},
        "scheduling": {"enabled": False},
    }
    path = work / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_kubesim",
        "cluster",
        f"--config={path}",
        "--log-level=WARNING",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    url, plugin_dir = "", Path()
    try:
        async with asyncio.timeout(READY_WITHIN_S):
            while (line := (await process.stdout.readline()).decode().strip()) != "ready":
                if not line and process.returncode is not None:
                    raise RuntimeError("the emulator exited before it was ready")
                words = line.split()
                if words[:1] == ["api-server"]:
                    url = words[1]
                elif words[:1] == ["node"]:
                    plugin_dir = Path(words[3])
        yield Emulator(url=url, plugin_dir=plugin_dir, work=work)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()


def service_args(name: str, emu: Emulator, metrics_port: int) -> list[str]:
    common = [
        f"--kube-url={emu.url}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--log-level=warning",
    ]
    if name == "hami_scheduler":
        return [
            f"--http_bind=127.0.0.1:{free_port()}",
            "--gpumap-bind-address=127.0.0.1:0",
            *common,
        ]
    if name == "hami_webhook":
        return [f"--http_bind=127.0.0.1:{free_port()}", *common]
    devices = emu.work / "devices.yaml"
    if name == "hami_deviceplugin.monitor":
        hook = emu.work / "vgpu"
        (hook / "containers").mkdir(parents=True, exist_ok=True)
        return [
            f"--node-name={NODE}",
            f"--hook-path={hook}",
            "--device-backend=fake",
            f"--fake-devices={devices}",
            f"--mig-lock-file={emu.work / 'mig.lock'}",
            *common,
        ]
    gpus = [
        {"uuid": f"GPU-{i:08d}-0000-0000-0000-000000000000", "index": i, "model": "Tesla T4"}
        | {"memory_mib": 15360, "numa": 0, "healthy": True}
        for i in range(2)
    ]
    devices.write_text(yaml.safe_dump({"gpus": gpus, "nics": []}))
    return [
        f"--node-name={NODE}",
        f"--kubelet-socket={emu.plugin_dir / 'kubelet.sock'}",
        "--device-backend=fake",
        f"--fake-devices={devices}",
        "--host-root=none",
        "--kubelet-poll-interval=0.2",
        *common,
    ]


async def start_once(http: aiohttp.ClientSession, name: str, emu: Emulator) -> tuple[float, float]:
    """One exec → /readyz 200; returns (seconds, RSS MiB) and stops the process."""
    metrics_port = free_port()
    ready_url = f"http://127.0.0.1:{metrics_port}/readyz"
    args = service_args(name, emu, metrics_port)
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        name,
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(READY_WITHIN_S):
            while True:
                if process.returncode is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(ready_url) as response:
                        if response.status == 200:
                            break
                await asyncio.sleep(POLL_S)
        return time.perf_counter() - started, rss_mib(process.pid)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            await process.wait()


async def services(repeat: int) -> None:
    with tempfile.TemporaryDirectory(prefix="hami-startup-") as tmp:
        async with emulator(Path(tmp)) as emu, aiohttp.ClientSession() as http:
            names = (
                "hami_scheduler",
                "hami_webhook",
                "hami_deviceplugin",
                "hami_deviceplugin.monitor",
            )
            for name in names:
                figures = Figures()
                for _ in range(repeat):
                    seconds, rss = await start_once(http, name, emu)
                    figures.seconds.append(seconds)
                    figures.rss.append(rss)
                label = "vgpu-monitor" if name.endswith(".monitor") else name.removeprefix("hami_")
                print(figures.line(label), flush=True)


async def demo() -> None:
    """Exec → the demo's "system up" line (and the figure the demo prints itself)."""
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_kubesim.demo",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    seen: float | None = None
    own = ""
    async with asyncio.timeout(300):
        async for raw in process.stdout:
            found = _SYSTEM_UP.search(raw.decode(errors="replace"))
            if found and seen is None:
                seen, own = time.perf_counter() - started, found.group(1)
        status = await process.wait()
    if seen is None:
        print(f"demo           no 'system up' line (exit status {status})")
        return
    print(
        f"demo           exec→'system up' {seen:5.2f} s  (the demo says {own} s; "
        f"finished in {time.perf_counter() - started:.1f} s, exit status {status})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="starts per service")
    parser.add_argument("--skip-demo", action="store_true", help="do not run the demo")
    args = parser.parse_args(argv)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.repeat} starts each")
    asyncio.run(services(max(1, args.repeat)))
    if not args.skip_demo:
        asyncio.run(demo())
    return 0


if __name__ == "__main__":
    sys.exit(main())
