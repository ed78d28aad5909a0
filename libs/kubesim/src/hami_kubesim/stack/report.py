"""Cluster snapshot → the text the demo prints.

Four sections: every pod with its node, phase, the GPUs each container got (memory, cores)
and the env its containers were given by the device plugin (from the kubelet stand-in's
allocation record) and, when the vGPU monitors were read, what they report for each of those
GPUs (memory used of the limit, utilisation); the pods that were not placed, with the
scheduler's FailedScheduling message or the admission refusal; the preemptions (who evicted
whom, on which node and GPU, from the Events; the victims are gone); and per-node, per-GPU
utilisation (memory, cores, task slots and the pods holding it; DRA GPUs with the claims
holding them); with DRA claims, what each container got from them and the claims themselves
(:mod:`.dra_report`). Pure: no I/O.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from hami_kube.objects import PodView
from hami_kubesim.stack.checks.expectations import ExpectationResult
from hami_kubesim.stack.checks.mig import container_reservations_of
from hami_kubesim.stack.checks.preemptions import Preemption, preemptions
from hami_kubesim.stack.checks.usage import DeviceReading, MonitorUsage
from hami_kubesim.stack.dra_report import (
    claim_lines,
    dra_container_lines,
    dra_device_lines,
    dra_env,
)
from hami_kubesim.stack.state import (
    ClusterState,
    DeviceLoad,
    Outcome,
    allocation_record,
    container_devices,
    device_loads,
    failed_scheduling,
    node_devices,
    outcome,
    pod_key,
    record_containers,
    record_envs,
)
from hami_kubesim.stack.vendor_report import vendor_device_loads, vendor_pod_lines
from hami_protocol.pod.mig import MigReservation

__all__ = ["render_report"]

_WIDTH = 100
_GPU_RESOURCE = "nvidia.com/gpu"
_MIB = 1 << 20


def _short(uuid: str) -> str:
    return uuid[:12] + "…" if len(uuid) > 13 else uuid


def _type_of(state: ClusterState, node: str) -> dict[str, str]:
    found = state.node(node)
    return {d.id: d.type for d in (node_devices(found) or ())} if found else {}


def _env_lines(envs: Mapping[str, str], indent: str) -> list[str]:
    text = "  ".join(f"{k}={v}" for k, v in sorted(envs.items()))
    return textwrap.wrap(
        text,
        width=_WIDTH,
        initial_indent=indent + "env ",
        subsequent_indent=indent + "    ",
        break_on_hyphens=False,
        break_long_words=False,
    )


def _mib(value: float | None) -> str:
    return "?" if value is None else f"{value / _MIB:.0f}"


def _reading(reading: DeviceReading) -> str:
    share = ""
    if reading.used_bytes is not None and reading.limit_bytes:
        share = f" ({reading.used_bytes * 100 / reading.limit_bytes:.0f}%)"
    util = "?" if reading.utilization is None else f"{reading.utilization:.0f}"
    return (
        f"#{reading.index} {_short(reading.uuid)} "
        f"{_mib(reading.used_bytes)}/{_mib(reading.limit_bytes)} MiB{share} util {util}%"
    )


def _monitor_lines(readings: Sequence[DeviceReading], indent: str) -> list[str]:
    if not readings:
        return [f"{indent}monitor: no series"]
    return textwrap.wrap(
        "; ".join(_reading(r) for r in readings),
        width=_WIDTH,
        initial_indent=indent + "monitor: ",
        subsequent_indent=indent + "         ",
        break_on_hyphens=False,
    )


def _instance(reservation: MigReservation) -> str:
    """``3g.20gb slices [0,4) MIG-…`` (the MIG UUID once the plugin created it)."""
    placement = reservation.placement
    made = "" if reservation.runtime is None else f" {reservation.runtime.mig_uuid}"
    return (
        f"{reservation.profile} slices [{placement.start},{placement.start + placement.size}){made}"
    )


def _pod_lines(
    state: ClusterState, pod: Mapping[str, Any], mark: str, usage: MonitorUsage | None
) -> list[str]:
    view = PodView(pod)
    node = view.node_name
    apps = {c.name for c in view.containers}
    lines = [f"{mark}{pod_key(pod):<34} {outcome(state, pod).value:<13} {node or '-'}"]
    types = _type_of(state, node)
    containers = record_containers(allocation_record(pod))
    instances = container_reservations_of(pod)
    vendor_lines = vendor_pod_lines(pod)
    claimed = dra_container_lines(pod)
    for index, (name, devices) in enumerate(container_devices(pod)):
        if name in claimed:
            lines.extend(f"      {name}: {line}" for line in claimed[name])
            if usage is not None and name in apps:
                readings = usage.of(view.namespace or "default", view.name, name)
                lines.extend(_monitor_lines(readings, "        "))
            lines.extend(_env_lines(dra_env(pod, name), "        "))
            continue
        if not devices and vendor_lines:
            continue
        if not devices:
            lines.append(f"      {name}: no GPU")
            continue
        grants = ", ".join(
            f"{_short(d.uuid)} ({types.get(d.uuid, d.type)}) {d.usedmem} MiB {d.usedcores}% cores"
            for d in devices
        )
        lines.append(f"      {name}: {grants}")
        mig = instances.get(index)
        if mig:
            lines.append("        MIG: " + "; ".join(_instance(r) for r in mig))
        elif usage is not None and name in apps:
            readings = usage.of(view.namespace or "default", view.name, name)
            lines.extend(_monitor_lines(readings, "        "))
        envs = record_envs(containers.get(name) or {}, _GPU_RESOURCE)
        if envs:
            lines.extend(_env_lines(envs, "        "))
    return lines + vendor_lines


def _unplaced_lines(
    state: ClusterState, pod: Mapping[str, Any] | None, key: str, rejection: str | None
) -> list[str]:
    if rejection is not None:
        reason = f"rejected at admission: {rejection}"
    elif pod is not None:
        messages = failed_scheduling(state, pod)
        status = PodView(pod).status
        reason = messages[-1] if messages else str(status.get("message") or "no reason recorded")
    else:
        reason = "not found"
    return textwrap.wrap(
        f"{key}: {reason}", width=_WIDTH, initial_indent="  ", subsequent_indent="      "
    )


def _device_lines(node: str, loads: Mapping[str, DeviceLoad], what: str = "GPUs") -> list[str]:
    devices = sorted(loads.values(), key=lambda load: (load.device.index, load.device.id))
    models = sorted({d.device.type for d in devices if d.device.count})
    lines = [f"  {node}  ({len(devices)} {what}: {', '.join(models) or 'none registered'})"]
    for load in devices:
        device = load.device
        share = load.memory * 100 // device.devmem if device.devmem else 0
        holders = ", ".join(str(meta_name(key)) for key, _, _ in load.holders) or "-"
        lines.append(
            f"    #{device.index} {_short(device.id):<14} NUMA {device.numa}  "
            f"mem {load.memory:>6}/{device.devmem:<6} MiB {share:>3}%  "
            f"cores {load.cores:>3}/{device.devcore:<3}  tasks {load.slots}/{device.count}  "
            f"{holders}"
        )
    return lines


def _freed(frees: str) -> str:
    """The extender's ``<uuid>[,...]: <MiB> MiB, <cores>% cores`` with short UUIDs."""
    uuids, sep, amounts = frees.partition(": ")
    gpus = ",".join(_short(u) for u in uuids.split(","))
    return f", GPU {gpus}{sep}{amounts}" if frees else ", GPU not reported by the extender"


