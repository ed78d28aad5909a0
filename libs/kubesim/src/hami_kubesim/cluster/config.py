"""The simulated cluster described by a YAML file, parsed into frozen dataclasses.

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
:mod:`hami_kubesim.kubelet.workloads`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hami_kubesim.scheduler.config import PreemptionBehaviour, parse_preemption_behaviour
from hami_kubesim.vendors.inventory import VendorDevices
from hami_kubesim.vendors.profiles import VendorUnknownError, known_words
from hami_protocol.errors import ConfigError

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


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
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_CAPACITY))
    allocatable: Mapping[str, str] = field(default_factory=lambda: dict(_DEFAULT_CAPACITY))
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


def load_cluster_config(path: Path | str) -> ClusterConfig:
    """Read and validate a cluster file; :class:`ClusterConfigError` when it is wrong."""
    source = Path(path)
    try:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise ClusterConfigError("file", str(source), str(error)) from error
    return parse_cluster_config(data if data is not None else {}, base_dir=source.parent)


def parse_cluster_config(data: object, *, base_dir: Path) -> ClusterConfig:
    """Validate an already loaded cluster document; relative paths resolve against ``base_dir``."""
    root = _mapping("cluster", data)
    server = _mapping("apiServer", root.get("apiServer", {}))
    namespaces = tuple(
        _str(f"namespaces[{i}]", n)
        for i, n in enumerate(_list("namespaces", root.get("namespaces", list(DEFAULT_NAMESPACES))))
    )
    nodes = tuple(
        _node(i, raw, base_dir) for i, raw in enumerate(_list("nodes", root.get("nodes", [])))
    )
    names = [n.name for n in nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ClusterConfigError("nodes", duplicates, "node names must be unique")
    objects = [
        _mapping(f"objects[{i}]", o)
        for i, o in enumerate(_list("objects", root.get("objects", [])))
    ]
    for i, name in enumerate(_list("objectFiles", root.get("objectFiles", []))):
        objects.extend(_object_file(f"objectFiles[{i}]", base_dir / _str("objectFiles", name)))
    for i, obj in enumerate(objects):
        for key in ("apiVersion", "kind"):
            _str(f"objects[{i}].{key}", obj.get(key))
        _str(f"objects[{i}].metadata.name", (obj.get("metadata") or {}).get("name"))
    return ClusterConfig(
        host=_str("apiServer.host", server.get("host", "127.0.0.1")),
        port=_port("apiServer.port", server.get("port", 0)),
        namespaces=namespaces,
        nodes=nodes,
        kubelet=_kubelet(_mapping("kubelet", root.get("kubelet", {})), base_dir),
        admission=_admission(_mapping("admission", root.get("admission", {}))),
        scheduling=_scheduling(_mapping("scheduling", root.get("scheduling", {})), base_dir),
        objects=tuple(objects),
        controllers=_controllers(_mapping("controllers", root.get("controllers", {}))),
    )


def _node(index: int, raw: object, base_dir: Path) -> NodeSpec:
    key = f"nodes[{index}]"
    node = _mapping(key, raw)
    name = _str(f"{key}.name", node.get("name"))
    capacity = {**_DEFAULT_CAPACITY, **_strings(f"{key}.capacity", node.get("capacity", {}))}
    allocatable = {**capacity, **_strings(f"{key}.allocatable", node.get("allocatable", {}))}
    taints = tuple(
        _taint(f"{key}.taints[{i}]", t)
        for i, t in enumerate(_list(f"{key}.taints", node.get("taints", [])))
    )
    address = _str(f"{key}.address", node.get("address", f"10.0.{index // 200}.{10 + index % 200}"))
    pod_cidr = _str(f"{key}.podCIDR", node.get("podCIDR", f"10.244.{1 + index}.0/24"))
    try:
        ipaddress.ip_address(address)
        ipaddress.ip_network(pod_cidr, strict=False)
    except ValueError as error:
        raise ClusterConfigError(
            f"{key}.address/podCIDR", (address, pod_cidr), str(error)
        ) from error
    plugin_dir = node.get("pluginDir")
    pod_resources_dir = node.get("podResourcesDir")
    registry_dir = node.get("pluginsRegistryDir")
    cdi_dirs = node.get("cdiDirs")
    return NodeSpec(
        name=name,
        labels=_strings(f"{key}.labels", node.get("labels", {})),
        annotations=_strings(f"{key}.annotations", node.get("annotations", {})),
        taints=taints,
        capacity=capacity,
        allocatable=allocatable,
        address=address,
        pod_cidr=pod_cidr,
        kubelet=_bool(f"{key}.kubelet", node.get("kubelet", True)),
        plugin_dir=None if plugin_dir is None else base_dir / _str(f"{key}.pluginDir", plugin_dir),
        pod_resources_dir=None
        if pod_resources_dir is None
        else base_dir / _str(f"{key}.podResourcesDir", pod_resources_dir),
        plugins_registry_dir=None
        if registry_dir is None
        else base_dir / _str(f"{key}.pluginsRegistryDir", registry_dir),
        cdi_dirs=None
        if cdi_dirs is None
        else tuple(
            base_dir / _str(f"{key}.cdiDirs[{i}]", d)
            for i, d in enumerate(_list(f"{key}.cdiDirs", cdi_dirs))
        ),
        vendors=tuple(
            _vendor(f"{key}.vendors[{i}]", v)
            for i, v in enumerate(_list(f"{key}.vendors", node.get("vendors", [])))
        ),
    )


_VENDOR_KEYS = frozenset(
    {
        "vendor",
        "devices",
        "memoryMiB",
        "cores",
        "split",
        "type",
        "numaNodes",
        "unhealthy",
        "annotations",
        "reportIntervalSeconds",
        "instanceType",
        "qosPolicy",
    }
)


def _vendor(key: str, raw: object) -> VendorDevices:
    entry = _mapping(key, raw)
    unknown = sorted(set(entry) - _VENDOR_KEYS)
    if unknown:
        raise ClusterConfigError(f"{key}.{unknown[0]}", entry[unknown[0]], "unknown key")
    word = _str(f"{key}.vendor", entry.get("vendor"))
    unhealthy = _list(f"{key}.unhealthy", entry.get("unhealthy", []))
    spec = VendorDevices(
        vendor=word,
        devices=_count(f"{key}.devices", entry.get("devices", 1), low=1),
        memory_mib=_count(f"{key}.memoryMiB", entry.get("memoryMiB", 0), low=0),
        cores=_count(f"{key}.cores", entry.get("cores", 0), low=0),
        split=_count(f"{key}.split", entry.get("split", 0), low=0),
        type=str(entry.get("type", "")),
        numa_nodes=_count(f"{key}.numaNodes", entry.get("numaNodes", 1), low=1),
        unhealthy=frozenset(
            _count(f"{key}.unhealthy[{i}]", u, low=0) for i, u in enumerate(unhealthy)
        ),
        annotations=_strings(f"{key}.annotations", entry.get("annotations", {})),
        report_interval=_positive_seconds(
            f"{key}.reportIntervalSeconds", entry.get("reportIntervalSeconds", 30)
        ),
        instance_type=_str(f"{key}.instanceType", entry.get("instanceType", "trn1.32xlarge")),
        qos_policy=_str(f"{key}.qosPolicy", entry.get("qosPolicy", "best-effort")),
    )
    try:
        spec.profile  # noqa: B018 - resolves the vendor's profile
    except VendorUnknownError as error:
        raise ClusterConfigError(
            f"{key}.vendor", word, f"no vendor stand-in; one of {', '.join(known_words())}"
        ) from error
    return spec


def _count(key: str, value: object, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ClusterConfigError(key, value, f"must be an integer >= {low}")
    return value


def _taint(key: str, raw: object) -> Mapping[str, str]:
    taint = _strings(key, raw)
    if "key" not in taint or taint.get("effect") not in _TAINT_EFFECTS:
        raise ClusterConfigError(
            key, raw, f"a taint needs a key and an effect in {sorted(_TAINT_EFFECTS)}"
        )
    return taint


def _kubelet(raw: Mapping[str, Any], base_dir: Path) -> KubeletDefaults:
    root = raw.get("pluginRoot")
    return KubeletDefaults(
        plugin_root=None if root is None else base_dir / _str("kubelet.pluginRoot", root),
        grace_period=_seconds("kubelet.gracePeriodSeconds", raw.get("gracePeriodSeconds", 300)),
        call_timeout=_seconds("kubelet.callTimeoutSeconds", raw.get("callTimeoutSeconds", 60)),
        hami_core=_bool("kubelet.hamiCore", raw.get("hamiCore", False)),
        hami_core_interval=_positive_seconds(
            "kubelet.hamiCoreIntervalSeconds", raw.get("hamiCoreIntervalSeconds", 1)
        ),
        plugin_watch_interval=_positive_seconds(
            "kubelet.pluginWatchIntervalSeconds", raw.get("pluginWatchIntervalSeconds", 1)
        ),
        dra_retry_interval=_positive_seconds(
            "kubelet.draRetryIntervalSeconds", raw.get("draRetryIntervalSeconds", 10)
        ),
    )


def _admission(raw: Mapping[str, Any]) -> AdmissionSpec:
    urls: dict[tuple[str, str], str] = {}
    for i, entry in enumerate(_list("admission.serviceURLs", raw.get("serviceURLs", []))):
        item = _strings(f"admission.serviceURLs[{i}]", entry)
        try:
            urls[(item["namespace"], item["name"])] = item["url"]
        except KeyError as error:
            raise ClusterConfigError(
                f"admission.serviceURLs[{i}]", entry, f"missing {error}"
            ) from error
    return AdmissionSpec(
        enabled=_bool("admission.enabled", raw.get("enabled", True)), service_urls=urls
    )


def _scheduling(raw: Mapping[str, Any], base_dir: Path) -> SchedulingSpec:
    config = raw.get("config")
    urls = _list("scheduling.extenderURLs", raw.get("extenderURLs", []))
    return SchedulingSpec(
        enabled=_bool("scheduling.enabled", raw.get("enabled", True)),
        config=None if config is None else base_dir / _str("scheduling.config", config),
        extender_urls=tuple(_str(f"scheduling.extenderURLs[{i}]", u) for i, u in enumerate(urls)),
        preemption_behaviour=_preemption_behaviour(raw.get("preemptionBehaviour", "1.37")),
        dynamic_resources=_bool("scheduling.dynamicResources", raw.get("dynamicResources", True)),
        default_scheduler=_bool("scheduling.defaultScheduler", raw.get("defaultScheduler", False)),
    )


def _preemption_behaviour(raw: object) -> PreemptionBehaviour:
    field = "scheduling.preemptionBehaviour"
    try:
        return parse_preemption_behaviour(raw, field)
    except ConfigError as error:
        raise ClusterConfigError(field, raw, error.reason) from error


def _controllers(raw: Mapping[str, Any]) -> ControllersSpec:
    unknown = sorted(set(raw) - {"disruption", "resourceclaim"})
    if unknown:
        raise ClusterConfigError(f"controllers.{unknown[0]}", raw[unknown[0]], "unknown key")
    return ControllersSpec(
        disruption=_bool("controllers.disruption", raw.get("disruption", True)),
        resourceclaim=_bool("controllers.resourceclaim", raw.get("resourceclaim", False)),
    )


def _object_file(key: str, path: Path) -> list[Mapping[str, Any]]:
    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as error:
        raise ClusterConfigError(key, str(path), str(error)) from error
    return [_mapping(f"{key}[{i}]", d) for i, d in enumerate(documents) if d is not None]


def _mapping(key: str, value: object) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ClusterConfigError(key, value, "must be a mapping")
    return value


def _list(key: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        raise ClusterConfigError(key, value, "must be a list")
    return value


def _str(key: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ClusterConfigError(key, value, "must be a non-empty string")
    return value


def _strings(key: str, value: object) -> dict[str, str]:
    mapping = _mapping(key, value)
    out: dict[str, str] = {}
    for name, item in mapping.items():
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise ClusterConfigError(f"{key}.{name}", item, "must be a string or a number")
        out[str(name)] = str(item)
    return out


def _bool(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ClusterConfigError(key, value, "must be true or false")
    return value


def _port(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ClusterConfigError(key, value, "must be a port number 0-65535")
    return value


def _seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ClusterConfigError(key, value, "must be a non-negative number of seconds")
    return float(value)


def _positive_seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ClusterConfigError(key, value, "must be a positive number of seconds")
    return float(value)
