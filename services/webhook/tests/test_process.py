"""``python -m hami_webhook`` as a real process: what only a process shows (signals, exit status,
its log lines, its shutdown with hung peers).  Flag parsing is tested in-process
(``test_settings.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from hami_kube.config import KubeSettings
from hami_kube.errors import ApiError
from hami_kube.rest import open_client
from hami_kubesim.admission.dispatch import AdmissionDispatcher
from hami_kubesim.certs import client_ssl_context
from hami_kubesim.stack.system.ports import free_port
from hami_kubesim.testing import running_apiserver

from .helpers import MWC_PATH, WebhookTls, container, eventually, gpu, pod, webhook_configuration

pytestmark = pytest.mark.timeout(90)

GRACE_S = 3.0
EXIT_SLACK_S = 1.5
"""Past the grace period: the end of the event loop (leftover tasks get 1 s) and the interpreter's
exit."""


@dataclass(frozen=True)
class WebhookProcess:
    """``python -m hami_webhook`` over HTTPS on free ports, logging JSON to a pipe."""

    process: asyncio.subprocess.Process
    port: int
    metrics_port: int

    async def wait_ready(self) -> None:
        """Until ``/readyz`` answers 200 (the quota watches have listed)."""
        async with aiohttp.ClientSession() as http:

            async def ready() -> bool:
                if self.process.returncode is not None:
                    raise AssertionError(f"webhook exited with {self.process.returncode}")
                try:
                    url = f"http://127.0.0.1:{self.metrics_port}/readyz"
                    async with http.get(url) as response:
                        return response.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await eventually(ready, within=30, what="the webhook process is ready")

    async def stop(self) -> list[dict[str, object]]:
        """SIGTERM, then its exit; the JSON log lines it wrote."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(GRACE_S + 30):
            _, stderr = await self.process.communicate()
        lines = stderr.decode().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]


