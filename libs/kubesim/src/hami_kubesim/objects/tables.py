"""Server-side printing: the ``meta.k8s.io/v1`` Table that ``kubectl get`` asks for, with the
columns the real API server prints for each kind."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hami_kubesim.objects.resources import ResourceType

Column = tuple[str, str, int]  # (name, type, priority)
Row = list[Any]


def human_duration(seconds: float) -> str:
    """Ages as kubectl prints them (``45s``, ``3m20s``, ``5h``, ``2d3h``, ``400d``)."""
    if seconds < -1:
        return "<invalid>"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        return f"{h // (24 * 365)}y{(h // 24) % 365}d"
    return f"{h // (24 * 365)}y"


def age(stamp: Any, now: datetime) -> str:
    if not isinstance(stamp, str) or not stamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    return human_duration((now - then).total_seconds())


def _pod(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len(spec.get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    phase = status.get("reason") or status.get("phase") or "Unknown"
    for c in statuses:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            phase = waiting["reason"]
    if obj["metadata"].get("deletionTimestamp"):
        phase = "Terminating"
    gates = spec.get("readinessGates") or []
    return [
        obj["metadata"]["name"],
        f"{ready}/{total}",
        phase,
        restarts,
        age(obj["metadata"].get("creationTimestamp"), now),
        status.get("podIP") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        f"0/{len(gates)}" if gates else "<none>",
    ]


def _node(obj: dict[str, Any], now: datetime) -> Row:
    status, labels = obj.get("status") or {}, obj["metadata"].get("labels") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    state = (
        "Unknown" if ready is None else ("Ready" if ready.get("status") == "True" else "NotReady")
    )
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [
        obj["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        age(obj["metadata"].get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        addresses.get("InternalIP", "<none>"),
        addresses.get("ExternalIP", "<none>"),
        info.get("osImage", "<unknown>"),
        info.get("kernelVersion", "<unknown>"),
        info.get("containerRuntimeVersion", "<unknown>"),
    ]


def _event(obj: dict[str, Any], now: datetime) -> Row:
    involved = obj.get("involvedObject") or obj.get("regarding") or {}
    last = (
        obj.get("lastTimestamp") or obj.get("eventTime") or obj["metadata"].get("creationTimestamp")
    )
    source = obj.get("source") or {}
    return [
        age(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        source.get("component") or obj.get("reportingComponent") or "",
        obj.get("message") or obj.get("note") or "",
        age(obj.get("firstTimestamp") or obj["metadata"].get("creationTimestamp"), now),
        obj.get("count") or 1,
        obj["metadata"]["name"],
    ]


def _simple(
    extra: Callable[[dict[str, Any]], list[Any]],
) -> Callable[[dict[str, Any], datetime], Row]:
    def row(obj: dict[str, Any], now: datetime) -> Row:
        return [
            obj["metadata"]["name"],
            *extra(obj),
            age(obj["metadata"].get("creationTimestamp"), now),
        ]

    return row


def _priority_class(obj: dict[str, Any], now: datetime) -> Row:
    return [
        obj["metadata"]["name"],
        obj.get("value", 0),
        bool(obj.get("globalDefault")),
        age(obj["metadata"].get("creationTimestamp"), now),
        obj.get("preemptionPolicy") or "",
    ]


def _budget_bound(value: Any) -> str:
    return "N/A" if value is None else str(value)


def _disruption_budget(obj: dict[str, Any], now: datetime) -> Row:
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return [
        obj["metadata"]["name"],
        _budget_bound(spec.get("minAvailable")),
        _budget_bound(spec.get("maxUnavailable")),
        int(status.get("disruptionsAllowed") or 0),
        age(obj["metadata"].get("creationTimestamp"), now),
    ]


_COLUMNS: dict[str, list[Column]] = {
    "Pod": [
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Status", "string", 0),
        ("Restarts", "integer", 0),
        ("Age", "string", 0),
        ("IP", "string", 1),
        ("Node", "string", 1),
        ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1),
    ],
    "Node": [
        ("Name", "string", 0),
        ("Status", "string", 0),
        ("Roles", "string", 0),
        ("Age", "string", 0),
        ("Version", "string", 0),
        ("Internal-IP", "string", 1),
        ("External-IP", "string", 1),
        ("OS-Image", "string", 1),
        ("Kernel-Version", "string", 1),
        ("Container-Runtime", "string", 1),
    ],
    "Event": [
        ("Last Seen", "string", 0),
        ("Type", "string", 0),
        ("Reason", "string", 0),
        ("Object", "string", 0),
        ("Subobject", "string", 1),
        ("Source", "string", 1),
        ("Message", "string", 0),
        ("First Seen", "string", 1),
        ("Count", "integer", 1),
        ("Name", "string", 1),
    ],
    "Namespace": [("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
    "Lease": [("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
    "ConfigMap": [("Name", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)],
    "MutatingWebhookConfiguration": [
        ("Name", "string", 0),
        ("Webhooks", "integer", 0),
        ("Age", "string", 0),
    ],
    "PriorityClass": [
        ("Name", "string", 0),
        ("Value", "integer", 0),
        ("Global-Default", "boolean", 0),
        ("Age", "string", 0),
        ("PreemptionPolicy", "string", 0),
    ],
    "PodDisruptionBudget": [
        ("Name", "string", 0),
        ("Min Available", "string", 0),
        ("Max Unavailable", "string", 0),
        ("Allowed Disruptions", "integer", 0),
        ("Age", "string", 0),
    ],
}
_ROWS: dict[str, Callable[[dict[str, Any], datetime], Row]] = {
    "Pod": _pod,
    "Node": _node,
    "Event": _event,
    "Namespace": _simple(lambda o: [(o.get("status") or {}).get("phase", "")]),
    "Lease": _simple(lambda o: [(o.get("spec") or {}).get("holderIdentity") or "<none>"]),
    "ConfigMap": _simple(lambda o: [len(o.get("data") or {}) + len(o.get("binaryData") or {})]),
    "MutatingWebhookConfiguration": _simple(lambda o: [len(o.get("webhooks") or [])]),
    "PriorityClass": _priority_class,
    "PodDisruptionBudget": _disruption_budget,
}
_DEFAULT_COLUMNS: list[Column] = [("Name", "string", 0), ("Age", "string", 0)]


def _default_row(obj: dict[str, Any], now: datetime) -> Row:
    return [obj["metadata"]["name"], age(obj["metadata"].get("creationTimestamp"), now)]


def table(
    rt: ResourceType,
    objects: list[dict[str, Any]],
    *,
    resource_version: str,
    include_object: str = "Metadata",
    continue_token: str = "",
    headers: bool = True,
) -> dict[str, Any]:
    """The Table for ``objects`` (each without kind/apiVersion); ``include_object`` is the
    ``includeObject`` parameter: ``None``, ``Metadata`` (default) or ``Object``.  Watch events
    after the first carry no column definitions (``headers=False``), as the API server sends."""
    now = datetime.now(UTC)
    columns = _COLUMNS.get(rt.kind, _DEFAULT_COLUMNS)
    make_row = _ROWS.get(rt.kind, _default_row)
    rows = []
    for obj in objects:
        row: dict[str, Any] = {"cells": make_row(obj, now)}
        if include_object == "Object":
            row["object"] = {"kind": rt.kind, "apiVersion": rt.api_version, **obj}
        elif include_object != "None":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj["metadata"],
            }
        rows.append(row)
    meta: dict[str, Any] = {"resourceVersion": resource_version}
    if continue_token:
        meta["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": [
            {
                "name": name,
                "type": kind,
                "format": "name" if name == "Name" else "",
                "description": name,
                "priority": priority,
            }
            for name, kind, priority in (columns if headers else [])
        ],
        "rows": rows,
    }
