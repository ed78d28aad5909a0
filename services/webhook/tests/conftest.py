"""Fixtures: throw-away TLS material written where ``--cert_file``/``--key_file`` can read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hami_kubesim.certs import ServerCertificate, generate_ca

from .helpers import SERVICE_HOST, WebhookTls


@pytest.fixture(scope="session")
def certificate() -> ServerCertificate:
    return generate_ca("webhook-test-ca").issue(["127.0.0.1", SERVICE_HOST])


@pytest.fixture
def tls(tmp_path: Path, certificate: ServerCertificate) -> WebhookTls:
    return WebhookTls(certificate, certificate.write(tmp_path / "tls"))
