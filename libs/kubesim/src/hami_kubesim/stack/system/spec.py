"""What a whole simulated system is made of: GPU nodes, service options, objects to create.

Plain frozen data; :mod:`.lifecycle` turns a :class:`SystemSpec` into running
processes. The paths of the shipped files (the chart's KubeSchedulerConfiguration and
``device-config.yaml``) are found from the repository root, so tests and the demo run what the
chart installs rather than copies.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from hami_kubesim.scheduler.config import PreemptionBehaviour
from hami_kubesim.vendors.inventory import VendorDevices
from hami_protocol.totals import TOTALS_RESOURCES

__all__ = [
    "CHART_DEVICE_CONFIG",
    "CHART_SCHEDULER_CONFIG",
    "REPO_ROOT",
    "FailurePolicy",
    "FakeGpu",
    "GpuNode",
    "SchedulerOptions",
    "SystemSpec",
    "capacity_totals_document",
    "dra_node",
    "dump_yaml",
    "fake_devices_document",
    "fake_uuid",
    "gpu_model_node",
    "mig_node",
    "node_config_document",
    "nvlinked_pairs",
    "vendor_node",
]


def _repo_root() -> Path:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "deploy" / "charts").is_dir() and (parent / "libs").is_dir():
            return parent
    return Path.cwd()


REPO_ROOT = _repo_root()
CHART_SCHEDULER_CONFIG = (
    REPO_ROOT / "deploy/charts/hami/charts/scheduler/files/kube-scheduler-config.yaml"
)
"""The KubeSchedulerConfiguration the chart ships; only the extender's urlPrefix is replaced."""
CHART_DEVICE_CONFIG = REPO_ROOT / "deploy/charts/hami/files/device-config.yaml"
"""The chart's ``device-config.yaml``, given to all three services."""

FailurePolicy = Literal["Ignore", "Fail"]


@dataclass(frozen=True, slots=True)
class FakeGpu:
    """One GPU of the fake device backend (see the device plugin's ``backends/fake.py``)."""

    uuid: str
    model: str
    memory_mib: int
    index: int = 0
    numa: int = 0
    healthy: bool = True
    pci_bus_id: str = ""
    utilization: int | None = None
    mig: Mapping[str, Any] | None = None
    """The fake backend's ``mig`` entry (``{"mode": "enabled"}``, ...): a MIG-capable GPU; its
    model needs one of the fake's MIG profile tables (A100 40/80 GB, A30, H100 80 GB)."""

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "uuid": self.uuid,
            "index": self.index,
            "model": self.model,
            "memory_mib": self.memory_mib,
            "numa": self.numa,
            "healthy": self.healthy,
        }
        if self.pci_bus_id:
            doc["pci_bus_id"] = self.pci_bus_id
        if self.utilization is not None:
            doc["utilization"] = self.utilization
        if self.mig is not None:
            doc["mig"] = dict(self.mig)
        return doc


@dataclass(frozen=True, slots=True)
class GpuNode:
    """A simulated node with a kubelet stand-in and one device-plugin process."""

    name: str
    gpus: tuple[FakeGpu, ...]
    labels: Mapping[str, str] = field(default_factory=dict)
    nics: tuple[Mapping[str, Any], ...] = ()
    """RDMA NICs for the fake backend's ``nics`` list (kept as given)."""
    device_plugin: bool = True
    """Start a device-plugin process for this node (False: a node whose plugin never came)."""
    pod_resources: bool = True
    """The node's device plugin reads the kubelet stand-in's PodResources API (False: it runs
    without, as beside a kubelet that does not serve it, and binds to the node take the lock)."""
    links: tuple[Mapping[str, Any], ...] = ()
    """GPU links for the fake backend's ``links`` list (kept as given)."""
    topology_score: bool = False
    """The node's device plugin writes GPU pair scores (``--enable-topology-score``)."""
    taints: tuple[Mapping[str, str], ...] = ()
    """Node taints (``{"key", "value", "effect"}``), e.g. to keep a MIG node for MIG pods."""
    operating_mode: str = "hami-core"
    """The node's ``operatingmode`` in the plugin's ``config.json`` (``mig``: its GPUs are cut
    into MIG instances; they need ``FakeGpu.mig``)."""

    vendors: tuple[VendorDevices, ...] = ()
    """Other vendors' devices, registered by their plugins' stand-ins
    (:mod:`hami_kubesim.vendors`) beside the kubelet."""
    dra: bool = False
    """The node's GPUs reach pods through DRA: its plugin runs ``--mode dra`` (a kubelet DRA
    plugin publishing a ResourceSlice, no ``nvidia.com/gpu``, no register annotation, so the
    extender never counts them) and its kubelet stand-in prepares claims through it."""

    @property
    def extender_gpus(self) -> bool:
        """Whether the extender sees this node's GPUs (a device plugin registers them)."""
        return self.device_plugin and bool(self.gpus) and not self.dra


