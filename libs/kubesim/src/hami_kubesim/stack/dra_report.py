"""The DRA parts of the demo's report: what each container got from its claims, and the claims
themselves (allocated device, consumed capacity, the pods they are reserved for). Pure: no I/O.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from typing import Any

from hami_kube.objects import ObjectView
from hami_kubesim.stack.checks.dra import CLAIM_RESOURCE_PREFIX, claim_results
from hami_kubesim.stack.state import ClusterState, allocation_record, record_containers

__all__ = ["claim_lines", "dra_container_lines", "dra_env"]

_WIDTH = 100


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
