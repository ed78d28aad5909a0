"""The simulated cluster a cluster file describes, as frozen dataclasses (parsed by
:mod:`.config`).

Shape (every key optional except ``nodes[].name``; paths are relative to the file)::

    apiServer: {host: 127.0.0.1, port: 0}
    namespaces: [default, kube-system, hami-system]
    nodes:
      - name: gpu-node-1
        labels: {gpu: "on"}
        annotations: {}
        taints: [{key: k, value: v, effect: NoSchedule}]
        capacity: {cpu: "16", memory: 64Gi, pods: "110"}
        allocatable: {cpu: "15"}          # overrides per key; the rest equal capacity
        address: 10.0.0.11                # InternalIP (default 10.0.0.<10+i>)
        podCIDR: 10.244.1.0/24            # default 10.244.<1+i>.0/24
        kubelet: true                     # run a kubelet stand-in (default true)
        pluginDir: /tmp/kubesim/gpu-node-1  # default <kubelet.pluginRoot>/<name>
        podResourcesDir: /tmp/kubesim/pr-1  # default <pluginDir>-pod-resources
        pluginsRegistryDir: /tmp/kubesim/reg-1  # DRA: default <pluginDir>-plugins_registry
        cdiDirs: [/tmp/kubesim/cdi-1]     # DRA: CDI spec dirs, lowest priority first
                                          # (default [<pluginDir>-cdi])
        vendors:                          # vendor device plugins played on this node
          - vendor: Ascend910B3            # a common word (DCU, MLU, Mthreads, Metax-GPU,
                                          # Metax-SGPU, AMD, kunlun, XPU, GCU, Enflame,
                                          # AWSNeuron, Biren, Vastai, an Ascend or Iluvatar chip)
            devices: 8                    # physical devices
            memoryMiB: 65536              # per device (default: the vendor's)
            cores: 100                    # per device (AMD: CUs, Mthreads: 16, AWS: NeuronCores)
            split: 4                      # tasks per device (Enflame DRS: slices)
            type: Ascend910B3              # registered device type (default: the vendor's)
            numaNodes: 2
            unhealthy: [3]                # device indices reported unhealthy
            annotations: {k: v}           # written instead of what the plugin writes
            reportIntervalSeconds: 30     # register + handshake period
            instanceType: trn1.32xlarge   # AWS Neuron's node label
            qosPolicy: best-effort        # MetaX sGPU
    kubelet:
      pluginRoot: /tmp/kubesim            # default: a fresh temporary directory
      gracePeriodSeconds: 300
      callTimeoutSeconds: 60
      hamiCore: false                     # containers play HAMi-core under <pluginDir>/host
      hamiCoreIntervalSeconds: 1          # how often they write their usage
      pluginWatchIntervalSeconds: 1       # DRA: how often plugins_registry is looked at
      draRetryIntervalSeconds: 10         # DRA: a failed Prepare/Unprepare is tried again
    admission:
      enabled: true
      serviceURLs: [{namespace: hami-system, name: hami-webhook, url: "https://127.0.0.1:9443"}]
    scheduling:
      enabled: true
      config: kube-scheduler-config.yaml  # KubeSchedulerConfiguration (none: default profile)
      extenderURLs: ["http://127.0.0.1:8888"]  # replace urlPrefix of extenders, in order
      preemptionBehaviour: "1.37"         # kube-scheduler's preemption up to 1.37, or "1.38"
      dynamicResources: true              # DRA claims allocated by the loop
      defaultScheduler: false             # also a default-scheduler profile (like the first)
    controllers:
      disruption: true                    # PodDisruptionBudget status (kube-controller-manager)
      resourceclaim: false                # DRA: claims from templates, reservedFor cleanup
    objects: [ ... full Kubernetes objects, created in order ... ]
    objectFiles: [extra-objects.yaml]     # multi-document YAML, created after ``objects``

``nodes[].vendors`` runs, beside the node's kubelet stand-in, a stand-in for each vendor's device
plugin (:mod:`hami_kubesim.vendors`): it registers the devices the way that plugin does (register
annotation and handshake, kubelet resources that become node capacity, or the vendor's own node
annotation) and gives a pod's containers the devices the scheduler's annotations name.

``kubelet.hamiCore: true`` gives every node a host filesystem at ``<pluginDir>/host`` (so
``<kubelet.pluginRoot>/<node>/host`` unless the node sets its ``pluginDir``): run that node's
device plugin with ``--host-root`` there and its vGPU monitor with
``HOOK_PATH=<pluginDir>/host/usr/local/vgpu``.  Its kubelet stand-in then plays HAMi-core in every
running container whose ``Allocate`` answer names a shared cache: it keeps the container's
shared region file in that host filesystem current with made-up usage (see
:mod:`hami_kubesim.kubelet.pods.workloads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_kubesim.scheduler.config import PreemptionBehaviour
from hami_kubesim.vendors.inventory import VendorDevices

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


class ClusterConfigError(ValueError):
    """The cluster file is invalid; the message names the key and the bad value."""

    def __init__(self, key: str, value: object, reason: str) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        super().__init__(f"{key}: {reason} (got {shown})")
        self.key = key


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    allocatable: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    address: str = "10.0.0.10"
    pod_cidr: str = "10.244.1.0/24"
    kubelet: bool = True
    plugin_dir: Path | None = None
    pod_resources_dir: Path | None = None
    vendors: tuple[VendorDevices, ...] = ()
    plugins_registry_dir: Path | None = None
    """DRA: where the node's kubelet looks for drivers' registration sockets (None: the
    kubelet settings' default, beside the plugin dir)."""
    cdi_dirs: tuple[Path, ...] | None = None
    """DRA: the CDI spec dirs the node's runtime reads, lowest priority first (None: the
    kubelet settings' default)."""

    def to_object(self) -> dict[str, Any]:
        """The Node as a freshly joined kubelet would register it (Ready, addresses, capacity)."""
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }
        spec: dict[str, Any] = {"podCIDR": self.pod_cidr, "podCIDRs": [self.pod_cidr]}
        if self.taints:
            spec["taints"] = [dict(t) for t in self.taints]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": dict(self.annotations),
            },
            "spec": spec,
            "status": self.status(),
        }

    def status(self) -> dict[str, Any]:
        conditions = [
            ("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady"),
        ]
        return {
            "capacity": dict(self.capacity),
            "allocatable": dict(self.allocatable),
            "addresses": [
                {"type": "InternalIP", "address": self.address},
                {"type": "Hostname", "address": self.name},
            ],
            "conditions": [
                {"type": kind, "status": status, "reason": reason, "message": reason}
                for kind, status, reason in conditions
            ],
            "nodeInfo": {
                "kubeletVersion": "v1.31.0-kubesim",
                "operatingSystem": "linux",
                "architecture": "amd64",
                "containerRuntimeVersion": "kubesim://0.1.0",
            },
            "phase": "Running",
        }


