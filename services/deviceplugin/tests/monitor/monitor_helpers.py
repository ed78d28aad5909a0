"""Helpers of the vGPU monitor's tests: its settings, pods as the scheduler labels them, region
directories on disk, and a scrape of its ``/metrics`` parsed into samples."""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hami_deviceplugin.monitor.settings import Settings
from hami_kube.config import KubeSettings
from hami_kube.objects import PodView
from hami_kubesim.testing import RunningApiServer
from hami_protocol.keys import VGPU_NODE

from ..helpers import NODE, http_get

__all__ = [
    "GIB",
    "Samples",
    "add_pod",
    "container_dir",
    "container_labels",
    "monitor_settings",
    "patch_file",
    "scrape",
    "vgpu_pod",
]

GIB = 1 << 30

Labels = frozenset[tuple[str, str]]


def monitor_settings(*, url: str, hook_path: Path, devices: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "node_name": NODE,
        "hook_path": hook_path,
        "kube": KubeSettings(kube_url=url, request_timeout_s=10.0, user_agent="hami-vgpu-monitor"),
        "device_backend": "fake",
        "fake_devices": devices,
        "fake_poll_interval_s": 0.05,
        "sysfs_root": hook_path / "no-sysfs",
        "feedback_interval_s": 0.05,
        "mig_lock_file": hook_path / "hami-mig-apply.lock",
        "metrics_bind_address": "127.0.0.1:0",
        "shutdown_grace_s": 5.0,
    }
    values.update(overrides)
    return Settings(**values)


def vgpu_pod(name: str, containers: Sequence[str], *, namespace: str = "default") -> dict[str, Any]:
    """A pod the scheduler has placed on this suite's node (labelled as it does)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {VGPU_NODE: NODE}},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": c, "image": "cuda"} for c in containers],
            "initContainers": [{"name": "init", "image": "busybox"}],
        },
    }


async def add_pod(sim: RunningApiServer, name: str, containers: Sequence[str]) -> str:
    """Create the pod; its UID."""
    created = await sim.server.create("pods", vgpu_pod(name, containers))
    return PodView(created).uid


def container_dir(hook_path: Path, pod_uid: str, container: str) -> Path:
    path = hook_path / "containers" / f"{pod_uid}_{container}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def patch_file(path: Path, offset: int, fmt: str, value: int) -> None:
    """Overwrite one field of a region file in place."""
    with path.open("r+b") as file:
        file.seek(offset)
        file.write(struct.pack(fmt, value))


class Samples:
    """One scrape: every sample by name and label set (``zone`` included)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.values: dict[tuple[str, Labels], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                self.values[sample.name, frozenset(sample.labels.items())] = sample.value

    def named(self, name: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(labels), v) for (n, labels), v in self.values.items() if n == name]

    def get(self, name: str, **labels: str) -> float | None:
        """The value of the one sample of ``name`` whose labels include ``labels``."""
        found = [v for got, v in self.named(name) if labels.items() <= got.items()]
        if len(found) > 1:
            raise AssertionError(f"{len(found)} samples of {name} match {labels}")
        return found[0] if found else None

    def errors(self, reason: str) -> float | None:
        return self.get("hami_vgpu_monitor_region_errors_total", reason=reason)


async def scrape(port: int) -> Samples:
    status, text = await http_get(port, "/metrics")
    assert status == 200, text
    return Samples(text)


def container_labels(pod: str, container: str, index: int, uuid: str) -> Mapping[str, str]:
    return {
        "namespace": "default",
        "pod": pod,
        "container": container,
        "vdevice_index": str(index),
        "device_uuid": uuid[:40],
        "zone": "vGPU",
    }
