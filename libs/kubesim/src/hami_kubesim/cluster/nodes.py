"""The ``nodes`` of a cluster file: each node's labels, taints, capacity and allocatable,
addresses, kubelet directories (device plugins, pod resources, DRA registry and CDI specs) and
the vendor device plugins played on it, parsed into a :class:`~.spec.NodeSpec`."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path

from hami_kubesim.cluster.fields import (
    as_bool,
    as_count,
    as_list,
    as_mapping,
    as_positive_seconds,
    as_str,
    as_strings,
)
from hami_kubesim.cluster.spec import DEFAULT_CAPACITY, ClusterConfigError, NodeSpec
from hami_kubesim.vendors.inventory import VendorDevices
from hami_kubesim.vendors.profiles import VendorUnknownError, known_words

_TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def parse_node(index: int, raw: object, base_dir: Path) -> NodeSpec:
    key = f"nodes[{index}]"
    node = as_mapping(key, raw)
    name = as_str(f"{key}.name", node.get("name"))
    capacity = {**DEFAULT_CAPACITY, **as_strings(f"{key}.capacity", node.get("capacity", {}))}
    allocatable = {**capacity, **as_strings(f"{key}.allocatable", node.get("allocatable", {}))}
    taints = tuple(
        _taint(f"{key}.taints[{i}]", t)
        for i, t in enumerate(as_list(f"{key}.taints", node.get("taints", [])))
    )
    address = as_str(
        f"{key}.address", node.get("address", f"10.0.{index // 200}.{10 + index % 200}")
    )
    pod_cidr = as_str(f"{key}.podCIDR", node.get("podCIDR", f"10.244.{1 + index}.0/24"))
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
        labels=as_strings(f"{key}.labels", node.get("labels", {})),
        annotations=as_strings(f"{key}.annotations", node.get("annotations", {})),
        taints=taints,
        capacity=capacity,
        allocatable=allocatable,
        address=address,
        pod_cidr=pod_cidr,
        kubelet=as_bool(f"{key}.kubelet", node.get("kubelet", True)),
        plugin_dir=None
        if plugin_dir is None
        else base_dir / as_str(f"{key}.pluginDir", plugin_dir),
        pod_resources_dir=None
        if pod_resources_dir is None
        else base_dir / as_str(f"{key}.podResourcesDir", pod_resources_dir),
        plugins_registry_dir=None
        if registry_dir is None
        else base_dir / as_str(f"{key}.pluginsRegistryDir", registry_dir),
        cdi_dirs=None
        if cdi_dirs is None
        else tuple(
            base_dir / as_str(f"{key}.cdiDirs[{i}]", d)
            for i, d in enumerate(as_list(f"{key}.cdiDirs", cdi_dirs))
        ),
        vendors=tuple(
            _vendor(f"{key}.vendors[{i}]", v)
            for i, v in enumerate(as_list(f"{key}.vendors", node.get("vendors", [])))
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
    entry = as_mapping(key, raw)
    unknown = sorted(set(entry) - _VENDOR_KEYS)
    if unknown:
        raise ClusterConfigError(f"{key}.{unknown[0]}", entry[unknown[0]], "unknown key")
    word = as_str(f"{key}.vendor", entry.get("vendor"))
    unhealthy = as_list(f"{key}.unhealthy", entry.get("unhealthy", []))
    spec = VendorDevices(
        vendor=word,
        devices=as_count(f"{key}.devices", entry.get("devices", 1), low=1),
        memory_mib=as_count(f"{key}.memoryMiB", entry.get("memoryMiB", 0), low=0),
        cores=as_count(f"{key}.cores", entry.get("cores", 0), low=0),
        split=as_count(f"{key}.split", entry.get("split", 0), low=0),
        type=str(entry.get("type", "")),
        numa_nodes=as_count(f"{key}.numaNodes", entry.get("numaNodes", 1), low=1),
        unhealthy=frozenset(
            as_count(f"{key}.unhealthy[{i}]", u, low=0) for i, u in enumerate(unhealthy)
        ),
        annotations=as_strings(f"{key}.annotations", entry.get("annotations", {})),
        report_interval=as_positive_seconds(
            f"{key}.reportIntervalSeconds", entry.get("reportIntervalSeconds", 30)
        ),
        instance_type=as_str(f"{key}.instanceType", entry.get("instanceType", "trn1.32xlarge")),
        qos_policy=as_str(f"{key}.qosPolicy", entry.get("qosPolicy", "best-effort")),
    )
    try:
        spec.profile  # noqa: B018 - resolves the vendor's profile
    except VendorUnknownError as error:
        raise ClusterConfigError(
            f"{key}.vendor", word, f"no vendor stand-in; one of {', '.join(known_words())}"
        ) from error
    return spec


def _taint(key: str, raw: object) -> Mapping[str, str]:
    taint = as_strings(key, raw)
    if "key" not in taint or taint.get("effect") not in _TAINT_EFFECTS:
        raise ClusterConfigError(
            key, raw, f"a taint needs a key and an effect in {sorted(_TAINT_EFFECTS)}"
        )
    return taint
