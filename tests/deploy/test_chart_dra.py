"""The chart's DRA switches: ``devicePlugin.dra`` (a second DaemonSet running ``--mode dra`` on
one node pool, the DeviceClass, the driver's RBAC) and ``webhook.draClaims`` (the conversion of
NVIDIA requests, per namespace or everywhere).  Rendered by Helm's own engine."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import RenderFn
from .helpers import CHART, Manifest
from .test_chart import container, flag, host_mounts, rules_of

DRA_NODES = {"hami.io/dra": "true"}
DRA: dict[str, Any] = {"devicePlugin": {"dra": {"enabled": True, "nodeSelector": DRA_NODES}}}
PLUGIN, DRA_PLUGIN = "demo-hami-device-plugin", "demo-hami-device-plugin-dra"


def pod_spec(workload: Manifest) -> Manifest:
    spec: Manifest = workload["spec"]["template"]["spec"]
    return spec


def required_terms(workload: Manifest) -> list[Manifest]:
    affinity = pod_spec(workload).get("affinity", {})
    node = affinity.get("nodeAffinity", {})
    terms: list[Manifest] = node.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get(
        "nodeSelectorTerms", []
    )
    return terms


def test_dra_is_off_by_default(render: RenderFn) -> None:
    rendered = render()
    assert [d["metadata"]["name"] for d in rendered.find("DaemonSet")] == [PLUGIN]
    assert not rendered.find("DeviceClass")
    assert not required_terms(rendered.one("DaemonSet", PLUGIN))
    assert not {r for r in rules_of(rendered, PLUGIN) if r[0] == "resource.k8s.io"}
    (hook,) = rendered.one("MutatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"]["service"]["path"] == "/webhook"
    assert hook["sideEffects"] == "None"
    webhook = container(rendered.one("Deployment", "demo-hami-webhook"), "webhook")
    assert flag(webhook["args"], "--dra-claims") is None


def test_the_dra_pool_runs_the_kubelet_plugin(render: RenderFn) -> None:
    rendered = render(DRA)
    daemonset = rendered.one("DaemonSet", DRA_PLUGIN)
    plugin = container(daemonset, "device-plugin")
    args = plugin["args"]
    assert flag(args, "--mode") == "dra"
    assert flag(args, "--kubelet-dir") == "/var/lib/kubelet"
    assert flag(args, "--cdi-dir") == "/var/run/cdi"
    assert flag(args, "--kubelet-socket") is None
    assert flag(args, "--pod-resources-socket") is None
    mounts = host_mounts(daemonset, "device-plugin")
    # The sockets and the CDI specs at the host's own paths (the kubelet dials the endpoint the
    # plugin names; the runtime reads the specs).
    for path in (
        "/var/lib/kubelet/plugins_registry",
        "/var/lib/kubelet/plugins",
        "/var/run/cdi",
    ):
        assert mounts[path] == (path, False)
    assert "/var/lib/kubelet/device-plugins" not in mounts
    # HAMi-core's files and the vGPU monitor, as on the device-plugin path.
    assert mounts["/usr/local/vgpu"] == ("/usr/local/vgpu", False)
    assert [c["name"] for c in pod_spec(daemonset)["containers"]] == [
        "device-plugin",
        "vgpu-monitor",
    ]
    assert pod_spec(daemonset)["nodeSelector"] == {"gpu": "on", **DRA_NODES}


def test_a_node_runs_one_protocol(render: RenderFn) -> None:
    rendered = render(
        {"devicePlugin": {"dra": {"enabled": True, "nodeSelector": {"a": "1", "b": "2"}}}}
    )
    plugin, dra = rendered.one("DaemonSet", PLUGIN), rendered.one("DaemonSet", DRA_PLUGIN)
    # Not a DRA node = some DRA label differs (terms are ORed).
    assert required_terms(plugin) == [
        {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]},
        {"matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["2"]}]},
    ]
    assert pod_spec(dra)["nodeSelector"] == {"gpu": "on", "a": "1", "b": "2"}
    # Immutable selectors that never select each other's pods.
    for one, other in ((plugin, dra), (dra, plugin)):
        selector = one["spec"]["selector"]["matchLabels"]
        labels = other["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= labels.items()
    assert plugin["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == (
        "device-plugin"
    )


def test_a_required_node_affinity_from_values_is_kept_on_both(render: RenderFn) -> None:
    mine = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
    named = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [mine, named]}
        }
    }
    values = {"devicePlugin": {**DRA["devicePlugin"], "affinity": affinity}}
    rendered = render(values)
    not_dra = {"key": "hami.io/dra", "operator": "NotIn", "values": ["true"]}
    assert required_terms(rendered.one("DaemonSet", PLUGIN)) == [
        {"matchExpressions": [*mine["matchExpressions"], not_dra]},
        {**named, "matchExpressions": [not_dra]},
    ]
    assert pod_spec(rendered.one("DaemonSet", DRA_PLUGIN))["affinity"] == affinity


def test_dra_ships_the_device_class_and_the_drivers_rbac(render: RenderFn) -> None:
    rendered = render(DRA)
    device_class = rendered.one("DeviceClass", "gpu.hami.io")
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["spec"] == {
        "selectors": [{"cel": {"expression": 'device.driver == "gpu.hami.io"'}}]
    }
    assert rules_of(rendered, PLUGIN) - rules_of(render(), PLUGIN) == {
        (
            "resource.k8s.io",
            "resourceslices",
            ("create", "delete", "get", "list", "patch", "update", "watch"),
        ),
        ("resource.k8s.io", "resourceclaims", ("get",)),
    }
    # Both DaemonSets run as the same service account.
    accounts = {pod_spec(d)["serviceAccountName"] for d in rendered.find("DaemonSet")}
    assert accounts == {PLUGIN}
    kept = render(
        {"devicePlugin": {"dra": {**DRA["devicePlugin"]["dra"], "deviceClass": {"create": False}}}}
    )
    assert not kept.find("DeviceClass")


def test_dra_paths_and_totals(render: RenderFn) -> None:
    values = {
        "global": {"capacityTotals": True},
        "devicePlugin": {
            "dra": {
                **DRA["devicePlugin"]["dra"],
                "kubeletDir": "/data/kubelet/",
                "cdiDir": "/etc/cdi",
            }
        },
    }
    rendered = render(values)
    daemonset = rendered.one("DaemonSet", DRA_PLUGIN)
    args = container(daemonset, "device-plugin")["args"]
    assert flag(args, "--kubelet-dir") == "/data/kubelet"
    assert flag(args, "--cdi-dir") == "/etc/cdi"
    mounts = host_mounts(daemonset, "device-plugin")
    assert mounts["/data/kubelet/plugins_registry"] == ("/data/kubelet/plugins_registry", False)
    assert mounts["/etc/cdi"] == ("/etc/cdi", False)
    # Capacity totals are node status of the device-plugin path only.
    assert flag(args, "--advertise-capacity-totals") is None
    plugin = container(rendered.one("DaemonSet", PLUGIN), "device-plugin")
    assert flag(plugin["args"], "--advertise-capacity-totals") == "true"


def test_dra_pods_have_their_own_metrics_service(render: RenderFn) -> None:
    rendered = render(
        {"devicePlugin": {**DRA["devicePlugin"], "serviceMonitor": {"enabled": True}}}
    )
    service = rendered.one("Service", f"{PLUGIN}-dra-metrics")
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "device-plugin-dra"
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics", "monitor"]
    # Labelled like the plugin's Service, so the one ServiceMonitor scrapes both.
    monitor = rendered.one("ServiceMonitor", PLUGIN)
    wanted = monitor["spec"]["selector"]["matchLabels"]
    assert wanted.items() <= service["metadata"]["labels"].items()


def test_dra_needs_a_node_selector(helm: Any) -> None:
    values = {"devicePlugin": {"dra": {"enabled": True, "nodeSelector": {}}}}
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmError, match="nodeSelector"):
        chart.render(values=values, name="demo", namespace="hami-system")


# --- the webhook's conversion ------------------------------------------------------------------


def webhooks(rendered: Any) -> dict[str, Manifest]:
    configuration = rendered.one("MutatingWebhookConfiguration")
    return {hook["name"]: hook for hook in configuration["webhooks"]}


def test_opted_in_namespaces_go_to_the_converting_path(render: RenderFn) -> None:
    rendered = render({"webhook": {"draClaims": {"enabled": True}}})
    hooks = webhooks(rendered)
    assert set(hooks) == {"vgpu.hami.io", "dra.vgpu.hami.io"}
    classic, converting = hooks["vgpu.hami.io"], hooks["dra.vgpu.hami.io"]
    assert classic["clientConfig"]["service"]["path"] == "/webhook"
    assert converting["clientConfig"]["service"]["path"] == "/webhook/dra"
    # Templates are created before the answer, never on a dry run.
    assert (classic["sideEffects"], converting["sideEffects"]) == ("None", "NoneOnDryRun")
    label = {"key": "hami.io/dra-claims", "values": ["true"]}
    assert {**label, "operator": "NotIn"} in classic["namespaceSelector"]["matchExpressions"]
    assert {**label, "operator": "In"} in converting["namespaceSelector"]["matchExpressions"]
    # Everything else is the same webhook.
    for key in ("rules", "objectSelector", "failurePolicy", "timeoutSeconds"):
        assert classic[key] == converting[key]
    webhook = container(rendered.one("Deployment", "demo-hami-webhook"), "webhook")
    assert flag(webhook["args"], "--dra-claims") == "true"
    assert rules_of(rendered, "demo-hami-webhook") == {
        ("", "resourcequotas", ("list", "watch")),
        ("", "pods", ("list", "watch")),
        ("resource.k8s.io", "resourceclaimtemplates", ("create",)),
    }


def test_all_namespaces_and_a_custom_url(render: RenderFn) -> None:
    values = {
        "webhook": {
            "draClaims": {"enabled": True, "allNamespaces": True},
            "enableQuota": False,
            "admissionWebhook": {"customURL": {"enabled": True, "host": "10.0.0.5"}},
            "certManager": {"enabled": True},
        }
    }
    rendered = render(values)
    (hook,) = webhooks(rendered).values()
    assert hook["name"] == "vgpu.hami.io"
    assert hook["clientConfig"]["url"] == "https://10.0.0.5:31998/webhook/dra"
    assert hook["sideEffects"] == "NoneOnDryRun"
    keys = {e["key"] for e in hook["namespaceSelector"]["matchExpressions"]}
    assert "hami.io/dra-claims" not in keys
    # Without the quota check the webhook only creates templates.
    assert rules_of(rendered, "demo-hami-webhook") == {
        ("resource.k8s.io", "resourceclaimtemplates", ("create",))
    }