def node_config_document(node: GpuNode) -> dict[str, Any] | None:
    """The device plugin's per-node ``config.json`` of ``node`` (None: the defaults do)."""
    if node.operating_mode == "hami-core":
        return None
    return {"nodeconfig": [{"name": node.name, "operatingmode": node.operating_mode}]}


def mig_node(name: str, model: str = "NVIDIA A100-SXM4-40GB", *, count: int = 1) -> GpuNode:
    """A node of ``count`` MIG-capable GPUs (MIG mode on) whose plugin runs ``operatingmode:
    mig``."""
    memory = {"A30": 24576, "80GB": 81920}
    mib = next((v for k, v in memory.items() if k in model), 40960)
    base = gpu_model_node(name, model, count=count, memory_mib=mib)
    gpus = tuple(dataclasses.replace(gpu, mig={"mode": "enabled"}) for gpu in base.gpus)
    return dataclasses.replace(base, gpus=gpus, operating_mode="mig")


def fake_devices_document(node: GpuNode, *, healthy: bool | None = None) -> dict[str, Any]:
    """The fake-devices YAML document of ``node`` (``healthy`` overrides every GPU)."""
    gpus = [gpu.to_document() for gpu in node.gpus]
    if healthy is not None:
        for gpu in gpus:
            gpu["healthy"] = healthy
    document: dict[str, Any] = {"gpus": gpus, "nics": [dict(nic) for nic in node.nics]}
    if node.links:
        document["links"] = [dict(link) for link in node.links]
    return document


def nvlinked_pairs(node: GpuNode, *, nvlinks: int) -> tuple[dict[str, Any], ...]:
    """``links`` entries joining GPUs 0-1, 2-3, ... of ``node`` with ``nvlinks`` NVLinks each."""
    gpus = sorted(node.gpus, key=lambda gpu: gpu.index)
    return tuple(
        {"from": first.uuid, "to": second.uuid, "nvlinks": nvlinks}
        for first, second in zip(gpus[::2], gpus[1::2], strict=False)
    )


