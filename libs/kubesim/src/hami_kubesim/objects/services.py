"""Service (core ``v1``) and EndpointSlice (``discovery.k8s.io/v1``): the defaults and the
validation kube-apiserver applies, as far as the API server's service proxy needs them.

Sources: ``pkg/apis/core/v1/defaults.go`` (``SetDefaults_Service``), ``pkg/apis/core/validation``
(``ValidateService``: ports, port names as ``IsValidPortName``, types),
``pkg/apis/discovery/v1/defaults.go`` and ``pkg/apis/discovery/validation/validation.go``.
No IP allocator runs: a Service without ``spec.clusterIP`` gets one derived from its namespace and
name inside ``10.96.0.0/12`` (documented in docs/kubesim.md).  Everything here is pure.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from typing import Any, Final

from hami_kubesim.objects.validation import (
    Cause,
    duplicate,
    invalid,
    is_dns_label,
    required,
    too_many,
    unsupported,
)

SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
"""The label tying an EndpointSlice to its Service (``discovery.LabelServiceName``)."""

SERVICE_TYPES: Final = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
PROTOCOLS: Final = ("SCTP", "TCP", "UDP")
ADDRESS_TYPES: Final = ("FQDN", "IPv4", "IPv6")
_SERVICE_CIDR: Final = ipaddress.ip_network("10.96.0.0/12")
_PORT_RANGE: Final = "must be between 1 and 65535, inclusive"
_MAX_ENDPOINTS: Final = 1000
_MAX_ADDRESSES: Final = 100
_PORT_NAME_CHARS = re.compile(r"^[-a-z0-9]+$")
_PORT_NAME_LETTER = re.compile(r"[a-z]")


def port_name_errors(name: str) -> list[str]:
    """``validation.IsValidPortName``: an IANA service name."""
    errors: list[str] = []
    if len(name) > 15:
        errors.append("must be no more than 15 characters")
    if not _PORT_NAME_CHARS.match(name):
        errors.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    elif not _PORT_NAME_LETTER.search(name):
        errors.append("must contain at least one letter (a-z)")
    if "--" in name:
        errors.append("must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        errors.append("must not begin or end with a hyphen")
    return errors


def _valid_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def derived_cluster_ip(namespace: str, name: str) -> str:
    """A stable address in the service CIDR for a Service (no allocator runs in kubesim)."""
    digest = int.from_bytes(hashlib.sha256(f"{namespace}/{name}".encode()).digest()[:4], "big")
    hosts = _SERVICE_CIDR.num_addresses - 2
    return str(_SERVICE_CIDR.network_address + 1 + digest % hosts)


# --- Service ------------------------------------------------------------------------------------


def prepare_service(obj: dict[str, Any]) -> None:
    """``SetDefaults_Service`` plus the ClusterIP a create allocates; status starts empty."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            if "targetPort" not in port and "port" in port:
                port["targetPort"] = port["port"]
    if spec["type"] != "ExternalName":
        spec.setdefault("internalTrafficPolicy", "Cluster")
        if not spec.get("clusterIP"):
            meta = obj["metadata"]
            spec["clusterIP"] = derived_cluster_ip(meta.get("namespace") or "", meta["name"])
        if spec["clusterIP"] != "None":
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    obj["status"] = {"loadBalancer": {}}


def validate_service(obj: dict[str, Any]) -> list[Cause]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    causes: list[Cause] = []
    kind = spec.get("type")
    if kind not in SERVICE_TYPES:
        causes.append(unsupported("spec.type", kind, SERVICE_TYPES))
    ports = spec.get("ports") or []
    headless = spec.get("clusterIP") == "None"
    if not ports and kind != "ExternalName" and not headless:
        causes.append(required("spec.ports"))
    seen: set[str] = set()
    for i, port in enumerate(ports):
        where = f"spec.ports[{i}]"
        if not isinstance(port, dict):
            causes.append(invalid(where, port, "must be an object"))
            continue
        name = port.get("name") or ""
        if not name and len(ports) > 1:
            causes.append(required(f"{where}.name"))
        elif name:
            causes.extend(invalid(f"{where}.name", name, why) for why in port_name_errors(name))
            if name in seen:
                causes.append(duplicate(f"{where}.name", name))
            seen.add(name)
        if not _valid_port(port.get("port")):
            causes.append(invalid(f"{where}.port", port.get("port"), _PORT_RANGE))
        if port.get("protocol") not in PROTOCOLS:
            causes.append(unsupported(f"{where}.protocol", port.get("protocol"), PROTOCOLS))
    return causes


