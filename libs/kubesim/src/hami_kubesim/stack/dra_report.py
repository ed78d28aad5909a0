"""The DRA parts of the demo's report: what each container got from its claims, the claims
themselves (allocated device, consumed capacity, the pods they are reserved for) and the DRA
GPUs' lines of the utilisation table. Pure: no I/O.

The utilisation is charged as the allocator does (docs/dra.md): a result with a ``shareID`` its
``consumedCapacity``, one without the whole device, an ``adminAccess`` one nothing.  (The
scheduler's GPU map joins slices and claims the same way in ``hami_scheduler.gpumap.dra``, which
kubesim may not import: this is the report's few-line reading of it.)
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from hami_kube.objects import ObjectView
from hami_kubesim.stack.checks.dra import (
    CLAIM_RESOURCE_PREFIX,
    DRIVER,
    DeviceKey,
    capacity_of,
    claim_results,
    device_key,
    published_devices,
    quantity_of,
)
from hami_kubesim.stack.state import ClusterState, allocation_record, record_containers
from hami_protocol.dra_driver import attribute_value

__all__ = ["claim_lines", "dra_container_lines", "dra_device_lines", "dra_env"]

_WIDTH = 100
_MIB = 1 << 20


def dra_container_lines(pod: Mapping[str, Any]) -> dict[str, list[str]]:
    """Per container that uses claims, a line per claim entry: the devices the kubelet gave it
    and the HAMi-core memory limits of its CDI env."""
    out: dict[str, list[str]] = {}
    for name, container in record_containers(allocation_record(pod)).items():
        for entry in container.get("resources") or ():
            resource = str(entry.get("resource") or "")
            if not resource.startswith(CLAIM_RESOURCE_PREFIX):
                continue
            envs = entry.get("envs") or {}
            limits = [
                str(v) for k, v in sorted(envs.items()) if k.startswith("CUDA_DEVICE_MEMORY_LIMIT_")
            ]
            devices = ", ".join(str(d) for d in entry.get("deviceIDs") or ()) or "no device"
            cores = envs.get("CUDA_DEVICE_SM_LIMIT", "?")
            out.setdefault(name, []).append(
                f"{resource}: {devices} memory {', '.join(limits) or '?'} SM limit {cores}"
            )
    return out


def dra_env(pod: Mapping[str, Any], container: str) -> dict[str, str]:
    """The env a container got from its claims' CDI specs."""
    record = record_containers(allocation_record(pod)).get(container) or {}
    env: dict[str, str] = {}
    for entry in record.get("resources") or ():
        if str(entry.get("resource") or "").startswith(CLAIM_RESOURCE_PREFIX):
            env.update({str(k): str(v) for k, v in (entry.get("envs") or {}).items()})
    return env


def claim_lines(state: ClusterState) -> list[str]:
    """The ``DRA claims`` section (empty without claims)."""
    if not state.claims:
        return []
    lines = ["", f"DRA claims ({len(state.claims)})"]
    for claim in sorted(state.claims, key=lambda c: (ObjectView(c).namespace, ObjectView(c).name)):
        view = ObjectView(claim)
        results = claim_results(claim)
        status = claim.get("status") or {}
        users = ", ".join(str(r.get("name")) for r in status.get("reservedFor") or ()) or "-"
        if results:
            what = "; ".join(
                f"{r.get('pool')}/{r.get('device')} "
                + " ".join(f"{k} {v}" for k, v in sorted((r.get("consumedCapacity") or {}).items()))
                for r in results
            )
        else:
            what = "not allocated"
        lines.extend(
            textwrap.wrap(
                f"{view.namespace}/{view.name}: {what}; reserved for {users}",
                width=_WIDTH,
                initial_indent="  ",
                subsequent_indent="      ",
                break_on_hyphens=False,
            )
        )
    return lines


def _attribute(device: Mapping[str, Any], key: str) -> object:
    return attribute_value(device.get("attributes"), key)


def _index(device: Mapping[str, Any]) -> int:
    index = _attribute(device, "index")
    return index if isinstance(index, int) else 1 << 30


def _charge(result: Mapping[str, Any], device: Mapping[str, Any], name: str) -> int:
    if result.get("adminAccess") is True:
        return 0
    if not result.get("shareID"):
        return int(capacity_of(device, name) or 0)
    return int(quantity_of((result.get("consumedCapacity") or {}).get(name)) or 0)


def _holder(claim: Mapping[str, Any]) -> str:
    view = ObjectView(claim)
    name = view.name if view.namespace in ("", "default") else f"{view.namespace}/{view.name}"
    reserved = (claim.get("status") or {}).get("reservedFor") or ()
    pods = ",".join(str(entry.get("name")) for entry in reserved)
    return f"{name} → {pods or '-'}"


def _device_line(device: Mapping[str, Any], held: list[tuple[Mapping[str, Any], Any]]) -> str:
    memory = sum(_charge(result, device, "memory") for _, result in held) // _MIB
    cores = sum(_charge(result, device, "cores") for _, result in held)
    total = int(capacity_of(device, "memory") or 0) // _MIB
    share = memory * 100 // total if total else 0
    uuid = str(_attribute(device, "uuid") or "")
    holders = ", ".join(dict.fromkeys(_holder(claim) for claim, _ in held)) or "-"
    return (
        f"    #{_attribute(device, 'index')} {uuid[:12] + '…' if len(uuid) > 13 else uuid:<14} "
        f"DRA {device.get('name')}  mem {memory:>6}/{total:<6} MiB {share:>3}%  "
        f"cores {cores:>3}/{int(capacity_of(device, 'cores') or 0):<3}  {holders}"
    )


def dra_device_lines(state: ClusterState) -> list[str]:
    """The utilisation table's lines for the GPUs our driver publishes (newest slices), per node
    (the slice's ``spec.nodeName``): memory and cores charged by the claims allocated to each and
    the holders as ``claim → pods`` (``status.reservedFor``)."""
    nodes = {
        (spec.get("driver"), (spec.get("pool") or {}).get("name")): str(spec.get("nodeName") or "")
        for spec in (ObjectView(item).spec for item in state.slices)
    }
    held: dict[DeviceKey, list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for claim in state.claims:
        for result in claim_results(claim):
            held.setdefault(device_key(result), []).append((claim, result))
    devices = published_devices(state)
    by_node: dict[str, list[DeviceKey]] = {}
    for key in devices:
        if key[0] == DRIVER:
            by_node.setdefault(nodes.get((key[0], key[1])) or key[1], []).append(key)
    lines: list[str] = []
    for node, keys in sorted(by_node.items()):
        models = sorted({str(_attribute(devices[k], "model")) for k in keys})
        lines.append(f"  {node}  ({len(keys)} DRA GPUs: {', '.join(models)})")
        for key in sorted(keys, key=lambda k: (_index(devices[k]), k)):
            lines.append(_device_line(devices[key], held.get(key, [])))
    return lines