def _preemption_lines(found: Sequence[Preemption], mode: str) -> list[str]:
    lines = ["", f"Preemptions ({len(found)})"]
    if mode:
        lines.extend(textwrap.wrap(mode, width=_WIDTH, initial_indent="  ", subsequent_indent="  "))
    for seen in found:
        lines.extend(
            textwrap.wrap(
                f"{meta_name(seen.preemptor)} evicted {meta_name(seen.victim)} on {seen.node}"
                + _freed(seen.frees),
                width=_WIDTH,
                initial_indent="  ",
                subsequent_indent="      ",
                break_on_hyphens=False,
            )
        )
    return lines


def meta_name(key: str) -> str:
    """``namespace/name`` → ``name`` for the default namespace, else unchanged."""
    return key.removeprefix("default/")


def render_report(
    state: ClusterState,
    *,
    results: Sequence[ExpectationResult] = (),
    rejections: Mapping[str, str] | None = None,
    usage: MonitorUsage | None = None,
    preemption_mode: str = "",
) -> str:
    """The report text. ``results`` (expectations) mark each pod ✓/✗; ``rejections`` maps pod
    keys refused at admission to the refusal; ``usage`` is what the vGPU monitors report (None:
    not read, no monitor lines); ``preemption_mode`` is one line saying which preemption the
    cluster runs (the Preemptions section shows when it is given or a pod was preempted)."""
    rejected = dict(rejections or {})
    verdict = {r.expectation.key: r for r in results}
    pods = sorted(state.pods, key=lambda p: PodView(p).creation_timestamp)
    placed = [p for p in pods if outcome(state, p) is Outcome.RUNNING]
    unplaced = [p for p in pods if outcome(state, p) is not Outcome.RUNNING]
    lines = ["", f"Pods placed ({len(placed)})", ""]
    for pod in placed:
        result = verdict.get(pod_key(pod))
        mark = "  " if result is None else ("✓ " if result.ok else "✗ ")
        lines.extend(_pod_lines(state, pod, mark, usage))
    lines += ["", f"Pods not placed ({len(unplaced) + len(rejected)})"]
    for pod in unplaced:
        lines.extend(_unplaced_lines(state, pod, f"{pod_key(pod)} [{outcome(state, pod)}]", None))
    for key, message in sorted(rejected.items()):
        lines.extend(_unplaced_lines(state, None, key, message))
    found = preemptions(state)
    if found or preemption_mode:
        lines.extend(_preemption_lines(found, preemption_mode))
    lines.extend(claim_lines(state))
    lines += ["", "GPU utilisation"]
    for node, loads in sorted(device_loads(state).items()):
        if loads:
            lines.extend(_device_lines(node, loads))
    lines.extend(dra_device_lines(state))
    for node, word, vendor_loads in vendor_device_loads(state):
        lines.extend(_device_lines(node, vendor_loads, f"{word} devices"))
    if results:
        met = sum(r.ok for r in results)
        lines += ["", f"Expected outcomes: {met}/{len(results)} met"]
        for result in results:
            mark = "✓" if result.ok else "✗"
            lines.extend(
                textwrap.wrap(
                    f"{mark} {result.expectation.key}: {result.detail}",
                    width=_WIDTH,
                    initial_indent="  ",
                    subsequent_indent="      ",
                )
            )
    return "\n".join(lines) + "\n"