def gpu_model_node(
    name: str,
    model: str,
    *,
    count: int,
    memory_mib: int,
    numa_nodes: int = 1,
    uuid_prefix: str = "",
    labels: Mapping[str, str] | None = None,
) -> GpuNode:
    """A node of ``count`` identical GPUs spread evenly over ``numa_nodes`` NUMA nodes."""
    prefix = uuid_prefix or name
    per_numa = max(1, -(-count // max(1, numa_nodes)))
    gpus = tuple(
        FakeGpu(
            uuid=fake_uuid(f"{prefix}/{index}"),
            model=model,
            memory_mib=memory_mib,
            index=index,
            numa=index // per_numa,
            pci_bus_id=f"0000:{(0x18 + 0x10 * index) % 0x100:02x}:00.0",
        )
        for index in range(count)
    )
    return GpuNode(name=name, gpus=gpus, labels=dict(labels or {}))


def dra_node(
    name: str,
    model: str = "Tesla V100-SXM2-16GB",
    *,
    count: int = 1,
    memory_mib: int = 16384,
    taints: tuple[Mapping[str, str], ...] = (),
    labels: Mapping[str, str] | None = None,
) -> GpuNode:
    """A node of ``count`` GPUs (16 GiB each by default) served through DRA."""
    base = gpu_model_node(name, model, count=count, memory_mib=memory_mib, labels=labels)
    return dataclasses.replace(base, dra=True, taints=taints)


def vendor_node(name: str, *vendors: VendorDevices, gpus: tuple[FakeGpu, ...] = ()) -> GpuNode:
    """A node with other vendors' devices (and NVIDIA ``gpus``, run by our device plugin, when
    given)."""
    return GpuNode(name=name, gpus=gpus, device_plugin=bool(gpus), vendors=vendors)


def fake_uuid(seed: str) -> str:
    """A stable ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` UUID derived from ``seed``."""
    digest = hashlib.sha1(seed.encode()).hexdigest()
    return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    """Flags of the extender processes (HAMi's names)."""

    replicas: int = 1
    """Two or more run with Lease election (campaign mode) behind a leader-following front."""
    handshake_timeout: str = ""
    """``--handshake-timeout`` (Go duration); empty: the service's default."""
    handshake_interval: str = ""
    node_lock_timeout: str = ""
    lease_duration: str = "3s"
    renew_deadline: str = "2s"
    retry_period: str = "500ms"
    node_scheduler_policy: str = ""
    gpu_scheduler_policy: str = ""
    extra_args: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """Everything :func:`~.lifecycle.running_system` starts."""

    nodes: tuple[GpuNode, ...]
    scheduler: SchedulerOptions = SchedulerOptions()
    webhook_failure_policy: FailurePolicy = "Ignore"
    webhook_timeout_seconds: int = 10
    webhook_args: tuple[str, ...] = ()
    deviceplugin_args: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ("default", "kube-system", "hami-system")
    objects: tuple[Mapping[str, Any], ...] = ()
    """Created after the nodes and namespaces, before the services start (e.g. quotas)."""
    scheduler_config: Path = CHART_SCHEDULER_CONFIG
    device_config: Path = CHART_DEVICE_CONFIG
    work_dir: Path | None = None
    """Logs, certificates, fake-device files and kubelet plugin dirs (default: a temporary
    directory removed on exit)."""
    log_format: str = "json"
    log_level: str = "info"
    pod_initial_backoff: float | None = None
    pod_max_backoff: float | None = None
    """The scheduling loop's pod backoff (default: the KubeSchedulerConfiguration's)."""
    preemption_behaviour: PreemptionBehaviour = "1.37"
    """The kube-scheduler release whose preemption the scheduling loop plays: ``"1.37"`` (and
    earlier: a node that fits with no in-tree victim is an error, the preempt verb never sees
    it) or ``"1.38"`` (PR #135486: such a node goes to the extender's preempt verb with an empty
    victim list)."""
    kubelet_call_timeout: float = 10.0
    start_timeout: float = 60.0
    vgpu_monitor: bool = False
    """HAMi-core and the vGPU monitor: every node gets a host root (``<plugin dir>/host``) where
    its device plugin runs (``--host-root``) and its kubelet stand-in's containers keep their
    shared regions, and each node with a device plugin runs a vGPU monitor process on it."""
    workload_interval: float = 0.5
    """How often the containers write their usage (with ``vgpu_monitor``)."""
    monitor_feedback_interval: str = "200ms"
    """The monitors' ``--feedback-interval``: how soon a new region is found."""
    capacity_totals: bool = False
    """The capacity totals mode, as the chart's ``global.capacityTotals`` turns it on: device
    plugins ``--advertise-capacity-totals``, the webhook ``--write-capacity-totals``, and the
    KubeSchedulerConfiguration through :func:`capacity_totals_document`."""
    dra_retry_interval: float = 1.0
    """The kubelet stand-ins' ``dra_retry_interval``: how soon a pod whose claims could not be
    prepared (or a failed Unprepare) is tried again (the kubelet's pod-worker backoff, 10 s
    by default in kubesim; short here so tests and faults settle quickly)."""
    dra_claims: bool = False
    """The webhook's DRA conversion, as the chart's ``webhook.draClaims.enabled``:
    ``--dra-claims`` and a second webhook entry for namespaces labelled
    ``hami.io/dra-claims: "true"`` (``stack.system.objects.DRA_CLAIMS_LABEL``), whose pods' NVIDIA
    requests become ResourceClaims (docs/dra.md)."""
    gpumap: bool = True
    """The GPU map, on as the chart's ``scheduler.gpumap.enabled`` default: each extender replica
    serves it on a port of its own (``--gpumap-bind-address``), and the scheduler's Service
    ``kube-system/hami-scheduler`` (ports ``https`` 443 and ``gpumap`` 9397) with one
    EndpointSlice per replica is created, so the API server's service proxy reaches it as in a
    cluster (``kubectl hami``).  Off: the flag is passed empty."""

    @property
    def dra(self) -> bool:
        """Whether any node runs its GPUs through DRA (the cluster then runs the resourceclaim
        controller, has the ``gpu.hami.io`` DeviceClass, and the scheduling loop also plays
        the cluster's own kube-scheduler, ``default-scheduler``)."""
        return any(node.dra for node in self.nodes)


SLOT_RESOURCE = "nvidia.com/gpu"


def capacity_totals_document(document: Mapping[str, Any]) -> dict[str, Any]:
    """The KubeSchedulerConfiguration ``document`` as the chart renders it with
    ``global.capacityTotals`` (its scheduler ``configmap.yaml``): in the first extender's
    ``managedResources`` ``nvidia.com/gpu`` turns ``ignoredByScheduler: false`` and the two
    totals are appended with ``false``, so NodeResourcesFit counts them.  A deep copy."""
    copied: dict[str, Any] = yaml.safe_load(yaml.safe_dump(dict(document)))
    extender = copied["extenders"][0]
    resources = extender.get("managedResources") or []
    for entry in resources:
        if entry.get("name") == SLOT_RESOURCE:
            entry["ignoredByScheduler"] = False
    resources += [{"name": name, "ignoredByScheduler": False} for name in TOTALS_RESOURCES]
    extender["managedResources"] = resources
    return copied


def dump_yaml(document: Mapping[str, Any], path: Path) -> None:
    """Write ``document`` atomically (a reader never sees half a file)."""
    staging = path.with_name(path.name + ".tmp")
    staging.write_text(yaml.safe_dump(dict(document), sort_keys=False), encoding="utf-8")
    staging.replace(path)
