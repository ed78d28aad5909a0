"""Where each GPU node's vGPU monitor answers (``--gpumap-monitors``), for the map's usage.

Two forms, one flag:

* ``<namespace>/<service>`` — the monitor Service's EndpointSlices: each endpoint names its pod's
  node (``nodeName``), address and the port named ``monitor`` (or the slice's only port).  This
  is what the chart passes (its ``<base>-device-plugin-monitor`` Service): the monitor runs in
  the device plugin's pod on the pod network, so the node's own address would reach nothing.
  Kubernetes keeps the slices current as monitor pods come and go, and the test stack publishes
  the same objects for the monitors it runs on loopback ports.  One list call (label
  ``kubernetes.io/service-name``) per :data:`~.monitors.MAX_AGE_S` at most, and only while the
  map is viewed.
* a URL template with ``{node}`` (the node's name) and ``{node_ip}`` (its ``InternalIP``), such
  as the flag's default ``http://{node_ip}:9394/metrics`` — for monitors on the host network
  (``hostNetwork``, or a NodePort Service with ``externalTrafficPolicy: Local``).

Empty turns usage off.  :func:`parse_monitor_source` is pure (the settings validate with it);
the locators do the I/O.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from hami_kube.errors import KubeError
from hami_kube.resources import ENDPOINT_SLICES

if TYPE_CHECKING:
    from hami_kube.rest import KubeClient

__all__ = [
    "DEFAULT_MONITORS",
    "EndpointLocator",
    "Located",
    "Locator",
    "MonitorSource",
    "TemplateLocator",
    "endpoint_urls",
    "parse_monitor_source",
]

DEFAULT_MONITORS: Final = "http://{node_ip}:9394/metrics"
"""``--gpumap-monitors``' default: HAMi's monitor port on each node's address."""
PORT_NAME: Final = "monitor"
"""The port of the monitor Service (and its slices) that serves ``/metrics``: the chart's name."""
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")

Located = tuple[str | None, str | None]
"""``(url, None)``, or ``(None, why there is no monitor to ask)``."""


@dataclass(frozen=True, slots=True)
class MonitorSource:
    """``--gpumap-monitors`` read: a URL template, a Service, or nothing (usage off)."""

    template: str = ""
    service: tuple[str, str] | None = None
    """``(namespace, name)`` of the monitor Service."""

    @property
    def enabled(self) -> bool:
        return bool(self.template) or self.service is not None


def parse_monitor_source(value: str) -> MonitorSource:
    """``""`` → off; ``http(s)://...{node_ip}...`` → a template; ``ns/name`` → a Service."""
    value = value.strip()
    if not value:
        return MonitorSource()
    if "://" in value:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"--gpumap-monitors: only http(s) URLs, not {value!r}")
        try:
            value.format(node="n", node_ip="10.0.0.1")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"--gpumap-monitors: a URL template may use only {{node}} and {{node_ip}}: "
                f"{value!r} ({type(exc).__name__}: {exc})"
            ) from None
        return MonitorSource(template=value)
    namespace, slash, name = value.partition("/")
    if not slash or not all(_DNS_LABEL.fullmatch(part) for part in (namespace, name)):
        raise ValueError(
            f"--gpumap-monitors must be empty, a URL template (http://{{node_ip}}:9394/metrics) "
            f"or <namespace>/<service>, not {value!r}"
        )
    return MonitorSource(service=(namespace, name))


class Locator(Protocol):
    """Each asked node's monitor URL, or why there is none."""

    async def locate(self, nodes: Sequence[str]) -> dict[str, Located]: ...


@dataclass(frozen=True, slots=True)
class TemplateLocator:
    template: str
    address_of: Callable[[str], str | None]
    """The node's ``InternalIP`` (``None``: unknown)."""

    async def locate(self, nodes: Sequence[str]) -> dict[str, Located]:
        found: dict[str, Located] = {}
        for node in nodes:
            address = self.address_of(node) or ""
            if not address and "{node_ip}" in self.template:
                found[node] = (None, "the node has no InternalIP address to reach its monitor")
                continue
            host = f"[{address}]" if ":" in address else address
            found[node] = (self.template.format(node=node, node_ip=host), None)
        return found


def _port(slice_: Mapping[str, Any]) -> int | None:
    ports = [p for p in slice_.get("ports") or () if isinstance(p, Mapping)]
    named = [p for p in ports if p.get("name") == PORT_NAME]
    chosen = named or (ports if len(ports) == 1 else [])
    port = chosen[0].get("port") if chosen else None
    return port if isinstance(port, int) and not isinstance(port, bool) else None


def endpoint_urls(slices: Iterable[Mapping[str, Any]]) -> dict[str, Located]:
    """Node name → its monitor's URL, from the Service's EndpointSlices (a ready endpoint
    preferred; ``ready`` unset counts as ready, as Kubernetes says consumers should)."""
    found: dict[str, Located] = {}
    for slice_ in slices:
        port = _port(slice_)
        if port is None:
            continue
        for endpoint in slice_.get("endpoints") or ():
            node = endpoint.get("nodeName") if isinstance(endpoint, Mapping) else None
            addresses = endpoint.get("addresses") if node else None
            if not isinstance(node, str) or not addresses:
                continue
            address = str(addresses[0])
            host = f"[{address}]" if ":" in address else address
            ready = (endpoint.get("conditions") or {}).get("ready") is not False
            if ready:
                found[node] = (f"http://{host}:{port}/metrics", None)
            elif node not in found:
                found[node] = (None, "the monitor pod on this node is not ready")
    return found


class EndpointLocator:
    """The monitors behind a Service, from its EndpointSlices, listed at most once per
    ``max_age_s`` (callers meanwhile share the last list, or the one in flight)."""

    def __init__(
        self,
        client: KubeClient,
        service: tuple[str, str],
        *,
        max_age_s: float,
        clock: Callable[[], float],
    ) -> None:
        self._client = client
        self._namespace, self._name = service
        self._max_age_s = max_age_s
        self._clock = clock
        self._urls: dict[str, Located] = {}
        self._error: str | None = None
        self._listed_at: float | None = None
        self._lock = asyncio.Lock()

    async def _refresh(self) -> None:
        async with self._lock:
            listed = self._listed_at
            if listed is not None and self._clock() - listed < self._max_age_s:
                return  # another caller listed while this one waited
            try:
                listing = await self._client.list(
                    ENDPOINT_SLICES,
                    namespace=self._namespace,
                    label_selector=f"{SERVICE_NAME_LABEL}={self._name}",
                )
                self._urls = endpoint_urls(listing.get("items") or ())
                self._error = None
            except (KubeError, OSError, TimeoutError) as exc:  # refused or unreachable: say so
                self._urls = {}
                self._error = (
                    f"cannot list the EndpointSlices of {self._namespace}/{self._name}: "
                    f"{type(exc).__name__}: {str(exc)[:200]}"
                )
            self._listed_at = self._clock()

    async def locate(self, nodes: Sequence[str]) -> dict[str, Located]:
        listed = self._listed_at
        if listed is None or self._clock() - listed >= self._max_age_s:
            await self._refresh()
        missing = (
            self._error
            or f"no endpoint of the Service {self._namespace}/{self._name} on this node "
            "(no monitor pod here?)"
        )
        return {node: self._urls.get(node, (None, missing)) for node in nodes}
