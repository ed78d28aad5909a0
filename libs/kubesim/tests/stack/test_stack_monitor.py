"""The vGPU monitor in the stack: the flags of the monitor and device plugin processes, what the
monitors report read from their exposition text, checked against the allocated annotation, and
shown by the demo report."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.stack.checks.usage import (
    LIMIT,
    USED,
    UTILIZATION,
    DeviceReading,
    MonitorUsage,
    monitor_problems,
    parse_usage,
)
from hami_kubesim.stack.metrics import Sample, parse_samples
from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ClusterState
from hami_kubesim.stack.system.services import (
    HOOK_PATH,
    ServicePlan,
    deviceplugin_args,
    monitor_processes,
)
from hami_kubesim.stack.system.spec import SystemSpec, gpu_model_node
from hami_protocol import keys
from hami_protocol.pod.devices import ContainerDevice, encode_pod_devices

NOW = datetime(2026, 7, 1, tzinfo=UTC)
UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444-and-more"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
MIB = 1 << 20


def _pod(name: str, containers: dict[str, list[tuple[str, int]]], *, init: str = "") -> Any:
    """A running pod: per app container its ``(uuid, MiB)`` devices; ``init`` an init container
    holding the first GPU."""
    lists = [
        [ContainerDevice(u, "NVIDIA", mib, 10) for u, mib in devices]
        for devices in containers.values()
    ]
    if init:
        lists.insert(0, [ContainerDevice(UUID_A, "NVIDIA", 500, 10)])
    spec: dict[str, Any] = {"nodeName": "n1", "containers": [{"name": c} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": init}]
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": name,
            "annotations": {
                keys.NVIDIA_DEVICES_ALLOCATED: encode_pod_devices(tuple(map(tuple, lists)))
            },
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


def _exposition(rows: list[tuple[str, str, int, str, float, float, float]]) -> str:
    """Text as the monitor serves it: ``(pod, container, index, uuid, used, limit, util)``."""
    lines = []
    for family, at in ((USED, 4), (LIMIT, 5), (UTILIZATION, 6)):
        lines.append(f"# TYPE {family} gauge")
        for pod, container, index, uuid, *values in rows:
            labels = (
                f'namespace="ml",pod="{pod}",container="{container}",'
                f'vdevice_index="{index}",device_uuid="{uuid[:40]}",zone="vGPU"'
            )
            lines.append(f"{family}{{{labels}}} {values[at - 4]}")
    lines.append("# TYPE hami_vgpu_monitor_regions gauge")
    lines.append('hami_vgpu_monitor_regions{state="valid",zone="vGPU"} 3.0')
    return "\n".join(lines) + "\n"


def _state(*pods: Any) -> ClusterState:
    return ClusterState(tuple(pods), (), (), NOW)


def test_the_series_of_every_container_are_read() -> None:
    text = _exposition(
        [
            ("job", "main", 1, UUID_B, 3 * MIB, 8000 * MIB, 12.0),
            ("job", "main", 0, UUID_A, 5 * MIB, 8000 * MIB, 30.0),
            ("other", "c", 0, UUID_B, 1.0, 2.0, 3.0),
        ]
    )
    usage = parse_usage(parse_samples(text))
    assert set(usage.containers) == {("ml", "job", "main"), ("ml", "other", "c")}
    assert usage.of("ml", "job", "main") == (
        DeviceReading(0, UUID_A[:40], 5 * MIB, 8000 * MIB, 30.0),
        DeviceReading(1, UUID_B, 3 * MIB, 8000 * MIB, 12.0),
    )
    assert usage.of("ml", "job", "nope") == ()


def test_series_without_a_device_index_are_left_out() -> None:
    samples = [Sample(USED, {"namespace": "ml", "pod": "p", "container": "c"}, 1.0)]
    assert parse_usage(samples) == MonitorUsage()


@given(
    st.lists(
        st.tuples(
            st.sampled_from([USED, LIMIT, UTILIZATION, "x"]),
            st.dictionaries(
                st.sampled_from(["namespace", "pod", "container", "vdevice_index", "device_uuid"]),
                st.text(max_size=5),
            ),
            st.floats(allow_nan=False),
        )
    )
)
def test_any_samples_parse(samples: list[tuple[str, dict[str, str], float]]) -> None:
    usage = parse_usage(Sample(name, labels, value) for name, labels, value in samples)
    for readings in usage.containers.values():
        assert readings == tuple(sorted(readings, key=lambda r: (r.index, r.uuid)))


def test_a_report_as_allocated_has_no_problems() -> None:
    state = _state(
        _pod("job", {"main": [(UUID_A, 8000), (UUID_B, 8000)], "cpu": []}, init="warmup"),
    )
    usage = parse_usage(
        parse_samples(
            _exposition(
                [
                    ("job", "main", 0, UUID_A, 5 * MIB, 8000 * MIB, 30.0),
                    ("job", "main", 1, UUID_B, 3 * MIB, 8000 * MIB, 12.0),
                ]
            )
        )
    )
    assert monitor_problems(state, usage) == []


def test_what_the_monitor_misses_or_gets_wrong_is_named() -> None:
    state = _state(
        _pod("missing", {"c": [(UUID_A, 1000)]}),
        _pod("limit", {"c": [(UUID_A, 1000)]}),
        _pod("count", {"c": [(UUID_A, 1000), (UUID_B, 1000)]}),
        _pod("device", {"c": [(UUID_A, 1000)]}),
    )
    usage = parse_usage(
        parse_samples(
            _exposition(
                [
                    ("limit", "c", 0, UUID_A, 1.0, 999 * MIB, 1.0),
                    ("count", "c", 0, UUID_A, 1.0, 1000 * MIB, 1.0),
                    ("device", "c", 0, UUID_B, 1.0, 1000 * MIB, 1.0),
                ]
            )
        )
    )
    problems = monitor_problems(state, usage)
    assert problems == [
        "ml/missing c: no series from the vGPU monitor",
        f"ml/limit c #0: limit {999.0 * MIB} bytes, allocated {1000 * MIB} (1000 MiB)",
        "ml/count c: vdevice_index [0], 2 devices allocated",
        f"ml/device c #0: device {UUID_B}",
    ]
    pending = _pod("pending", {"c": [(UUID_A, 1000)]})
    pending["status"]["phase"] = "Pending"
    assert monitor_problems(_state(pending), MonitorUsage()) == []


def test_the_report_shows_the_monitor_beside_the_allocation() -> None:
    state = _state(_pod("job", {"main": [(UUID_A, 8000), (UUID_B, 8000)], "idle": [(UUID_B, 10)]}))
    usage = parse_usage(
        parse_samples(
            _exposition(
                [
                    ("job", "main", 0, UUID_A, 6000 * MIB, 8000 * MIB, 30.0),
                    ("job", "main", 1, UUID_B, 2000 * MIB, 8000 * MIB, 12.4),
                ]
            )
        )
    )
    text = render_report(state, usage=usage)
    assert (
        "        monitor: #0 GPU-aaaaaaaa… 6000/8000 MiB (75%) util 30%; "
        "#1 GPU-bbbbbbbb… 2000/8000 MiB (25%)\n                 util 12%\n"
    ) in text
    assert "idle: GPU-bbbbbbbb… (NVIDIA) 10 MiB 10% cores\n        monitor: no series\n" in text
    assert "monitor" not in render_report(state)


def test_each_node_with_a_plugin_gets_a_monitor_on_its_host_root(tmp_path: Path) -> None:
    one = gpu_model_node("n1", "Tesla T4", count=1, memory_mib=15360)
    two = replace(gpu_model_node("n2", "Tesla T4", count=1, memory_mib=15360), device_plugin=False)
    spec = SystemSpec(nodes=(one, two), vgpu_monitor=True, monitor_feedback_interval="100ms")
    plan = ServicePlan(tmp_path, 1, (2,), 2)
    roots = {"n1": tmp_path / "p/n1/host", "n2": tmp_path / "p/n2/host"}
    monitors = monitor_processes(spec, plan, "http://127.0.0.1:1", roots)
    assert set(monitors) == {"n1"}
    monitor = monitors["n1"].spec
    assert (monitor.name, monitor.module) == ("vgpu-monitor-n1", "hami_deviceplugin.monitor")
    assert f"--hook-path={roots['n1'] / HOOK_PATH}" in monitor.args
    assert f"--fake-devices={plan.devices_file('n1')}" in monitor.args
    assert "--feedback-interval=100ms" in monitor.args
    assert "--node-name=n1" in monitor.args
    assert "--kube-url=http://127.0.0.1:1" in monitor.args
    port = monitor.ready_url.removeprefix("http://127.0.0.1:").removesuffix("/readyz")
    assert f"--metrics-bind-address=127.0.0.1:{port}" in monitor.args
    assert monitor_processes(spec, plan, "http://127.0.0.1:1", {}) == {}

    for root, flag in ((roots["n1"], f"--host-root={roots['n1']}"), (None, "--host-root=none")):
        args = deviceplugin_args(
            spec,
            one,
            api_url="http://127.0.0.1:1",
            kubelet_socket=tmp_path / "p/n1/kubelet.sock",
            devices=tmp_path / "n1.yaml",
            host_root=root,
        )
        assert flag in args