def validate_service_update(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    causes = validate_service(new)
    old_ip = (old.get("spec") or {}).get("clusterIP")
    new_ip = (new.get("spec") or {}).get("clusterIP")
    if old_ip and new_ip != old_ip and (new.get("spec") or {}).get("type") != "ExternalName":
        causes.append(invalid("spec.clusterIPs[0]", new_ip, "may not change once set"))
    return causes


def keep_cluster_ip(new: dict[str, Any], old: dict[str, Any]) -> None:
    """An update that leaves ``clusterIP`` out keeps the allocated one
    (``patchAllocatedValues``)."""
    spec, old_spec = new.get("spec"), old.get("spec") or {}
    if isinstance(spec, dict) and not spec.get("clusterIP") and old_spec.get("clusterIP"):
        spec["clusterIP"] = old_spec["clusterIP"]
        spec.setdefault("clusterIPs", old_spec.get("clusterIPs") or [old_spec["clusterIP"]])


def service_port_name(service: dict[str, Any], number: int) -> str | None:
    """The name of the Service port numbered ``number`` (``None``: no such port)."""
    for port in (service.get("spec") or {}).get("ports") or []:
        if isinstance(port, dict) and port.get("port") == number:
            return str(port.get("name") or "")
    return None


# --- EndpointSlice ------------------------------------------------------------------------------


def prepare_endpoint_slice(obj: dict[str, Any]) -> None:
    """``SetDefaults_EndpointPort``: a port's name defaults to ``""``, its protocol to TCP."""
    for port in obj.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("name", "")
            port.setdefault("protocol", "TCP")


def _address_errors(address_type: str, address: Any) -> str | None:
    if not isinstance(address, str):
        return "must be a string"
    if address_type == "FQDN":
        return None
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        parsed = None
    want = 4 if address_type == "IPv4" else 6
    if parsed is None or parsed.version != want:
        return f"must be a valid {address_type} address"
    return None


def validate_endpoint_slice(obj: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    address_type = obj.get("addressType")
    if not address_type:
        causes.append(required("addressType"))
    elif address_type not in ADDRESS_TYPES:
        causes.append(unsupported("addressType", address_type, ADDRESS_TYPES))
    endpoints = obj.get("endpoints")
    if endpoints is None:
        endpoints = []
    if len(endpoints) > _MAX_ENDPOINTS:
        causes.append(too_many("endpoints", len(endpoints), _MAX_ENDPOINTS))
    for i, endpoint in enumerate(endpoints):
        where = f"endpoints[{i}]"
        addresses = endpoint.get("addresses") if isinstance(endpoint, dict) else None
        if not addresses:
            causes.append(required(f"{where}.addresses", "must contain at least 1 address"))
            continue
        if len(addresses) > _MAX_ADDRESSES:
            causes.append(too_many(f"{where}.addresses", len(addresses), _MAX_ADDRESSES))
        for j, address in enumerate(addresses):
            why = _address_errors(str(address_type or ""), address)
            if why and address_type in ADDRESS_TYPES:
                causes.append(invalid(f"{where}.addresses[{j}]", address, why))
    seen: set[str] = set()
    for i, port in enumerate(obj.get("ports") or []):
        where = f"ports[{i}]"
        if not isinstance(port, dict):
            causes.append(invalid(where, port, "must be an object"))
            continue
        name = port.get("name") or ""
        if name and not is_dns_label(name):
            causes.append(
                invalid(
                    f"{where}.name",
                    name,
                    "a lowercase RFC 1123 label must consist of "
                    "lower case alphanumeric characters or '-', and must start and end with "
                    "an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
                    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )
            )
        if name in seen:
            causes.append(duplicate(f"{where}.name", name))
        seen.add(name)
        number = port.get("port")
        if number is not None and not _valid_port(number):
            causes.append(invalid(f"{where}.port", number, _PORT_RANGE))
        if port.get("protocol") not in PROTOCOLS:
            causes.append(unsupported(f"{where}.protocol", port.get("protocol"), PROTOCOLS))
    return causes


def validate_endpoint_slice_update(new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    causes = validate_endpoint_slice(new)
    if new.get("addressType") != old.get("addressType"):
        causes.append(invalid("addressType", new.get("addressType"), "field is immutable"))
    return causes


def ready_endpoint_address(endpoint: dict[str, Any]) -> str | None:
    """The address the proxy dials for one endpoint: the first, when the endpoint is ready
    (``conditions.ready`` unset counts as ready, as upstream reads it)."""
    ready = (endpoint.get("conditions") or {}).get("ready")
    addresses = endpoint.get("addresses") or []
    if ready is False or not addresses:
        return None
    return str(addresses[0])


# --- building them ------------------------------------------------------------------------------


def selectorless_service(
    namespace: str, name: str, ports: Mapping[str, int], *, labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A ClusterIP Service with the named ``ports`` (name → port) and no selector: its
    EndpointSlices are written by whoever runs the backends, as for a process outside the
    cluster (:func:`endpoint_slice`)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "ports": [
                {"name": port_name, "port": port, "protocol": "TCP"}
                for port_name, port in ports.items()
            ],
        },
    }


def endpoint_slice(
    namespace: str,
    service: str,
    name: str,
    address: str,
    ports: Mapping[str, int],
    *,
    node_name: str | None = None,
) -> dict[str, Any]:
    """An EndpointSlice of ``service`` with one ready endpoint at ``address`` serving the named
    ``ports`` (name → the backend's port), on ``node_name`` when given (a DaemonSet's pod: the
    GPU map finds each node's vGPU monitor by it)."""
    kind = "IPv6" if ":" in address else "IPv4"
    endpoint: dict[str, Any] = {"addresses": [address], "conditions": {"ready": True}}
    if node_name is not None:
        endpoint["nodeName"] = node_name
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: service},
        },
        "addressType": kind,
        "endpoints": [endpoint],
        "ports": [
            {"name": port_name, "port": port, "protocol": "TCP"}
            for port_name, port in ports.items()
        ],
    }
