"""Generated TLS material for webhooks and extenders."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from hami_kubesim.certs import ca_bundle_b64, client_ssl_context, generate_ca, generate_server_tls


def test_server_certificate_names_and_chain() -> None:
    ca = generate_ca("unit-ca")
    cert = ca.issue(["127.0.0.1", "hami.kube-system.svc"])
    parsed = x509.load_pem_x509_certificate(cert.cert_pem)
    san = parsed.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == ["hami.kube-system.svc"]
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert parsed.issuer == ca_cert.subject
    assert ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.ca_pem == ca.cert_pem
    with pytest.raises(ValueError, match="at least one"):
        ca.issue([])


def test_write_uses_secret_file_names_and_private_key_mode(tmp_path: Path) -> None:
    files = generate_server_tls(["localhost"]).write(tmp_path / "tls")
    assert (files.cert.name, files.key.name, files.ca.name) == ("tls.crt", "tls.key", "ca.crt")
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert files.cert.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")


def test_ca_bundle_round_trips() -> None:
    ca = generate_ca()
    assert base64.b64decode(ca_bundle_b64(ca.cert_pem)) == ca.cert_pem


async def test_handshake_trusts_only_the_issuing_ca() -> None:
    cert = generate_server_tls(["127.0.0.1"])

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=cert.server_ssl_context())
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ssl_context(cert.ca_pem)
        )
        assert await reader.read() == b"ok"
        writer.close()
        stranger = client_ssl_context(generate_ca("stranger").cert_pem)
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection("127.0.0.1", port, ssl=stranger)
    finally:
        server.close()
        await server.wait_closed()
