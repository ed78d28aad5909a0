"""Server TLS whose certificate follows the files on disk (rotation without restart)."""

from __future__ import annotations

import asyncio
import os
import ssl
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _Stamp:
    cert_mtime_ns: int
    key_mtime_ns: int
    cert_size: int
    key_size: int


def _stamp(cert_file: str, key_file: str) -> _Stamp:
    c, k = os.stat(cert_file), os.stat(key_file)
    return _Stamp(c.st_mtime_ns, k.st_mtime_ns, c.st_size, k.st_size)


class ReloadingServerTLS:
    """An ``ssl.SSLContext`` that reloads its cert chain when the files change.

    ``load_cert_chain`` on a live context applies to every later handshake, so connections made
    after a rotation see the new certificate while open ones keep theirs.
    """

    def __init__(self, cert_file: str, key_file: str, *, poll_interval: float = 5.0) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.poll_interval = poll_interval
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(cert_file, key_file)
        self._stamp = _stamp(cert_file, key_file)
        self.reloads = 0

    async def reload_if_changed(self) -> bool:
        """Reload when the files changed; a half-written pair is retried on the next poll."""
        try:
            stamp = await asyncio.to_thread(_stamp, self.cert_file, self.key_file)
        except OSError as exc:
            log.warning("tls_stat_failed", cert_file=self.cert_file, error=str(exc))
            return False
        if stamp == self._stamp:
            return False
        try:
            await asyncio.to_thread(self.context.load_cert_chain, self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            log.warning("tls_reload_failed", cert_file=self.cert_file, error=str(exc))
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("tls_reloaded", cert_file=self.cert_file, reloads=self.reloads)
        return True

    async def watch(self) -> None:
        """Poll forever; run it as a named task under the service's TaskGroup."""
        while True:
            await asyncio.sleep(self.poll_interval)
            await self.reload_if_changed()
