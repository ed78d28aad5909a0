"""Where the API server's service proxy sends a request: the pure half of
``GET /api/v1/namespaces/{ns}/services/{id}/proxy/{path}``.

As kube-apiserver's ``ResourceLocation`` (``pkg/registry/core/service/storage/storage.go``, in
its EndpointSlice form since kubernetes PR #134860): ``id`` is ``name``, ``name:port`` or
``scheme:name:port`` (``utilnet.SplitSchemeNamePort``: scheme ``http``, ``https`` or empty); a
port *number* is looked up among the Service's ports and replaced by that port's name (the
Service must exist: 404 otherwise; no such port: 503); then the EndpointSlices labelled
``kubernetes.io/service-name=<name>`` are searched, in random order, for a port of that name and
a ready endpoint (``conditions.ready`` unset or true), whose first address is dialled.  No slice
at all, or none with a usable endpoint: 503 ``no endpoints available for service``, naming the
Service in the first case and the whole ``id`` in the second, as upstream does.
"""

from __future__ import annotations

import posixpath
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from hami_kubesim.apiserver.errors import BadRequestError, NotFoundError, StatusError
from hami_kubesim.objects.resources import SERVICES
from hami_kubesim.objects.services import ready_endpoint_address, service_port_name

_SCHEMES: Final = frozenset({"", "http", "https"})
_METHOD_VERBS: Final = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
    "OPTIONS": "get",
}
"""The verb RBAC checks on ``services/proxy`` for each method (``RequestInfoFactory``)."""


@dataclass(frozen=True, slots=True)
class ProxyRequest:
    """A request addressed to a Service's proxy subresource.

    ``path`` is what follows ``/proxy`` (decoded): ``None`` when the URL ends at ``proxy``
    itself, which GET and HEAD answer with a redirect to ``proxy/``.
    """

    namespace: str
    service_id: str
    path: str | None


@dataclass(frozen=True, slots=True)
class Location:
    """The backend one proxied request goes to."""

    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host


def backend_path(path: str | None) -> str:
    """The path sent to the backend: ``path.Join`` of the proxied path (cleaned: no ``//``, no
    ``..`` above the root), its trailing slash kept (``JoinPreservingTrailingSlash``)."""
    if not path:
        return "/"
    cleaned = posixpath.normpath("/" + path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if path.endswith("/") and not cleaned.endswith("/"):
        cleaned += "/"
    return cleaned


def proxy_verb(method: str) -> str:
    return _METHOD_VERBS.get(method.upper(), method.lower())


def split_scheme_name_port(service_id: str) -> tuple[str, str, str] | None:
    """``(scheme, name, port)`` of ``name``, ``name:port`` or ``scheme:name:port``; ``None``
    when ``service_id`` is none of these (``utilnet.SplitSchemeNamePort``)."""
    parts = service_id.split(":")
    if len(parts) == 1:
        scheme, name, port = "", parts[0], ""
    elif len(parts) == 2:
        scheme, name, port = "", parts[0], parts[1]
    elif len(parts) == 3:
        scheme, name, port = parts
    else:
        return None
    if not name or scheme not in _SCHEMES:
        return None
    return scheme, name, port


def _port_number(port: str) -> int | None:
    """``strconv.ParseInt(port, 10, 64)``: an optional sign, then decimal digits."""
    digits = port[1:] if port[:1] in ("+", "-") else port
    return int(port) if digits.isdigit() and digits.isascii() else None


def service_unavailable(message: str) -> StatusError:
    return StatusError(503, message)


def locate(
    service_id: str,
    *,
    service: dict[str, Any] | None,
    slices: Sequence[dict[str, Any]],
    rng: random.Random | None = None,
) -> Location:
    """The backend for ``service_id``.  ``service``: the named Service (``None``: not found);
    ``slices``: the EndpointSlices labelled with its name.  Raises the API server's
    ``StatusError`` when there is none."""
    split = split_scheme_name_port(service_id)
    if split is None:
        raise BadRequestError(f'invalid service request "{service_id}"')
    scheme, name, port_name = split
    number = _port_number(port_name)
    if number is not None:
        if service is None:
            raise NotFoundError(SERVICES.plural, SERVICES.group, name)
        found = service_port_name(service, number)
        if found is None:
            raise service_unavailable(f'no service port {number} found for service "{name}"')
        port_name = found
    if not slices:
        raise service_unavailable(f'no endpoints available for service "{name}"')
    pick = rng or random.Random()
    for endpoint_slice in pick.sample(list(slices), len(slices)):
        endpoints = endpoint_slice.get("endpoints") or []
        for port in endpoint_slice.get("ports") or []:
            if port.get("name") != port_name or port.get("port") is None or not endpoints:
                continue
            offset = pick.randrange(len(endpoints))
            for i in range(len(endpoints)):
                address = ready_endpoint_address(endpoints[(i + offset) % len(endpoints)])
                if address is not None:
                    return Location(scheme or "http", address, int(port["port"]))
    raise service_unavailable(f'no endpoints available for service "{service_id}"')


__all__ = [
    "Location",
    "ProxyRequest",
    "backend_path",
    "locate",
    "proxy_verb",
    "service_unavailable",
    "split_scheme_name_port",
]