@contextlib.asynccontextmanager
async def webhook_process(tls: WebhookTls, *flags: str) -> AsyncIterator[WebhookProcess]:
    port, metrics_port = free_port(), free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_webhook",
        f"--http_bind=127.0.0.1:{port}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        f"--cert_file={tls.files.cert}",
        f"--key_file={tls.files.key}",
        "--log-format=json",
        *flags,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield WebhookProcess(process, port, metrics_port)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_service_process_mutates_denies_and_stops_on_sigterm(
    tls: WebhookTls, tmp_path: Path
) -> None:
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  gpuCorePolicy: force\n")
    dispatcher = AdmissionDispatcher()
    async with (
        running_apiserver(admission=dispatcher) as sim,
        dispatcher.connected(sim.url),
        webhook_process(
            tls,
            f"--kube-url={sim.url}",
            f"--device-config-file={config}",
            "--scheduler-name=hami-scheduler",
        ) as webhook,
        open_client(KubeSettings(kube_url=sim.url)) as api,
    ):
        await webhook.wait_ready()
        await api.request(
            "POST",
            MWC_PATH,
            body=webhook_configuration(
                f"https://127.0.0.1:{webhook.port}",
                tls.cert.ca_pem,
                failure_policy="Fail",
                version="v1beta1",
            ),
        )
        await eventually(lambda: bool(dispatcher.webhooks), what="webhook registered")
        created = await api.request(
            "POST", "/api/v1/namespaces/default/pods", body=pod(container(limits=gpu()), name="gpu")
        )
        with pytest.raises(ApiError) as denied:
            await api.request(
                "POST",
                "/api/v1/namespaces/default/pods",
                body=pod(container(limits=gpu()), name="pinned", nodeName="n1"),
            )
        events = await webhook.stop()
    assert webhook.process.returncode == 0
    main = created["spec"]["containers"][0]
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert main["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    assert main["env"] == [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]
    assert denied.value.status == 403
    assert denied.value.message.endswith("pod has node assigned")
    names = [event.get("event") for event in events]
    assert "webhook_started" in names
    assert "webhook_stopped" in names
    denial = next(event for event in events if event.get("event") == "admission_denied")
    assert (denial["pod"], denial["nodeName"]) == ("default/pinned", "n1")


def test_startup_failure_exits_1_with_a_log_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "hami_webhook",
            f"--cert_file={tmp_path / 'missing.crt'}",
            f"--key_file={tmp_path / 'missing.key'}",
            "--enable-quota=false",
            "--http_bind=127.0.0.1:0",
            "--metrics-bind-address=127.0.0.1:0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 1
    line = json.loads(result.stderr.strip().splitlines()[-1])
    assert line["event"] == "webhook_failed_to_start"
    assert "missing.crt" in line["error"] or "No such file" in line["error"]


class FreezableProxy:
    """A TCP proxy in front of the API server that can stop answering: once frozen it forwards
    nothing in either direction and accepts new connections without serving them, but closes
    no socket, like an API server that hangs."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream_port = upstream_port
        self._frozen = False
        self._pumps: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[tuple[FreezableProxy, int]]:
        server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        try:
            yield self, int(server.sockets[0].getsockname()[1])
        finally:
            server.close()
            self.freeze()
            await asyncio.gather(*self._pumps, return_exceptions=True)
            for writer in self._writers:
                writer.close()

    def freeze(self) -> None:
        self._frozen = True
        for pump in self._pumps:
            pump.cancel()

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        if self._frozen:
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        self._writers.append(up_writer)
        for source, target in ((reader, up_writer), (up_reader, writer)):
            pump = asyncio.get_running_loop().create_task(self._pump(source, target))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    @staticmethod
    async def _pump(source: asyncio.StreamReader, target: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            target.write(data)
            await target.drain()


async def _tls_connection(
    port: int, context: ssl.SSLContext
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, ssl=context)


async def test_sigterm_exits_within_the_grace_period_while_peers_hang(
    tls: WebhookTls,
) -> None:
    """Clients holding a keep-alive connection, sending half a request and half a body, and an
    API server that stops answering in the middle of the quota watches: SIGTERM still ends the
    process, cleanly, within ``--shutdown-grace-period``."""
    context = client_ssl_context(tls.cert.ca_pem)
    held: list[asyncio.StreamWriter] = []
    async with (
        running_apiserver() as sim,
        FreezableProxy(sim.port).serving() as (proxy, proxy_port),
        webhook_process(
            tls,
            f"--kube-url=http://127.0.0.1:{proxy_port}",
            f"--shutdown-grace-period={GRACE_S:g}s",
        ) as webhook,
    ):
        await webhook.wait_ready()
        try:
            # A keep-alive connection that served one request and stays open.
            reader, writer = await _tls_connection(webhook.port, context)
            held.append(writer)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n")
            assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 200")
            # Half a body: the review handler is waiting for the rest.
            _, writer = await _tls_connection(webhook.port, context)
            held.append(writer)
            writer.write(
                b"POST /webhook HTTP/1.1\r\nHost: webhook\r\n"
                b"Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n"
                b'{"apiVersion": "admission.k8s.io/v1", '
            )
            await writer.drain()
            # Half the headers.
            _, writer = await _tls_connection(webhook.port, context)
            held.append(writer)
            writer.write(b"POST /webhook HTTP/1.1\r\nHost: webhook\r\nContent-Le")
            await writer.drain()
            # The server has read what the earlier connections sent by the time it answers a
            # request sent after them.
            reader, writer = await _tls_connection(webhook.port, context)
            held.append(writer)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n")
            assert (await reader.readuntil(b"\r\n")).startswith(b"HTTP/1.1 200")
            proxy.freeze()

            signalled = time.monotonic()
            events = await webhook.stop()
            took = time.monotonic() - signalled
        finally:
            for writer in held:
                writer.close()
    assert webhook.process.returncode == 0, events[-5:]
    assert took <= GRACE_S + EXIT_SLACK_S, took
    names = [event.get("event") for event in events]
    assert names.index("stop_signal_received") < names.index("webhook_stopped")
    assert "second_stop_signal_exiting_now" not in names
