"""One configured HTTP scheduler extender, called as kube-scheduler's ``HTTPExtender`` calls it.

``POST <urlPrefix>/<verb>`` with a compact JSON body and ``Content-Type: application/json``, a
client timeout of ``httpTimeout`` over the whole call, only HTTP 200 accepted
(``failed <verb> with extender at URL <url>, code <status>`` otherwise).  TLS follows
``makeTransport``: with ``enableHTTPS`` (or ``tlsConfig.insecure``) and no CA the server
certificate is not verified; a CA (``caData``/``caFile``) is verified against; a client
certificate is presented when configured.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from hami_kube.objects import NodeView
from hami_kubesim.certs import load_cert_chain_pem
from hami_kubesim.scheduler.config import ExtenderConfig, ExtenderTLS
from hami_kubesim.scheduler.extender_wire import (
    ExtenderError,
    FilterOutcome,
    MetaVictims,
    binding_args,
    extender_args,
    parse_binding_result,
    parse_filter_result,
    parse_host_priorities,
    parse_preemption_result,
    preemption_args,
)

__all__ = ["HttpExtender", "extender_ssl_context"]


class HttpExtender:
    """Calls one extender over a shared ``aiohttp`` session."""

    def __init__(self, config: ExtenderConfig, *, session: aiohttp.ClientSession) -> None:
        self.config = config
        self._session = session
        self._ssl = extender_ssl_context(config)
        self._server_hostname = (config.tls.server_name or None) if config.tls else None

    @property
    def url(self) -> str:
        return self.config.url_prefix

    def is_interested(self, pod: Mapping[str, Any]) -> bool:
        return self.config.is_interested(pod)

    async def filter(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> FilterOutcome:
        args = extender_args(pod, nodes, node_cache_capable=self.config.node_cache_capable)
        body = await self._send(self.config.filter_verb, args)
        return parse_filter_result(
            body,
            sent=[NodeView(n).name for n in nodes],
            node_cache_capable=self.config.node_cache_capable,
            url=self.url,
        )

    async def prioritize(
        self, pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
    ) -> dict[str, int]:
        args = extender_args(pod, nodes, node_cache_capable=self.config.node_cache_capable)
        return parse_host_priorities(await self._send(self.config.prioritize_verb, args), self.url)

    @property
    def supports_preemption(self) -> bool:
        return bool(self.config.preempt_verb)

    async def preempt(
        self,
        pod: Mapping[str, Any],
        victims: Mapping[str, tuple[Sequence[Mapping[str, Any]], int]],
    ) -> dict[str, MetaVictims]:
        """``ProcessPreemption``'s call: the candidates (node -> victim pods, PDB violations)
        out, the extender's node -> victim UIDs back (resolved by the caller)."""
        args = preemption_args(pod, victims, node_cache_capable=self.config.node_cache_capable)
        return parse_preemption_result(await self._send(self.config.preempt_verb, args), self.url)

    async def bind(self, pod: Mapping[str, Any], node: str) -> None:
        parse_binding_result(
            await self._send(self.config.bind_verb, binding_args(pod, node)), self.url
        )

    async def _send(self, verb: str, args: Mapping[str, Any]) -> Any:
        url = self.config.url_for(verb)
        data = json.dumps(args, separators=(",", ":")).encode()
        try:
            async with self._session.post(
                url,
                data=data,
                headers={"Content-Type": "application/json"},
                ssl=self._ssl,
                server_hostname=self._server_hostname,
                timeout=aiohttp.ClientTimeout(total=self.config.http_timeout),
            ) as response:
                if response.status != 200:
                    raise ExtenderError(
                        f"failed {verb} with extender at URL {url}, code {response.status}"
                    )
                text = await response.text()
        except TimeoutError as exc:
            raise ExtenderError(
                f'Post "{url}": context deadline exceeded (Client.Timeout exceeded)'
            ) from exc
        except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            raise ExtenderError(f'Post "{url}": {exc}') from exc
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExtenderError(
                f"failed {verb} with extender at URL {url}: invalid JSON reply: {exc} "
                f"({text[:200]!r})"
            ) from exc


def extender_ssl_context(config: ExtenderConfig) -> ssl.SSLContext | bool:
    """The TLS settings for calls to ``config`` (``True`` = default verification)."""
    if not config.url_prefix.startswith("https://"):
        return True
    tls = config.tls or ExtenderTLS()
    ca = tls.ca_data or (Path(tls.ca_file).read_bytes() if tls.ca_file else b"")
    if ca and not tls.insecure:
        context = ssl.create_default_context(cadata=ca.decode("ascii"))
    elif tls.insecure or config.enable_https:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context()
    cert = tls.cert_data or (Path(tls.cert_file).read_bytes() if tls.cert_file else b"")
    key = tls.key_data or (Path(tls.key_file).read_bytes() if tls.key_file else b"")
    if cert and key:
        load_cert_chain_pem(context, cert_pem=cert, key_pem=key)
    return context
