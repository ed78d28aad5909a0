"""A cluster file loaded and validated: :func:`load_cluster_config` reads the YAML (its shape is
in :mod:`.spec`, with the dataclasses it becomes), :func:`parse_cluster_config` checks an already
loaded document (the nodes through :mod:`.nodes`); a wrong value raises
:class:`ClusterConfigError` naming the key.  The spec types are re-exported from here."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from hami_kubesim.cluster.fields import (
    as_bool,
    as_list,
    as_mapping,
    as_port,
    as_positive_seconds,
    as_seconds,
    as_str,
    as_strings,
)
from hami_kubesim.cluster.nodes import parse_node
from hami_kubesim.cluster.spec import (
    DEFAULT_NAMESPACES,
    HOST_ROOT_DIR,
    AdmissionSpec,
    ClusterConfig,
    ClusterConfigError,
    ControllersSpec,
    KubeletDefaults,
    NodeSpec,
    SchedulingSpec,
)
from hami_kubesim.scheduler.config import PreemptionBehaviour, parse_preemption_behaviour
from hami_protocol.errors import ConfigError

__all__ = [
    "DEFAULT_NAMESPACES",
    "HOST_ROOT_DIR",
    "AdmissionSpec",
    "ClusterConfig",
    "ClusterConfigError",
    "ControllersSpec",
    "KubeletDefaults",
    "NodeSpec",
    "SchedulingSpec",
    "load_cluster_config",
    "parse_cluster_config",
]


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
    root = as_mapping("cluster", data)
    server = as_mapping("apiServer", root.get("apiServer", {}))
    namespaces = tuple(
        as_str(f"namespaces[{i}]", n)
        for i, n in enumerate(
            as_list("namespaces", root.get("namespaces", list(DEFAULT_NAMESPACES)))
        )
    )
    nodes = tuple(
        parse_node(i, raw, base_dir)
        for i, raw in enumerate(as_list("nodes", root.get("nodes", [])))
    )
    names = [n.name for n in nodes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ClusterConfigError("nodes", duplicates, "node names must be unique")
    objects = [
        as_mapping(f"objects[{i}]", o)
        for i, o in enumerate(as_list("objects", root.get("objects", [])))
    ]
    for i, name in enumerate(as_list("objectFiles", root.get("objectFiles", []))):
        objects.extend(_object_file(f"objectFiles[{i}]", base_dir / as_str("objectFiles", name)))
    for i, obj in enumerate(objects):
        for key in ("apiVersion", "kind"):
            as_str(f"objects[{i}].{key}", obj.get(key))
        as_str(f"objects[{i}].metadata.name", (obj.get("metadata") or {}).get("name"))
    return ClusterConfig(
        host=as_str("apiServer.host", server.get("host", "127.0.0.1")),
        port=as_port("apiServer.port", server.get("port", 0)),
        namespaces=namespaces,
        nodes=nodes,
        kubelet=_kubelet(as_mapping("kubelet", root.get("kubelet", {})), base_dir),
        admission=_admission(as_mapping("admission", root.get("admission", {}))),
        scheduling=_scheduling(as_mapping("scheduling", root.get("scheduling", {})), base_dir),
        objects=tuple(objects),
        controllers=_controllers(as_mapping("controllers", root.get("controllers", {}))),
    )


def _kubelet(raw: Mapping[str, Any], base_dir: Path) -> KubeletDefaults:
    root = raw.get("pluginRoot")
    return KubeletDefaults(
        plugin_root=None if root is None else base_dir / as_str("kubelet.pluginRoot", root),
        grace_period=as_seconds("kubelet.gracePeriodSeconds", raw.get("gracePeriodSeconds", 300)),
        call_timeout=as_seconds("kubelet.callTimeoutSeconds", raw.get("callTimeoutSeconds", 60)),
        hami_core=as_bool("kubelet.hamiCore", raw.get("hamiCore", False)),
        hami_core_interval=as_positive_seconds(
            "kubelet.hamiCoreIntervalSeconds", raw.get("hamiCoreIntervalSeconds", 1)
        ),
        plugin_watch_interval=as_positive_seconds(
            "kubelet.pluginWatchIntervalSeconds", raw.get("pluginWatchIntervalSeconds", 1)
        ),
        dra_retry_interval=as_positive_seconds(
            "kubelet.draRetryIntervalSeconds", raw.get("draRetryIntervalSeconds", 10)
        ),
    )


def _admission(raw: Mapping[str, Any]) -> AdmissionSpec:
    urls: dict[tuple[str, str], str] = {}
    for i, entry in enumerate(as_list("admission.serviceURLs", raw.get("serviceURLs", []))):
        item = as_strings(f"admission.serviceURLs[{i}]", entry)
        try:
            urls[(item["namespace"], item["name"])] = item["url"]
        except KeyError as error:
            raise ClusterConfigError(
                f"admission.serviceURLs[{i}]", entry, f"missing {error}"
            ) from error
    return AdmissionSpec(
        enabled=as_bool("admission.enabled", raw.get("enabled", True)), service_urls=urls
    )


def _scheduling(raw: Mapping[str, Any], base_dir: Path) -> SchedulingSpec:
    config = raw.get("config")
    urls = as_list("scheduling.extenderURLs", raw.get("extenderURLs", []))
    return SchedulingSpec(
        enabled=as_bool("scheduling.enabled", raw.get("enabled", True)),
        config=None if config is None else base_dir / as_str("scheduling.config", config),
        extender_urls=tuple(as_str(f"scheduling.extenderURLs[{i}]", u) for i, u in enumerate(urls)),
        preemption_behaviour=_preemption_behaviour(raw.get("preemptionBehaviour", "1.37")),
        dynamic_resources=as_bool("scheduling.dynamicResources", raw.get("dynamicResources", True)),
        default_scheduler=as_bool(
            "scheduling.defaultScheduler", raw.get("defaultScheduler", False)
        ),
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
        disruption=as_bool("controllers.disruption", raw.get("disruption", True)),
        resourceclaim=as_bool("controllers.resourceclaim", raw.get("resourceclaim", False)),
    )


def _object_file(key: str, path: Path) -> list[Mapping[str, Any]]:
    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (OSError, yaml.YAMLError) as error:
        raise ClusterConfigError(key, str(path), str(error)) from error
    return [as_mapping(f"{key}[{i}]", d) for i, d in enumerate(documents) if d is not None]
