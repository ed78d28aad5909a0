"""``python -m hami_webhook`` as a real process behind the emulated API server, over HTTPS."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from hami_kube.config import KubeSettings, create_api_client
from hami_kube.errors import ApiError
from hami_kube.rest import KubeClient
from hami_kubesim.admission.dispatch import AdmissionDispatcher
from hami_kubesim.certs import ca_bundle_b64, client_ssl_context
from hami_kubesim.testing import running_apiserver

from .helpers import WebhookTls, container, eventually, gpu, pod

pytestmark = pytest.mark.timeout(90)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_service_process_mutates_denies_and_stops_on_sigterm(
    tls: WebhookTls, tmp_path: Path
) -> None:
    port, metrics_port = free_port(), free_port()
    config = tmp_path / "device-config.yaml"
    config.write_text("nvidia:\n  gpuCorePolicy: force\n")
    dispatcher = AdmissionDispatcher()
    async with running_apiserver(admission=dispatcher) as sim, dispatcher.connected(sim.url):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hami_webhook",
            f"--http_bind=127.0.0.1:{port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--cert_file={tls.files.cert}",
            f"--key_file={tls.files.key}",
            f"--kube-url={sim.url}",
            f"--device-config-file={config}",
            "--scheduler-name=hami-scheduler",
            "--log-format=json",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        api_client = await create_api_client(KubeSettings(kube_url=sim.url))
        api = KubeClient(api_client)
        context = client_ssl_context(tls.cert.ca_pem)
        try:
            async with aiohttp.ClientSession() as http:

                async def ready() -> bool:
                    if process.returncode is not None:
                        raise AssertionError(f"webhook exited with {process.returncode}")
                    try:
                        url = f"https://127.0.0.1:{port}/readyz"
                        async with http.get(url, ssl=context) as response:
                            return response.status == 200
                    except aiohttp.ClientConnectionError:
                        return False

                await eventually(ready, within=30, what="the webhook process is ready")
            await api.request(
                "POST",
                "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
                body={
                    "metadata": {"name": "hami-webhook"},
                    "webhooks": [
                        {
                            "name": "vgpu.hami.io",
                            "clientConfig": {
                                "url": f"https://127.0.0.1:{port}/webhook",
                                "caBundle": ca_bundle_b64(tls.cert.ca_pem),
                            },
                            "rules": [
                                {
                                    "operations": ["CREATE"],
                                    "apiGroups": [""],
                                    "apiVersions": ["v1"],
                                    "resources": ["pods"],
                                }
                            ],
                            "failurePolicy": "Fail",
                            "sideEffects": "None",
                            "admissionReviewVersions": ["v1beta1"],
                        }
                    ],
                },
            )
            await eventually(lambda: bool(dispatcher.webhooks), what="webhook registered")
            created = await api.request(
                "POST",
                "/api/v1/namespaces/default/pods",
                body=pod(container(limits=gpu()), name="gpu"),
            )
            with pytest.raises(ApiError) as denied:
                await api.request(
                    "POST",
                    "/api/v1/namespaces/default/pods",
                    body=pod(container(limits=gpu()), name="pinned", nodeName="n1"),
                )
        finally:
            await api_client.close()
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                _, stderr = await process.communicate()
    assert process.returncode == 0
    main = created["spec"]["containers"][0]
    assert created["spec"]["schedulerName"] == "hami-scheduler"
    assert main["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    assert main["env"] == [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": "force"}]
    assert denied.value.status == 403
    assert denied.value.message.endswith("pod has node assigned")
    events = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
    names = [event.get("event") for event in events]
    assert "webhook_started" in names
    assert "webhook_stopped" in names
    denial = next(event for event in events if event.get("event") == "admission_denied")
    assert (denial["pod"], denial["nodeName"]) == ("default/pinned", "n1")


def test_invalid_flags_exit_with_usage() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hami_webhook", "--cert_file=/only/one"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "--cert_file and --key_file must be given together" in result.stderr


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
