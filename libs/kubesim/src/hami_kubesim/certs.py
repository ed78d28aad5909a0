"""Generated TLS material: a throw-away CA and server certificates it signs.

The admission webhook must be served over HTTPS with a certificate the API server verifies
against the configuration's ``caBundle``; the scheduler extender may be served over HTTPS too.
Tests and the demo have no certificate infrastructure, so this module mints what they need: a CA,
server certificates with DNS and IP subject alternative names (e.g.
``hami-scheduler.kube-system.svc`` and ``127.0.0.1``), and ready ``ssl.SSLContext`` objects for
both ends.

Keys are ECDSA P-256: as widely accepted as RSA and fast enough to mint per test.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateAuthority",
    "ServerCertificate",
    "TlsFiles",
    "ca_bundle_b64",
    "client_ssl_context",
    "generate_ca",
    "generate_server_tls",
    "load_cert_chain_pem",
]

# Certificates are back-dated so small clock differences between processes never make them
# "not yet valid".
_BACKDATE = dt.timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """Paths of PEM files written by :meth:`ServerCertificate.write`."""

    cert: Path
    key: Path
    ca: Path


@dataclass(frozen=True, slots=True)
class ServerCertificate:
    """A server certificate (PEM), its private key (PEM) and the CA certificate that signed it."""

    cert_pem: bytes
    key_pem: bytes
    ca_pem: bytes

    def server_ssl_context(self) -> ssl.SSLContext:
        """An ``ssl.SSLContext`` for a server presenting this certificate."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        load_cert_chain_pem(context, cert_pem=self.cert_pem, key_pem=self.key_pem)
        return context

    def write(
        self,
        directory: str | os.PathLike[str],
        *,
        cert_name: str = "tls.crt",
        key_name: str = "tls.key",
        ca_name: str = "ca.crt",
    ) -> TlsFiles:
        """Write the certificate, key (mode 0600) and CA into ``directory``; return the paths.

        The default names are the ones a Kubernetes TLS Secret mounts (``tls.crt``/``tls.key``).
        """
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        files = TlsFiles(cert=root / cert_name, key=root / key_name, ca=root / ca_name)
        files.cert.write_bytes(self.cert_pem)
        files.ca.write_bytes(self.ca_pem)
        _write_private(files.key, self.key_pem)
        return files


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A self-signed CA able to issue server certificates."""

    cert_pem: bytes
    key_pem: bytes

    def issue(
        self,
        hosts: Sequence[str],
        *,
        common_name: str | None = None,
        days: int = 365,
    ) -> ServerCertificate:
        """Issue a server certificate valid for every name in ``hosts``.

        Each host that parses as an IP address becomes an IP SAN, every other one a DNS SAN.
        """
        if not hosts:
            raise ValueError("a server certificate needs at least one host name or IP address")
        ca_cert = x509.load_pem_x509_certificate(self.cert_pem)
        ca_key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
            raise TypeError("the CA key must be an EC private key")
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or hosts[0])])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(_san_entries(hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=True,
                    key_cert_sign=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        return ServerCertificate(
            cert_pem=cert.public_bytes(serialization.Encoding.PEM),
            key_pem=_key_pem(key),
            ca_pem=self.cert_pem,
        )


def generate_ca(common_name: str = "hami-kubesim-ca", *, days: int = 3650) -> CertificateAuthority:
    """Create a new self-signed certificate authority."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key)
    )


def generate_server_tls(
    hosts: Sequence[str], *, ca_common_name: str = "hami-kubesim-ca"
) -> ServerCertificate:
    """A fresh CA and a server certificate for ``hosts`` signed by it, in one call."""
    return generate_ca(ca_common_name).issue(hosts)


def client_ssl_context(ca_pem: bytes) -> ssl.SSLContext:
    """A client context that trusts only ``ca_pem`` (one or more PEM certificates)."""
    context = ssl.create_default_context(cadata=ca_pem.decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def ca_bundle_b64(ca_pem: bytes) -> str:
    """``ca_pem`` as the base64 text a ``clientConfig.caBundle`` field carries."""
    return base64.b64encode(ca_pem).decode("ascii")


def load_cert_chain_pem(context: ssl.SSLContext, *, cert_pem: bytes, key_pem: bytes) -> None:
    """Load an in-memory certificate chain and key into ``context``.

    ``ssl`` only loads chains from files, so the PEMs pass through a private temporary directory
    that is removed straight after.
    """
    with tempfile.TemporaryDirectory(prefix="hami-tls-") as tmp:
        cert_path = Path(tmp) / "tls.crt"
        key_path = Path(tmp) / "tls.key"
        cert_path.write_bytes(cert_pem)
        _write_private(key_path, key_pem)
        context.load_cert_chain(certfile=cert_path, keyfile=key_path)


def _san_entries(hosts: Sequence[str]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return entries


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
