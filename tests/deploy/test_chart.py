"""The Helm chart deploy/charts/hami: rendered by Helm's own engine, linted, and every manifest
validated against the Kubernetes JSON schemas (strict), for the defaults and several value sets."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config

from .conftest import RenderFn
from .helpers import CHART, Manifest, Rendered, UniqueKeyLoader

kubernetes_validate = pytest.importorskip("kubernetes_validate")

# The oldest Kubernetes the chart declares (kubeVersion >=1.25) and the one Helm renders for.
K8S_VERSIONS = ("1.25.0", "1.36.0")
# Kinds from CRDs (cert-manager, prometheus-operator): no bundled schema, checked structurally.
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("cert-manager.io/v1", "Issuer"),
    ("cert-manager.io/v1", "Certificate"),
}
IGNORE = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}

FULL: dict[str, Any] = {
    "global": {
        "imageRegistry": "registry.example.com/gpu/",
        "imageTag": "1.2.3",
        "fullnameOverride": "gpu-share",
        "imagePullSecrets": [{"name": "regcred"}],
        "commonLabels": {"team": "ml-platform"},
        "schedulerName": "gpu-scheduler",
    },
    "resourceName": "example.com/vgpu",
    "scheduler": {
        "leaderElect": False,
        "replicas": 2,
        "nodeLabelSelector": {"gpu": "on", "pool": "a"},
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "extender": {"port": 8443, "extraArgs": ["--handshake-timeout=60s"]},
        "filterMode": "all",
        "tls": {"existingSecret": "my-extender-tls"},
        "overwriteEnv": True,
        "kubeScheduler": {"image": {"tag": "v1.30.4"}},
    },
    "webhook": {
        "certManager": {"enabled": True},
        "admissionWebhook": {
            "whitelistNamespaces": ["kube-system", "monitoring"],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "IfNeeded",
            "namespaceSelector": {"matchLabels": {"gpu-tenants": "true"}},
            "objectSelector": {
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]
            },
        },
        "serviceMonitor": {"enabled": True},
        "enableQuota": False,
    },
    "devicePlugin": {
        "privileged": False,
        "runtimeClassName": "nvidia",
        "libInstaller": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "deviceSplitCount": 4,
        "deviceMemoryScaling": 1.5,
        "disablecorelimit": True,
        "nodeConfiguration": {
            "config": {"nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 2}]}
        },
        "pluginPath": "/var/lib/kubelet/device-plugins/",
    },
    "devices": {"nvidia": {"gpuCorePolicy": "force"}},
}
CUSTOM_URL: dict[str, Any] = {
    "webhook": {
        "admissionWebhook": {
            "customURL": {"enabled": True, "host": "10.0.0.5", "port": 31998, "path": "/webhook"}
        },
        "certManager": {"enabled": True},
    }
}
CUSTOM_URL_JOBS: dict[str, Any] = {
    "webhook": {"admissionWebhook": {"customURL": {"enabled": True, "host": "hami.example.com"}}}
}
NO_KUBE_SCHEDULER: dict[str, Any] = {"scheduler": {"kubeScheduler": {"enabled": False}}}
ONLY_PLUGIN: dict[str, Any] = {"scheduler": {"enabled": False}, "webhook": {"enabled": False}}
DEVICE_CONFIG_OVERRIDE: dict[str, Any] = {
    "device-config": {"content": "nvidia:\n  resourceCountName: example.com/gpu\n"}
}
MONITOR_TUNED: dict[str, Any] = {
    "global": {"gpuHookPath": "/opt/hami/"},
    "devicePlugin": {
        "privileged": False,
        "serviceMonitor": {"enabled": True},
        "service": {"httpPort": 30992},
        "monitor": {
            "legacyMetrics": True,
            "resyncInterval": "90s",
            "logLevel": "debug",
            "extraArgs": ["--feedback-interval=2s"],
            "service": {"type": "NodePort"},
        },
    },
}
NO_MONITOR: dict[str, Any] = {
    "devicePlugin": {"monitor": {"enabled": False}, "serviceMonitor": {"enabled": True}}
}
VALUE_SETS: dict[str, dict[str, Any] | None] = {
    "defaults": None,
    "full": FULL,
    "custom-url-cert-manager": CUSTOM_URL,
    "custom-url-cert-jobs": CUSTOM_URL_JOBS,
    "no-kube-scheduler": NO_KUBE_SCHEDULER,
    "only-device-plugin": ONLY_PLUGIN,
    "device-config-override": DEVICE_CONFIG_OVERRIDE,
    "monitor-tuned": MONITOR_TUNED,
    "vendors": {
        "global": {"devices": {"ascend": {"enabled": True}, "iluvatar": {"enabled": True}}},
        "devices": {"ascend": {"runtimeClassName": "ascend"}, "mthreads": {"memoryPerCard": 160}},
    },
    "no-monitor": NO_MONITOR,
    "capacity-totals": {"global": {"capacityTotals": True}},
    "dra": {
        "global": {"capacityTotals": True},
        "devicePlugin": {
            "dra": {"enabled": True, "nodeSelector": {"hami.io/dra": "true", "pool": "a"}},
            "serviceMonitor": {"enabled": True},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
                        ]
                    }
                }
            },
        },
        "webhook": {"draClaims": {"enabled": True}},
    },
}
# resource.k8s.io/v1 (the DeviceClass) exists from Kubernetes 1.34: validated against newer
# schemas only (docs/dra.md: DRA needs 1.34).
DRA_VERSIONS = ("1.36.0",)


def pod_templates(rendered: Rendered) -> list[tuple[Manifest, Manifest]]:
    """(workload, pod template) for every Deployment, DaemonSet and Job."""
    return [
        (m, m["spec"]["template"])
        for m in rendered.manifests
        if m["kind"] in {"Deployment", "DaemonSet", "Job"}
    ]


def container(workload: Manifest, name: str) -> Manifest:
    containers: list[Manifest] = workload["spec"]["template"]["spec"]["containers"]
    (found,) = [c for c in containers if c["name"] == name]
    return found


def flag(args: list[str], name: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    assert len(values) <= 1, f"{name} given twice: {values}"
    return values[0] if values else None


# --- lint and schema validation ------------------------------------------------------------------


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_chart_lints_clean_in_strict_mode(helm: Any, values: dict[str, Any] | None) -> None:
    for kube_version in ("v1.25.0", "v1.36.0"):
        report = helm.lint(
            str(CHART), values, strict=True, with_subcharts=True, kube_version=kube_version
        )
        assert report["errors"] == []
        # Severity 1 is "info" (e.g. "icon is recommended"); warnings and errors are not allowed.
        assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("subchart", ["scheduler", "webhook", "deviceplugin"])
def test_each_subchart_lints_on_its_own(helm: Any, subchart: str) -> None:
    report = helm.lint(str(CHART / "charts" / subchart), strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_every_manifest_is_valid_kubernetes(
    render: RenderFn, values: dict[str, Any] | None
) -> None:
    rendered = render(values)
    assert rendered.manifests
    for manifest in rendered.manifests:
        identity = (manifest.get("apiVersion"), manifest.get("kind"))
        if identity in CRD_KINDS:
            assert manifest["metadata"]["name"]
            assert isinstance(manifest.get("spec"), dict)
            continue
        versions = DRA_VERSIONS if identity[0] == "resource.k8s.io/v1" else K8S_VERSIONS
        for version in versions:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(
                    f"{identity} {manifest['metadata'].get('name')} invalid for {version}: "
                    f"{exc.message} at {list(exc.path)}"
                )


def test_strict_validation_rejects_unknown_fields() -> None:
    """The validator used above does catch a misplaced field (the check is not vacuous)."""
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": 443, "targetport": "https"}]},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[0], strict=True)


def test_rendering_refuses_duplicate_keys() -> None:
    """Manifests are read with a loader that refuses duplicate keys (a silent last-wins in
    PyYAML, an error or warning in the API server)."""
    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate keys"):
        yaml.load("metadata:\n  labels: {a: x, a: y}\n", Loader=UniqueKeyLoader)


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_names_are_unique_short_and_namespaced_in_the_release(
    render: RenderFn, values: dict[str, Any] | None
) -> None:
    rendered = render(values, namespace="gpu-system")
    seen: set[tuple[str, str, str]] = set()
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "MutatingWebhookConfiguration",
        "DeviceClass",
    }
    for manifest in rendered.manifests:
        meta = manifest["metadata"]
        key = (manifest["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in seen, f"duplicate {key}"
        seen.add(key)
        assert len(meta["name"]) <= 63
        if manifest["kind"] in cluster_scoped:
            assert "namespace" not in meta
        elif meta["name"].endswith("-authentication-reader"):
            assert meta["namespace"] == "kube-system"  # where that built-in Role lives
        else:
            assert meta["namespace"] == "gpu-system", key


def test_base_name_helper_is_identical_in_every_chart() -> None:
    pattern = re.compile(
        r'define "([\w-]+)\.base" -\}\}(.*?)\{\{- end -\}\}\n\{\{- end -\}\}', re.S
    )
    bodies = {}
    for helpers in [
        CHART / "templates/_helpers.tpl",
        *CHART.glob("charts/*/templates/_helpers.tpl"),
    ]:
        match = pattern.search(helpers.read_text())
        assert match, f"no base helper in {helpers}"
        bodies[match.group(1)] = match.group(2)
    assert set(bodies) == {"hami", "hami-scheduler", "hami-webhook", "hami-deviceplugin"}
    assert len(set(bodies.values())) == 1


@pytest.mark.parametrize(
    ("release", "override", "expected"),
    [
        ("demo", "", "demo-hami"),
        ("hami", "", "hami"),
        ("my-hami", "", "my-hami"),
        ("x", "gpu", "gpu"),
    ],
)
def test_object_names_follow_the_release(
    render: RenderFn, release: str, override: str, expected: str
) -> None:
    rendered = render({"global": {"fullnameOverride": override}}, name=release)
    names = {m["metadata"]["name"] for m in rendered.manifests}
    for suffix in ("scheduler", "webhook", "device-plugin", "device-config"):
        assert f"{expected}-{suffix}" in names


# --- values keep HAMi's names --------------------------------------------------------------------

HAMI_KEYS = (
    "global.schedulerName",
    "global.gpuHookPath",
    "global.imageTag",
    "resourceName",
    "resourceMem",
    "resourceMemPercentage",
    "resourceCores",
    "resourcePriority",
    "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy",
    "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy",
    "scheduler.leaderElect",
    "scheduler.replicas",
    "scheduler.overwriteEnv",
    "scheduler.metricsBindAddress",
    "scheduler.nodeLockExpire",
    "scheduler.nodeLabelSelector",
    "scheduler.kubeScheduler.enabled",
    "scheduler.kubeScheduler.image",
    "scheduler.kubeScheduler.extraNewArgs",
    "scheduler.kubeScheduler.extraArgs",
    "scheduler.extender.extraArgs",
    "scheduler.service.httpPort",
    "scheduler.service.monitorPort",
    "webhook.admissionWebhook.customURL",
    "webhook.admissionWebhook.whitelistNamespaces",
    "webhook.admissionWebhook.namespaceSelector",
    "webhook.admissionWebhook.objectSelector",
    "webhook.admissionWebhook.failurePolicy",
    "webhook.admissionWebhook.reinvocationPolicy",
    "webhook.certManager.enabled",
    "webhook.patch.image",
    "webhook.forceOverwriteDefaultScheduler",
    "devices.ascend.runtimeClassName",
    "devices.ascend.hamiVnpuCore",
    "devices.mthreads.memoryPerCard",
    "devicePlugin.deviceSplitCount",
    "devicePlugin.deviceMemoryScaling",
    "devicePlugin.deviceCoreScaling",
    "devicePlugin.disablecorelimit",
    "devicePlugin.migStrategy",
    "devicePlugin.deviceListStrategy",
    "devicePlugin.runtimeClassName",
    "devicePlugin.nodeConfiguration",
    "devicePlugin.pluginPath",
    "devicePlugin.libPath",
    "devicePlugin.nvidiaNodeSelector",
    "devicePlugin.service.httpPort",
    "devicePlugin.monitor.resyncInterval",
    "devices.nvidia.gpuCorePolicy",
    "devices.nvidia.libCudaLogLevel",
    "device-config.content",
)


def test_values_keep_hamis_key_names(helm: Any) -> None:
    with helm.Chart.load(str(CHART)) as chart:
        merged = chart.merge_values()
    # merge_values files an aliased subchart's defaults under its chart name; rendering (which
    # processes the dependencies first) sees them under the alias, devicePlugin.
    merged["devicePlugin"] = {**merged.pop("deviceplugin"), **merged["devicePlugin"]}
    for dotted in HAMI_KEYS:
        node: Any = merged
        for part in dotted.split("."):
            assert isinstance(node, Mapping), dotted
            assert part in node, f"missing value {dotted}"
            node = node[part]
    assert merged["devicePlugin"]["nvidiaNodeSelector"] == {"gpu": "on"}
    assert merged["devicePlugin"]["pluginPath"] == "/var/lib/kubelet/device-plugins"
    assert merged["devicePlugin"]["libPath"] == "/usr/local/vgpu"
    assert merged["devicePlugin"]["service"]["httpPort"] == 31992
    assert merged["devicePlugin"]["monitor"]["resyncInterval"] == "5m"
    assert merged["global"]["schedulerName"] == "hami-scheduler"


# --- device-config.yaml --------------------------------------------------------------------------


def device_config_text(rendered: Rendered) -> str:
    (config_map,) = [
        m for m in rendered.find("ConfigMap") if m["metadata"]["name"].endswith("-device-config")
    ]
    text: str = config_map["data"]["device-config.yaml"]
    return text


def test_chart_ships_the_protocol_librarys_device_config() -> None:
    assert (CHART / "files" / "device-config.yaml").read_text() == DEFAULT_DEVICE_CONFIG_YAML


@pytest.mark.parametrize("values", [None, ONLY_PLUGIN, NO_KUBE_SCHEDULER], ids=str)
def test_default_values_render_the_default_device_config(
    render: RenderFn, values: dict[str, Any] | None
) -> None:
    text = device_config_text(render(values))
    assert yaml.safe_load(text) == yaml.safe_load(DEFAULT_DEVICE_CONFIG_YAML)
    assert parse_device_config(text) == parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)


def test_values_are_laid_over_the_nvidia_section(render: RenderFn) -> None:
    nvidia = yaml.safe_load(device_config_text(render(FULL)))["nvidia"]
    assert nvidia["resourceCountName"] == "example.com/vgpu"
    assert nvidia["deviceSplitCount"] == 4
    assert nvidia["deviceMemoryScaling"] == 1.5
    assert nvidia["gpuCorePolicy"] == "force"
    assert nvidia["overwriteEnv"] is True
    assert nvidia["runtimeClassName"] == "nvidia"
    config = parse_device_config(device_config_text(render(FULL)))
    assert config.nvidia.node_defaults.device_split_count == 4
    assert config.nvidia.gpu_core_policy == "force"
    assert config.nvidia.resource_count_name == "example.com/vgpu"


def test_every_vendor_section_is_rendered_with_hamis_defaults(render: RenderFn) -> None:
    document = yaml.safe_load(device_config_text(render()))
    assert set(document) == {
        "nvidia",
        "cambricon",
        "hygon",
        "metax",
        "mthreads",
        "enflame",
        "kunlun",
        "awsneuron",
        "amd",
        "vastai",
        "biren",
        "iluvatars",
        "vnpus",
    }
    config = parse_device_config(device_config_text(render()))
    assert config.warnings == ()
    assert config.kunlun.resource_vmemory_name == "kunlunxin.com/vxpu-memory"
    assert config.enflame.resource_name_drs_gcu == "enflame.com/drs-gcu"
    assert config.awsneuron.resource_core_name == "aws.amazon.com/neuroncore"
    assert [chip.common_word for chip in config.vnpus.configs][-1] == "Ascend910C"


VENDOR_VALUES: dict[str, Any] = {
    "global": {"devices": {"ascend": {"enabled": True}, "iluvatar": {"enabled": True}}},
    "scheduler": {"overwriteEnv": True},
    "devices": {
        "ascend": {"runtimeClassName": "ascend", "hamiVnpuCore": True},
        "mthreads": {"memoryPerCard": 160},
    },
}


def test_vendor_values_are_laid_over_their_sections(render: RenderFn) -> None:
    config = parse_device_config(device_config_text(render(VENDOR_VALUES)))
    assert config.vnpus.hami_vnpu_core is True
    assert {chip.runtime_class_name for chip in config.vnpus.configs} == {"ascend"}
    assert {chip.overwrite_env for chip in config.vnpus.configs} == {True}
    assert config.mthreads.memory_per_card == (160,)
    listed = {"devices": {"mthreads": {"memoryPerCard": [96, 160]}}}
    assert parse_device_config(device_config_text(render(listed))).mthreads.memory_per_card == (
        96,
        160,
    )


@pytest.mark.parametrize(("values", "expected"), [(None, "false"), (VENDOR_VALUES, "true")])
def test_vendor_switches_reach_the_scheduler_and_the_webhook(
    render: RenderFn, values: dict[str, Any] | None, expected: str
) -> None:
    rendered = render(values)
    extender = container(rendered.one("Deployment", "demo-hami-scheduler"), "extender")
    webhook = container(rendered.one("Deployment", "demo-hami-webhook"), "webhook")
    for args in (extender["args"], webhook["args"]):
        assert flag(args, "--enable-ascend") == expected
        assert flag(args, "--enable-iluvatar") == expected


def test_device_config_content_replaces_the_file(render: RenderFn) -> None:
    assert device_config_text(render(DEVICE_CONFIG_OVERRIDE)).strip() == (
        "nvidia:\n  resourceCountName: example.com/gpu"
    )


def test_all_three_services_mount_the_device_config(render: RenderFn) -> None:
    rendered = render()
    name = "demo-hami-device-config"
    assert rendered.one("ConfigMap", name)
    for workload, template in pod_templates(rendered):
        if workload["kind"] == "Job":
            continue
        volumes = {v["name"]: v for v in template["spec"]["volumes"]}
        assert volumes["device-config"]["configMap"]["name"] == name, workload["metadata"]["name"]


# --- RBAC: least privilege -----------------------------------------------------------------------


def rules_of(rendered: Rendered, name: str) -> set[tuple[str, str, tuple[str, ...]]]:
    role = rendered.one("ClusterRole", name)
    return {
        (group, resource, tuple(sorted(rule["verbs"])))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_scheduler_rbac_is_exactly_what_the_extender_needs(render: RenderFn) -> None:
    rendered = render()
    assert rules_of(rendered, "demo-hami-scheduler") == {
        ("", "pods", ("get", "list", "patch", "watch")),
        ("", "pods/binding", ("create",)),
        ("", "nodes", ("get", "list", "patch", "watch")),
        ("", "events", ("create", "patch")),
        ("", "resourcequotas", ("get", "list", "watch")),
        ("policy", "poddisruptionbudgets", ("list", "watch")),
        # The GPU map's view of DRA-managed GPUs (scheduler.gpumap.dra).
        ("resource.k8s.io", "resourceslices", ("get", "list", "watch")),
        ("resource.k8s.io", "resourceclaims", ("get", "list", "watch")),
    }
    role = rendered.one("Role", "demo-hami-scheduler-leases")
    assert role["metadata"]["namespace"] == "hami-system"
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "watch", "create", "update", "patch"],
        }
    ]
    bound = {b["roleRef"]["name"] for b in rendered.find("ClusterRoleBinding")}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= bound
    without = {b["roleRef"]["name"] for b in render(NO_KUBE_SCHEDULER).find("ClusterRoleBinding")}
    assert not {"system:kube-scheduler", "system:volume-scheduler"} & without


def test_webhook_rbac_only_lists_and_watches(render: RenderFn) -> None:
    rendered = render()
    assert rules_of(rendered, "demo-hami-webhook") == {
        ("", "resourcequotas", ("list", "watch")),
        ("", "pods", ("list", "watch")),
    }
    assert not render(FULL).find("ClusterRole", "gpu-share-webhook")  # quota check off


def test_device_plugin_rbac(render: RenderFn) -> None:
    assert rules_of(render(), "demo-hami-device-plugin") == {
        ("", "pods", ("get", "list", "patch", "watch")),
        # list/watch: the registration loop watches its own node.
        ("", "nodes", ("get", "list", "patch", "watch")),
        ("", "events", ("create", "patch")),
    }


def test_capacity_totals_value_turns_the_mode_on_everywhere(render: RenderFn) -> None:
    off, on = render(), render({"global": {"capacityTotals": True}})
    for rendered, value in ((off, None), (on, "true")):
        plugin = container(rendered.one("DaemonSet", "demo-hami-device-plugin"), "device-plugin")
        webhook = container(rendered.one("Deployment", "demo-hami-webhook"), "webhook")
        assert flag(plugin["args"], "--advertise-capacity-totals") == value
        assert flag(webhook["args"], "--write-capacity-totals") == value
    # Only the device plugin gets nodes/status, and only in this mode.
    assert rules_of(on, "demo-hami-device-plugin") == rules_of(off, "demo-hami-device-plugin") | {
        ("", "nodes/status", ("patch",))
    }
    assert rules_of(on, "demo-hami-scheduler") == rules_of(off, "demo-hami-scheduler")
    assert rules_of(on, "demo-hami-webhook") == rules_of(off, "demo-hami-webhook")


@pytest.mark.parametrize("values", list(VALUE_SETS.values()), ids=list(VALUE_SETS))
def test_no_rbac_rule_uses_wildcards(render: RenderFn, values: dict[str, Any] | None) -> None:
    for manifest in render(values).manifests:
        for rule in (
            manifest.get("rules", []) if manifest["kind"] in {"Role", "ClusterRole"} else []
        ):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(key, []), manifest["metadata"]["name"]


def test_every_binding_points_at_a_rendered_service_account(render: RenderFn) -> None:
    for values in VALUE_SETS.values():
        rendered = render(values)
        accounts = {m["metadata"]["name"] for m in rendered.find("ServiceAccount")}
        for binding in rendered.find("ClusterRoleBinding") + rendered.find("RoleBinding"):
            for subject in binding["subjects"]:
                assert subject["name"] in accounts
        for workload, template in pod_templates(rendered):
            assert template["spec"]["serviceAccountName"] in accounts, workload["metadata"]


# --- webhook -------------------------------------------------------------------------------------


def test_webhook_configuration_honours_the_ignore_label(render: RenderFn) -> None:
    rendered = render()
    configuration = rendered.one("MutatingWebhookConfiguration", "demo-hami-webhook")
    (hook,) = configuration["webhooks"]
    assert IGNORE in hook["namespaceSelector"]["matchExpressions"]
    assert IGNORE in hook["objectSelector"]["matchExpressions"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"][0] == "v1"
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    # The Service the configuration calls forwards to the container's HTTPS port.
    reference = hook["clientConfig"]["service"]
    service = rendered.one("Service", reference["name"])
    assert reference["namespace"] == service["metadata"]["namespace"] == "hami-system"
    assert reference["path"] == "/webhook"
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == reference["port"]]
    deployment = rendered.one("Deployment", "demo-hami-webhook")
    ports = {p["name"]: p["containerPort"] for p in container(deployment, "webhook")["ports"]}
    assert ports[port["targetPort"]] == 9443
    args = container(deployment, "webhook")["args"]
    assert flag(args, "--http_bind") == "0.0.0.0:9443"
    assert flag(args, "--scheduler-name") == "hami-scheduler"


def test_webhook_selectors_and_policies_from_values(render: RenderFn) -> None:
    (hook,) = render(FULL).one("MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == "Fail"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["namespaceSelector"]["matchLabels"] == {"gpu-tenants": "true"}
    assert {
        "key": "kubernetes.io/metadata.name",
        "operator": "NotIn",
        "values": ["kube-system", "monitoring"],
    } in hook["namespaceSelector"]["matchExpressions"]
    assert hook["objectSelector"]["matchExpressions"] == [
        IGNORE,
        {"key": "tier", "operator": "In", "values": ["gpu"]},
    ]


def test_webhook_tls_from_certificate_jobs(render: RenderFn) -> None:
    rendered = render()
    secret = "demo-hami-webhook-tls"
    jobs = {j["metadata"]["name"]: j for j in rendered.find("Job")}
    create = container(jobs["demo-hami-webhook-certgen-create"], "certgen")["args"]
    patch = container(jobs["demo-hami-webhook-certgen-patch"], "certgen")["args"]
    assert create[0] == "create"
    assert patch[0] == "patch"
    assert flag(create, "--secret-name") == flag(patch, "--secret-name") == secret
    hosts = flag(create, "--host")
    assert hosts is not None
    assert "demo-hami-webhook.hami-system.svc" in hosts.split(",")
    assert flag(patch, "--webhook-name") == "demo-hami-webhook"
    selector = rendered.one("Service", "demo-hami-webhook")["spec"]["selector"]
    for job in jobs.values():  # the Service never sends reviews to the certificate Jobs
        assert not selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    hooks = {n: j["metadata"]["annotations"]["helm.sh/hook"] for n, j in jobs.items()}
    assert "pre-install" in hooks["demo-hami-webhook-certgen-create"]
    assert "post-install" in hooks["demo-hami-webhook-certgen-patch"]
    deployment = rendered.one("Deployment", "demo-hami-webhook")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == secret
    assert not rendered.find("Certificate")


def test_webhook_tls_from_cert_manager(render: RenderFn) -> None:
    rendered = render(CUSTOM_URL)
    assert not rendered.find("Job")
    certificate = rendered.one("Certificate")
    assert certificate["spec"]["secretName"] == "demo-hami-webhook-tls"
    assert certificate["spec"]["ipAddresses"] == ["10.0.0.5"]
    assert "demo-hami-webhook.hami-system.svc" in certificate["spec"]["dnsNames"]
    configuration = rendered.one("MutatingWebhookConfiguration")
    assert configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == (
        f"hami-system/{certificate['metadata']['name']}"
    )
    (hook,) = configuration["webhooks"]
    assert hook["clientConfig"] == {"url": "https://10.0.0.5:31998/webhook"}


# --- scheduler -----------------------------------------------------------------------------------


def test_scheduler_deployment_runs_kube_scheduler_and_the_extender(render: RenderFn) -> None:
    rendered = render()
    deployment = rendered.one("Deployment", "demo-hami-scheduler")
    spec = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["kube-scheduler", "extender"]
    kube = container(deployment, "kube-scheduler")
    assert kube["command"][0] == "kube-scheduler"
    assert "--config=/config/config.yaml" in kube["command"]
    assert kube["image"] == "registry.k8s.io/kube-scheduler:v1.36.0"
    (mount,) = [m for m in kube["volumeMounts"] if m["mountPath"] == "/config"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mount["name"]]["configMap"]["name"] == "demo-hami-scheduler-config"
    extender = container(deployment, "extender")
    args = extender["args"]
    assert flag(args, "--http_bind") == "0.0.0.0:443"
    assert flag(args, "--scheduler-name") == "hami-scheduler"
    assert flag(args, "--node-scheduler-policy") == "binpack"
    assert flag(args, "--gpu-scheduler-policy") == "spread"
    assert flag(args, "--node-lock-timeout") == "5m"
    assert flag(args, "--metrics-bind-address") == ":9395"
    assert "--leader-elect" in args
    assert flag(args, "--leader-elect-resource-name") == "hami-scheduler"
    assert flag(args, "--leader-elect-resource-namespace") == "hami-system"
    assert extender["image"] == "hami-scheduler:0.1.0"
    assert extender["securityContext"]["runAsNonRoot"] is True
    assert extender["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # Port 443 as a non-root user: the pod lowers the unprivileged port range.
    assert {"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"} in spec["securityContext"][
        "sysctls"
    ]


def test_scheduler_values_reach_the_extender(render: RenderFn) -> None:
    rendered = render(FULL)
    deployment = rendered.one("Deployment", "gpu-share-scheduler")
    spec = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2
    assert "sysctls" not in spec["securityContext"]
    extender = container(deployment, "extender")
    args = extender["args"]
    assert flag(args, "--http_bind") == "0.0.0.0:8443"
    assert flag(args, "--node-label-selector") == "gpu=on,pool=a"
    assert flag(args, "--filter-mode") == "all"
    assert flag(args, "--scheduler-name") == "gpu-scheduler"
    assert "--leader-elect" not in args
    assert "--handshake-timeout=60s" in args
    assert extender["image"] == "registry.example.com/gpu/hami-scheduler:1.2.3"
    assert container(deployment, "kube-scheduler")["image"].endswith(":v1.30.4")
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "my-extender-tls"
    assert not rendered.find("Secret")
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]


def test_gpumap_is_served_on_its_own_port_and_service_port(render: RenderFn) -> None:
    rendered = render()
    deployment = rendered.one("Deployment", "demo-hami-scheduler")
    extender = container(deployment, "extender")
    assert flag(extender["args"], "--gpumap-bind-address") == ":9397"
    assert flag(extender["args"], "--gpumap-frame-ancestors") == "'none'"
    ports = {p["name"]: p["containerPort"] for p in extender["ports"]}
    assert ports["gpumap"] == 9397
    service = rendered.one("Service", "demo-hami-scheduler")
    assert service["spec"]["type"] == "ClusterIP"
    served = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    assert served["gpumap"] == (9397, "gpumap")


def test_gpumap_values(render: RenderFn) -> None:
    values = {"scheduler": {"gpumap": {"port": 8099, "frameAncestors": "'self' https://p.example"}}}
    extender = container(render(values).one("Deployment", "demo-hami-scheduler"), "extender")
    assert flag(extender["args"], "--gpumap-bind-address") == ":8099"
    assert flag(extender["args"], "--gpumap-frame-ancestors") == "'self' https://p.example"
    rendered = render({"scheduler": {"gpumap": {"enabled": False}}})
    extender = container(rendered.one("Deployment", "demo-hami-scheduler"), "extender")
    assert flag(extender["args"], "--gpumap-bind-address") == ""
    assert "gpumap" not in {p["name"] for p in extender["ports"]}
    service = rendered.one("Service", "demo-hami-scheduler")
    assert "gpumap" not in {p["name"] for p in service["spec"]["ports"]}


def test_gpumap_dra_flag_and_its_rbac_go_together(render: RenderFn) -> None:
    extender = container(render().one("Deployment", "demo-hami-scheduler"), "extender")
    assert flag(extender["args"], "--gpumap-dra") == "true"
    for values in (
        {"scheduler": {"gpumap": {"dra": False}}},
        {"scheduler": {"gpumap": {"enabled": False}}},
    ):
        rendered = render(values)
        extender = container(rendered.one("Deployment", "demo-hami-scheduler"), "extender")
        assert flag(extender["args"], "--gpumap-dra") == "false"
        groups = {group for group, _, _ in rules_of(rendered, "demo-hami-scheduler")}
        assert "resource.k8s.io" not in groups


def test_gpumap_reads_usage_from_this_releases_monitors(render: RenderFn) -> None:
    rendered = render()
    extender = container(rendered.one("Deployment", "demo-hami-scheduler"), "extender")
    # The monitor Service the device plugin subchart renders, found by its EndpointSlices.
    assert flag(extender["args"], "--gpumap-monitors") == (
        "hami-system/demo-hami-device-plugin-monitor"
    )
    assert flag(extender["args"], "--gpumap-monitor-timeout") == "2s"
    monitor = rendered.one("Service", "demo-hami-device-plugin-monitor")
    assert [p["name"] for p in monitor["spec"]["ports"]] == ["monitor"]
    role = rendered.one("Role", "demo-hami-scheduler-monitors")
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list"]}
    ]
    binding = rendered.one("RoleBinding", "demo-hami-scheduler-monitors")
    assert binding["roleRef"]["name"] == "demo-hami-scheduler-monitors"
    # A template reaches monitors on the host network: no Role; off: no flag value, no Role.
    template = "http://{node_ip}:9394/metrics"
    rendered = render({"scheduler": {"gpumap": {"usage": {"monitors": template}}}})
    extender = container(rendered.one("Deployment", "demo-hami-scheduler"), "extender")
    assert flag(extender["args"], "--gpumap-monitors") == template
    assert not rendered.find("Role", "demo-hami-scheduler-monitors")
    rendered = render({"scheduler": {"gpumap": {"usage": {"enabled": False}}}})
    extender = container(rendered.one("Deployment", "demo-hami-scheduler"), "extender")
    assert flag(extender["args"], "--gpumap-monitors") == ""
    assert not rendered.find("Role", "demo-hami-scheduler-monitors")


def test_extender_certificate_is_generated_for_its_service(render: RenderFn) -> None:
    import base64

    from cryptography import x509

    secret = render().one("Secret", "demo-hami-scheduler-tls")
    assert secret["type"] == "kubernetes.io/tls"
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "demo-hami-scheduler.hami-system.svc" in names.get_values_for_type(x509.DNSName)
    assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN")


def test_without_kube_scheduler_only_the_extender_runs(render: RenderFn) -> None:
    rendered = render(NO_KUBE_SCHEDULER)
    deployment = rendered.one("Deployment", "demo-hami-scheduler")
    assert [c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]] == ["extender"]
    assert not rendered.find("ConfigMap", "demo-hami-scheduler-config")


# --- device plugin -------------------------------------------------------------------------------


def test_device_plugin_daemonset(render: RenderFn) -> None:
    daemonset = render().one("DaemonSet", "demo-hami-device-plugin")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gpu": "on"}
    plugin = container(daemonset, "device-plugin")
    mounts = {m["mountPath"]: m["name"] for m in plugin["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    host_paths = {
        path: volumes[name].get("hostPath", {}).get("path") for path, name in mounts.items()
    }
    # Host paths are mounted at their own paths (--host-root=/).
    for path in ("/var/lib/kubelet/device-plugins", "/usr/local/vgpu", "/tmp", "/sys"):
        assert host_paths[path] == path
    args = plugin["args"]
    assert flag(args, "--kubelet-socket") == "/var/lib/kubelet/device-plugins/kubelet.sock"
    assert flag(args, "--host-root") == "/"
    assert flag(args, "--hook-path") == "/usr/local"
    assert flag(args, "--node-config-file") == "/config/config.json"
    assert volumes[mounts["/config"]]["configMap"]["name"] == "demo-hami-device-plugin"
    assert plugin["securityContext"] == {"runAsUser": 0, "privileged": True}
    env = {e["name"]: e for e in plugin["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "ENABLE_TOPOLOGY_SCORE" not in env


def test_device_plugin_writes_pair_scores_when_asked(render: RenderFn) -> None:
    daemonset = render({"devicePlugin": {"enableTopologyScore": True}}).one(
        "DaemonSet", "demo-hami-device-plugin"
    )
    env = {e["name"]: e for e in container(daemonset, "device-plugin")["env"]}
    assert env["ENABLE_TOPOLOGY_SCORE"]["value"] == "true"


def test_device_plugin_values(render: RenderFn) -> None:
    rendered = render(FULL)
    daemonset = rendered.one("DaemonSet", "gpu-share-device-plugin")
    spec = daemonset["spec"]["template"]["spec"]
    plugin = container(daemonset, "device-plugin")
    assert spec["runtimeClassName"] == "nvidia"
    assert plugin["securityContext"]["privileged"] is False
    assert plugin["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert flag(plugin["args"], "--disable-core-limit") == "true"
    assert (
        flag(plugin["args"], "--kubelet-socket") == "/var/lib/kubelet/device-plugins/kubelet.sock"
    )
    (installer,) = spec["initContainers"]
    assert {"name": "hami-core", "mountPath": "/hostlib"} in installer["volumeMounts"]
    node_config = rendered.one("ConfigMap", "gpu-share-device-plugin")["data"]["config.json"]
    assert yaml.safe_load(node_config) == {
        "nodeconfig": [{"name": "gpu-node-1", "devicesplitcount": 2}]
    }


# --- vGPU monitor --------------------------------------------------------------------------------


def host_mounts(workload: Manifest, name: str) -> dict[str, tuple[str | None, bool]]:
    """mount path -> (host path of its volume, read-only) for one container."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    return {
        m["mountPath"]: (
            volumes[m["name"]].get("hostPath", {}).get("path"),
            m.get("readOnly", False),
        )
        for m in container(workload, name)["volumeMounts"]
    }