HOST_ROOT_DIR = "host"
"""The node's host filesystem with ``kubelet.hamiCore``: ``<plugin dir>/host``."""


@dataclass(frozen=True, slots=True)
class KubeletDefaults:
    plugin_root: Path | None = None
    grace_period: float = 300.0
    call_timeout: float = 60.0
    hami_core: bool = False
    """Containers play HAMi-core in their node's host root (``<plugin dir>/host``)."""
    hami_core_interval: float = 1.0
    plugin_watch_interval: float = 1.0
    """DRA: seconds between looks at each node's plugins_registry dir."""
    dra_retry_interval: float = 10.0
    """DRA: seconds before a failed Prepare (the pod waits) or Unprepare is tried again."""


@dataclass(frozen=True, slots=True)
class AdmissionSpec:
    enabled: bool = True
    service_urls: Mapping[tuple[str, str], str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ControllersSpec:
    """Which kube-controller-manager controllers run (a real cluster runs them all)."""

    disruption: bool = True
    resourceclaim: bool = False
    """Off unless asked for: only DRA clusters need it, and it watches every pod."""


@dataclass(frozen=True, slots=True)
class SchedulingSpec:
    enabled: bool = True
    config: Path | None = None
    extender_urls: tuple[str, ...] = ()
    preemption_behaviour: PreemptionBehaviour = "1.37"
    """Which kube-scheduler release's preemption the loop plays (``"1.37"``: a node that fits
    with no in-tree victim is an error; ``"1.38"``: it goes to a preempt-capable extender)."""
    dynamic_resources: bool = True
    """Whether the loop runs the DynamicResources plugin (DRA claims allocated per node)."""
    default_scheduler: bool = False
    """Whether the loop also plays the cluster's own kube-scheduler: pods naming no scheduler
    (``default-scheduler``: DRA pods) go to a profile like the config's first one.  A real
    cluster always runs it; a config that names only ``hami-scheduler`` lacks it."""


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    host: str = "127.0.0.1"
    port: int = 0
    namespaces: tuple[str, ...] = DEFAULT_NAMESPACES
    nodes: tuple[NodeSpec, ...] = ()
    kubelet: KubeletDefaults = KubeletDefaults()
    admission: AdmissionSpec = AdmissionSpec()
    scheduling: SchedulingSpec = SchedulingSpec()
    objects: tuple[Mapping[str, Any], ...] = ()
    controllers: ControllersSpec = ControllersSpec()
