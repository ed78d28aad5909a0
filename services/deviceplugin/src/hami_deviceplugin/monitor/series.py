"""HAMi's per-container series, rendered as exposition text from the regions read at one scrape.

Per container and device (labels ``namespace``, ``pod``, ``container``, ``vdevice_index``,
``device_uuid`` — the UUID's first 40 characters, as HAMi — and ``zone="vGPU"``):

* ``hami_vgpu_memory_used_bytes`` and ``hami_container_device_memory_bytes``: Σ ``used.total`` of
  the region's active processes;
* ``hami_vgpu_memory_limit_bytes``: the device's limit;
* ``hami_container_device_utilization_ratio``: Σ SM utilisation of the device, clamped to 0-100
  (HAMi exports the raw sum, which goes above 100);
* ``hami_vgpu_memory_context_bytes`` / ``_module_bytes`` / ``_buffer_bytes``: Σ of each part;
* ``hami_container_last_kernel_elapsed_seconds``: seconds since the container's last kernel
  launch (v1 regions that recorded one).

Every device of a container gets its own series, each with its own device's figures.  With
``legacy`` also HAMi's earlier names, labels ``podnamespace``, ``podname``, ``ctrname``,
``vdeviceid``, ``deviceuuid``: ``vGPU_device_memory_usage_in_bytes``,
``vGPU_device_memory_limit_in_bytes``, ``Device_utilization_desc_of_container``,
``Device_last_kernel_of_container`` and ``Device_memory_desc_of_container`` (the total, with the
context, module, data and offset figures as labels; HAMi-core never sets ``offset``, so it is 0).
Per realised MIG instance (:func:`render_mig`, from the pods' ``hami.io/vgpu-mig-allocations``):
``hami_mig_device_info`` = 1 with HAMi's labels ``namespace``, ``pod``, ``container``,
``vdevice_index``, ``device_uuid``, ``mig_uuid``, ``profile``, ``gpu_instance_id``,
``compute_instance_id``; with ``legacy`` also ``MigInfo`` (``podnamespace``, ``podname``,
``ctrname``, ``vdeviceid``, ``deviceuuid``, ``instanceid`` = the GPU instance id).  Init
containers' instances are reported too (a MIG instance is held whatever the container's kind).

The text is written directly rather than through ``prometheus_client``'s families: a node with
2,000 regions has 16,000 such samples per scrape, and building them as family objects took
about ten times as long as formatting the lines.  Every family's ``# HELP``/``# TYPE`` lines are
written even when it has no samples, as ``prometheus_client`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from hami_deviceplugin.metric_labels import ZONE
from hami_deviceplugin.monitor.pods import PodRef
from hami_deviceplugin.monitor.regions import ContainerUsage
from hami_protocol.region.layout import RegionVersion

__all__ = ["UUID_CHARS", "clamp_percent", "render_containers", "render_mig"]

UUID_CHARS: Final = 40

_FAMILIES: Final = (
    ("hami_vgpu_memory_used_bytes", "Device memory used by the container."),
    ("hami_container_device_memory_bytes", "Device memory used by the container."),
    ("hami_vgpu_memory_limit_bytes", "Device memory limit of the container."),
    (
        "hami_container_device_utilization_ratio",
        "SM utilisation of the device by the container, percent (0-100).",
    ),
    ("hami_vgpu_memory_context_bytes", "Device memory of the container's contexts."),
    ("hami_vgpu_memory_module_bytes", "Device memory of the container's modules."),
    ("hami_vgpu_memory_buffer_bytes", "Device memory of the container's buffers."),
    (
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since the container last launched a kernel.",
    ),
)
_LEGACY_FAMILIES: Final = (
    ("vGPU_device_memory_usage_in_bytes", "vGPU device usage"),
    ("vGPU_device_memory_limit_in_bytes", "vGPU device limit"),
    ("Device_utilization_desc_of_container", "Container device utilization description"),
    ("Device_last_kernel_of_container", "Container device last kernel description"),
    ("Device_memory_desc_of_container", "Container device memory description"),
)
_KERNEL: Final = 7
_LEGACY_KERNEL: Final = 3
_LEGACY_MEMORY: Final = 4


def clamp_percent(value: float) -> float:
    return min(max(value, 0.0), 100.0)


def _escape(value: str) -> str:
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _number(value: float) -> str:
    """An integral value as an integer (exact for byte counts beyond 2**53), else Python's
    shortest round-trip form; both are valid sample values."""
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return repr(value)


def render_containers(rows: Iterable[ContainerUsage], *, now: float, legacy: bool) -> str:
    """The exposition text of ``rows``; ``now`` (unix seconds) dates the last-kernel ages."""
    lines: list[list[str]] = [[] for _ in _FAMILIES]
    old: list[list[str]] = [[] for _ in _LEGACY_FAMILIES] if legacy else []
    for row in rows:
        usage = row.usage
        elapsed = ""
        if usage.version is RegionVersion.V1 and usage.last_kernel_time > 0:
            elapsed = _number(max(now - usage.last_kernel_time, 0.0))
        namespace, pod, container = _escape(row.namespace), _escape(row.pod), _escape(row.container)
        for device in usage.devices:
            uuid = _escape(device.uuid[:UUID_CHARS])
            labels = (
                f'{{namespace="{namespace}",pod="{pod}",container="{container}",'
                f'vdevice_index="{device.index}",device_uuid="{uuid}",zone="{ZONE}"}} '
            )
            used = str(device.used_bytes)
            limit = str(device.limit_bytes)
            util = _number(clamp_percent(device.sm_util))
            values = (
                used,
                used,
                limit,
                util,
                str(device.context_bytes),
                str(device.module_bytes),
                str(device.buffer_bytes),
            )
            for family, value in zip(lines, values, strict=False):
                family.append(labels + value)
            if elapsed:
                lines[_KERNEL].append(labels + elapsed)
            if legacy:
                old_labels = (
                    f'{{podnamespace="{namespace}",podname="{pod}",ctrname="{container}",'
                    f'vdeviceid="{device.index}",deviceuuid="{uuid}",zone="{ZONE}"'
                )
                old[0].append(f"{old_labels}}} {used}")
                old[1].append(f"{old_labels}}} {limit}")
                old[2].append(f"{old_labels}}} {util}")
                if elapsed:
                    old[_LEGACY_KERNEL].append(f"{old_labels}}} {elapsed}")
                old[_LEGACY_MEMORY].append(
                    f'{old_labels},context="{device.context_bytes}",'
                    f'module="{device.module_bytes}",data="{device.buffer_bytes}",'
                    f'offset="0"}} {used}'
                )
    out: list[str] = []
    for (name, documentation), samples in [
        *zip(_FAMILIES, lines, strict=True),
        *zip(_LEGACY_FAMILIES, old, strict=False),
    ]:
        out.append(f"# HELP {name} {documentation}\n# TYPE {name} gauge\n")
        out.extend(f"{name}{sample}\n" for sample in samples)
    return "".join(out)


def render_mig(pods: Iterable[PodRef], *, legacy: bool) -> str:
    """``hami_mig_device_info`` (and ``MigInfo`` with ``legacy``) for the pods' instances."""
    info: list[str] = []
    old: list[str] = []
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        namespace, name = _escape(pod.namespace), _escape(pod.name)
        for device in pod.mig:
            container, uuid = _escape(device.container), _escape(device.gpu_uuid[:UUID_CHARS])
            info.append(
                f'hami_mig_device_info{{namespace="{namespace}",pod="{name}",'
                f'container="{container}",vdevice_index="{device.device_index}",'
                f'device_uuid="{uuid}",mig_uuid="{_escape(device.mig_uuid)}",'
                f'profile="{_escape(device.profile)}",'
                f'gpu_instance_id="{device.gpu_instance_id}",'
                f'compute_instance_id="{device.compute_instance_id}",zone="{ZONE}"}} 1\n'
            )
            if legacy:
                old.append(
                    f'MigInfo{{podnamespace="{namespace}",podname="{name}",ctrname="{container}",'
                    f'vdeviceid="{device.device_index}",deviceuuid="{uuid}",'
                    f'instanceid="{device.gpu_instance_id}",zone="{ZONE}"}} 1\n'
                )
    out = [
        "# HELP hami_mig_device_info MIG instance realised for a container.\n",
        "# TYPE hami_mig_device_info gauge\n",
        *info,
    ]
    if legacy:
        out += ["# HELP MigInfo MIG device information\n", "# TYPE MigInfo gauge\n", *old]
    return "".join(out)