def env_of(found: Manifest) -> dict[str, Manifest]:
    return {e["name"]: e for e in found["env"]}


def test_vgpu_monitor_runs_beside_the_plugin(render: RenderFn) -> None:
    daemonset = render().one("DaemonSet", "demo-hami-device-plugin")
    spec = daemonset["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["device-plugin", "vgpu-monitor"]
    plugin = container(daemonset, "device-plugin")
    monitor = container(daemonset, "vgpu-monitor")
    # The plugin's image; its entrypoint is the plugin, so the monitor names its console script.
    assert monitor["image"] == plugin["image"] == "hami-deviceplugin:0.1.0"
    assert monitor["command"] == ["hami-vgpu-monitor"]
    args = monitor["args"]
    assert flag(args, "--metrics-bind-address") == ":9394"
    assert flag(args, "--device-backend") == "nvml"
    assert flag(args, "--log-format") == "json"
    assert "--legacy-metrics" not in args
    # In the cluster the service account is used: no API server address, no kubeconfig.
    assert not [a for a in args if a.startswith(("--kube-url", "--kubeconfig"))]
    env = env_of(monitor)
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["HOOK_PATH"]["value"] == "/usr/local/vgpu"
    assert env["HAMI_RESYNC_INTERVAL"]["value"] == "5m"
    assert env["NVIDIA_VISIBLE_DEVICES"] == env_of(plugin)["NVIDIA_VISIBLE_DEVICES"]
    assert monitor["ports"] == [{"name": "monitor", "containerPort": 9394, "protocol": "TCP"}]
    assert monitor["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "monitor"}
    assert monitor["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "monitor"}
    # NVML and other users' region files: the plugin's privileges.
    assert monitor["securityContext"] == plugin["securityContext"]
    assert monitor["resources"]["limits"]["memory"]


def test_vgpu_monitor_mounts_hook_path_and_mig_lock_directory(render: RenderFn) -> None:
    daemonset = render().one("DaemonSet", "demo-hami-device-plugin")
    mounts = host_mounts(daemonset, "vgpu-monitor")
    # The host's HOOK_PATH at the same path, writable (feedback writes, stale directory removal).
    assert mounts["/usr/local/vgpu"] == ("/usr/local/vgpu", False)
    assert mounts["/tmp/hami"][0] == "/tmp/hami"
    assert set(mounts) == {"/usr/local/vgpu", "/tmp/hami"}
    # What the plugin creates per Allocate (<hook>/vgpu/containers) is what the monitor reads.
    plugin_args = container(daemonset, "device-plugin")["args"]
    assert f"{flag(plugin_args, '--hook-path')}/vgpu" == "/usr/local/vgpu"


def test_vgpu_monitor_values(render: RenderFn) -> None:
    rendered = render(MONITOR_TUNED)
    daemonset = rendered.one("DaemonSet", "demo-hami-device-plugin")
    monitor = container(daemonset, "vgpu-monitor")
    args = monitor["args"]
    assert "--legacy-metrics" in args
    assert flag(args, "--log-level") == "debug"
    assert "--feedback-interval=2s" in args
    env = env_of(monitor)
    assert env["HOOK_PATH"]["value"] == "/opt/hami/vgpu"
    assert env["HAMI_RESYNC_INTERVAL"]["value"] == "90s"
    assert host_mounts(daemonset, "vgpu-monitor")["/opt/hami/vgpu"] == ("/opt/hami/vgpu", False)
    assert flag(container(daemonset, "device-plugin")["args"], "--hook-path") == "/opt/hami/"
    assert monitor["securityContext"]["privileged"] is False
    assert monitor["securityContext"]["capabilities"]["drop"] == ["ALL"]
    # HAMi's NodePort for the monitor, from devicePlugin.service.httpPort.
    service = rendered.one("Service", "demo-hami-device-plugin-monitor")
    assert service["spec"]["type"] == "NodePort"
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"], port["nodePort"]) == (9394, "monitor", 30992)


def test_vgpu_monitor_service_reaches_the_monitor_port(render: RenderFn) -> None:
    rendered = render()
    daemonset = rendered.one("DaemonSet", "demo-hami-device-plugin")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    service = rendered.one("Service", "demo-hami-device-plugin-monitor")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    assert "nodePort" not in port
    ports = {p["name"]: p["containerPort"] for p in container(daemonset, "vgpu-monitor")["ports"]}
    assert ports[port["targetPort"]] == 9394
    # Discovered by its endpoints: a pod's prometheus.io/port is the plugin's.
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "9394"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert daemonset["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] == "9397"
    # The headless Service (what the ServiceMonitor scrapes) has the monitor port too.
    headless = rendered.one("Service", "demo-hami-device-plugin-metrics")
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]} == {
        "metrics": 9397,
        "monitor": 9394,
    }


def test_service_monitor_scrapes_the_vgpu_monitor_once(render: RenderFn) -> None:
    rendered = render(FULL)
    monitor = rendered.one("ServiceMonitor", "gpu-share-device-plugin")
    endpoints = {e["port"]: e for e in monitor["spec"]["endpoints"]}
    assert set(endpoints) == {"metrics", "monitor"}
    assert endpoints["monitor"]["path"] == "/metrics"
    assert {
        "sourceLabels": ["__meta_kubernetes_pod_node_name"],
        "targetLabel": "node_name",
    } in endpoints["monitor"]["relabelings"]
    # Only the headless Service is selected, not the monitor Service as well (no double scrape).
    wanted = monitor["spec"]["selector"]["matchLabels"]
    selected = [
        s["metadata"]["name"]
        for s in rendered.find("Service")
        if wanted.items() <= s["metadata"]["labels"].items()
    ]
    assert selected == ["gpu-share-device-plugin-metrics"]
    assert rendered.one("Service", "gpu-share-device-plugin-monitor")


def test_vgpu_monitor_disabled_leaves_only_the_plugin(render: RenderFn) -> None:
    rendered = render(NO_MONITOR)
    daemonset = rendered.one("DaemonSet", "demo-hami-device-plugin")
    spec = daemonset["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["containers"]] == ["device-plugin"]
    assert {v["name"] for v in spec["volumes"]}.isdisjoint({"vgpu-hook", "mig-lock"})
    assert not rendered.find("Service", "demo-hami-device-plugin-monitor")
    headless = rendered.one("Service", "demo-hami-device-plugin-metrics")
    assert [p["name"] for p in headless["spec"]["ports"]] == ["metrics"]
    (endpoint,) = rendered.one("ServiceMonitor", "demo-hami-device-plugin")["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert "device-plugin-monitor" not in rendered.notes
    assert "svc/demo-hami-device-plugin-monitor" in render().notes


def test_vgpu_monitor_port_must_differ_from_the_plugins(helm: Any) -> None:
    values = {"devicePlugin": {"monitor": {"metricsPort": 9397}}}
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmError, match="metricsPort"):
        chart.render(values=values, name="demo", namespace="hami-system")


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [None, FULL], ids=["defaults", "full"])
def test_pods_carry_scrape_annotations_for_their_metrics_port(
    render: RenderFn, values: dict[str, Any] | None
) -> None:
    rendered = render(values)
    checked = 0
    for workload, template in pod_templates(rendered):
        if workload["kind"] == "Job":
            continue
        annotations = template["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        ports = {
            str(p["containerPort"]): p["name"]
            for c in template["spec"]["containers"]
            for p in c.get("ports", [])
        }
        assert ports[annotations["prometheus.io/port"]] == "metrics"
        checked += 1
    assert checked == 3


def test_service_monitors_are_off_by_default_and_select_metrics_ports(render: RenderFn) -> None:
    assert not render().find("ServiceMonitor")
    rendered = render(FULL)
    monitors = rendered.find("ServiceMonitor")
    assert len(monitors) == 3
    services = rendered.find("Service")
    for monitor in monitors:
        wanted = monitor["spec"]["selector"]["matchLabels"]
        matching = [s for s in services if wanted.items() <= s["metadata"]["labels"].items()]
        assert len(matching) == 1, monitor["metadata"]["name"]
        port_names = {p["name"] for p in matching[0]["spec"]["ports"]}
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["port"] in port_names, monitor["metadata"]["name"]


def test_every_pod_is_excluded_from_the_webhook(render: RenderFn) -> None:
    for workload, template in pod_templates(render(FULL)):
        assert template["metadata"]["labels"]["hami.io/webhook"] == "ignore", workload["metadata"]


def test_notes_tell_how_to_verify_the_install(render: RenderFn) -> None:
    notes = render().notes
    assert "kubectl -n hami-system get deploy,ds,pods -l app.kubernetes.io/instance=demo" in notes
    assert "hami\\.io/node-nvidia-register" in notes
    assert "demo-hami-webhook" in notes
    assert '"nvidia.com/gpumem":"1024"' in notes
    assert "hami-scheduler <node> success" in notes
    only_plugin = render(ONLY_PLUGIN).notes
    assert "mutatingwebhookconfiguration" not in only_plugin


def test_chart_files_are_inside_the_chart() -> None:
    """Helm reads only files inside the chart: nothing may point outside it."""
    for template in CHART.rglob("*.yaml"):
        for match in re.finditer(r'\.Files\.Get "([^"]+)"', template.read_text()):
            chart_root = template.parent.parent
            assert (chart_root / match.group(1)).is_file(), (template, match.group(1))
    assert not list(CHART.rglob("*.tgz"))
    assert all(not p.is_symlink() for p in CHART.rglob("*"))


def test_chart_yaml_declares_the_subcharts() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    declared = {d.get("alias", d["name"]): d for d in chart["dependencies"]}
    assert set(declared) == {"scheduler", "webhook", "devicePlugin"}
    for entry in chart["dependencies"]:
        sub = yaml.safe_load((CHART / "charts" / entry["name"] / "Chart.yaml").read_text())
        assert sub["version"] == entry["version"]
        assert entry["condition"] == f"{entry.get('alias', entry['name'])}.enabled"
    assert Path(CHART / "values.yaml").is_file()


@pytest.mark.parametrize(
    ("values", "where"),
    [
        ({"webhook": {"admissionWebhook": {"failurePolicy": "Sometimes"}}}, "failurePolicy"),
        ({"webhook": {"admissionWebhook": {"timeoutSeconds": 60}}}, "timeoutSeconds"),
        ({"devicePlugin": {"deviceSplitCount": 0}}, "deviceSplitCount"),
        ({"devicePlugin": {"migStrategy": "mixed"}}, "migStrategy"),
        ({"scheduler": {"filterMode": "some"}}, "filterMode"),
        ({"scheduler": {"defaultSchedulerPolicy": {"nodeSchedulerPolicy": "x"}}}, "nodeScheduler"),
        ({"scheduler": {"nodeLockExpire": "five minutes"}}, "nodeLockExpire"),
        ({"devices": {"nvidia": {"gpuCorePolicy": "always"}}}, "gpuCorePolicy"),
        ({"devicePlugin": {"monitor": {"resyncInterval": "5 minutes"}}}, "resyncInterval"),
        ({"devicePlugin": {"monitor": {"service": {"type": "ExternalName"}}}}, "type"),
    ],
)
def test_values_schemas_reject_what_the_services_would_refuse(
    helm: Any, values: dict[str, Any], where: str
) -> None:
    report = helm.lint(str(CHART), values, strict=True)
    assert any(where in error for error in report["errors"]), report["errors"]
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError, match=where):
        chart.render(values=values, name="demo", namespace="hami-system")


@pytest.mark.parametrize("values", [None, FULL, VALUE_SETS["dra"]], ids=["defaults", "full", "dra"])
def test_each_service_selects_the_pods_of_one_workload(
    render: RenderFn, values: dict[str, Any] | None
) -> None:
    rendered = render(values)
    for service in rendered.find("Service"):
        selector = service["spec"]["selector"]
        matched = [
            workload["metadata"]["name"]
            for workload, template in pod_templates(rendered)
            if selector.items() <= template["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, (service["metadata"]["name"], matched)
