"""The ways production reaches a real API server, end to end over HTTPS.

A small TLS server stands in for the API server: it records the ``Authorization`` header and the
client certificate of each request.  ``open_client`` is built from a kubeconfig (bearer token
and CA file; client certificate and CA as inline data; an exec plugin) and from the in-cluster
service-account files, and one GET must arrive authenticated.  The last test checks, in a fresh
interpreter, that none of this imports kubernetes-asyncio's generated API and model classes.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hami_kube.config import KubeSettings
from hami_kube.errors import KubeError
from hami_kube.resources import NAMESPACES
from hami_kube.rest import open_client
from hami_kubesim.certs import CertificateAuthority, generate_ca


@dataclass
class Seen:
    authorization: list[str] = field(default_factory=list)
    client_cn: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class TlsApiServer:
    url: str
    port: int
    ca: CertificateAuthority
    ca_file: Path
    seen: Seen


def _client_certificate(ca: CertificateAuthority, name: str) -> tuple[bytes, bytes]:
    """A client certificate (``clientAuth``) for ``name`` signed by ``ca``: (cert, key) PEM."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[TlsApiServer]:
    ca = generate_ca("kube-test-ca")
    context = ca.issue(["127.0.0.1"]).server_ssl_context()
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=ca.cert_pem.decode())
    seen = Seen()

    async def namespace(request: web.Request) -> web.Response:
        seen.authorization.append(request.headers.get("Authorization", ""))
        peer: Any = request.transport.get_extra_info("peercert") if request.transport else None
        subject = dict(pair[0] for pair in (peer or {}).get("subject", ()))
        seen.client_cn.append(subject.get("commonName", ""))
        name = request.match_info["name"]
        return web.json_response({"kind": "Namespace", "metadata": {"name": name}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{name}", namespace)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = int(runner.addresses[0][1])
    ca_file = tmp_path / "ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    try:
        yield TlsApiServer(f"https://127.0.0.1:{port}", port, ca, ca_file, seen)
    finally:
        await runner.cleanup()


def _kubeconfig(path: Path, server: TlsApiServer, user: dict[str, Any], **cluster: Any) -> str:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server.url, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(document))
    return str(path)


async def _get_namespace(settings: KubeSettings, **kwargs: Any) -> str:
    async with open_client(settings, **kwargs) as client:
        found = await client.get(NAMESPACES, "default")
    return str(found["metadata"]["name"])


async def test_kubeconfig_bearer_token_and_ca_file(apiserver: TlsApiServer, tmp_path: Path) -> None:
    path = _kubeconfig(
        tmp_path / "config",
        apiserver,
        {"token": "token-from-kubeconfig"},
        **{"certificate-authority": str(apiserver.ca_file)},
    )
    assert await _get_namespace(KubeSettings(kubeconfig=path), environ={}) == "default"
    assert apiserver.seen.authorization == ["Bearer token-from-kubeconfig"]


async def test_kubeconfig_client_certificate_as_inline_data(
    apiserver: TlsApiServer, tmp_path: Path
) -> None:
    cert_pem, key_pem = _client_certificate(apiserver.ca, "system:node:n1")

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    path = _kubeconfig(
        tmp_path / "config",
        apiserver,
        {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
        **{"certificate-authority-data": b64(apiserver.ca.cert_pem)},
    )
    assert await _get_namespace(KubeSettings(kubeconfig=path), environ={}) == "default"
    assert apiserver.seen.client_cn == ["system:node:n1"]
    assert apiserver.seen.authorization == [""]


async def test_kubeconfig_exec_plugin(apiserver: TlsApiServer, tmp_path: Path) -> None:
    plugin = tmp_path / "credential.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "token-from-exec"},
    }
    plugin.write_text(f"print({json.dumps(json.dumps(credential))})\n")
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(plugin)],
        }
    }
    path = _kubeconfig(
        tmp_path / "config",
        apiserver,
        exec_user,
        **{"certificate-authority": str(apiserver.ca_file)},
    )
    assert await _get_namespace(KubeSettings(kubeconfig=path), environ={}) == "default"
    assert apiserver.seen.authorization == ["Bearer token-from-exec"]


async def test_in_cluster_service_account(apiserver: TlsApiServer, tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("token-from-service-account")
    (account / "ca.crt").write_bytes(apiserver.ca.cert_pem)
    environ = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(apiserver.port),
    }
    found = await _get_namespace(KubeSettings(), environ=environ, service_account=account)
    assert found == "default"
    assert apiserver.seen.authorization == ["Bearer token-from-service-account"]


async def test_in_cluster_without_a_token_is_a_kube_error(tmp_path: Path) -> None:
    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(KubeError, match="in-cluster"):
        async with open_client(KubeSettings(), environ=environ, service_account=tmp_path):
            pass


async def test_untrusted_server_is_refused(apiserver: TlsApiServer, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.crt"
    other_ca.write_bytes(generate_ca("someone-else").cert_pem)
    path = _kubeconfig(
        tmp_path / "config",
        apiserver,
        {"token": "t"},
        **{"certificate-authority": str(other_ca)},
    )
    with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
        await _get_namespace(KubeSettings(kubeconfig=path), environ={})
    assert apiserver.seen.authorization == []


def test_building_a_client_skips_the_generated_classes(tmp_path: Path) -> None:
    """In a fresh interpreter: no generated API or model module is imported by loading a
    kubeconfig and building a client, and the package still works in full for code that asks
    for those classes afterwards."""
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    script = textwrap.dedent(
        f"""
        import asyncio, json, sys
        from hami_kube.config import KubeSettings, create_api_client
        import hami_kube.rest

        async def build():
            for settings in (KubeSettings(kube_url="http://127.0.0.1:1"),
                             KubeSettings(kubeconfig={str(kubeconfig)!r})):
                api = await create_api_client(settings, {{}})
                await api.close()

        asyncio.run(build())
        generated = sorted(m for m in sys.modules
                           if m.startswith(("kubernetes_asyncio.client.api.",
                                            "kubernetes_asyncio.client.models.")))
        from kubernetes_asyncio.client import CoreV1Api, V1Pod
        import kubernetes_asyncio.client.models as models
        from kubernetes_asyncio import watch
        print(json.dumps({{"generated": generated,
                          "full": [CoreV1Api.__name__, V1Pod.__name__,
                                   models.V1Node.__name__, watch.Watch.__name__]}}))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["generated"] == []
    assert report["full"] == ["CoreV1Api", "V1Pod", "V1Node", "Watch"]
