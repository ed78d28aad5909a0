"""``SystemSpec.gpumap``: each extender replica gets ``--gpumap-bind-address`` on a port of its
own (empty, i.e. no map, when off: the flag's default would bind :9397 on every interface), and
the scheduler Service's names match what ``kubectl hami`` looks for by default."""

from __future__ import annotations

from pathlib import Path

from hami_kubesim.stack.system.objects import (
    GPUMAP_PORT,
    MONITOR_SERVICE,
    SCHEDULER_GPUMAP_PROXY,
)
from hami_kubesim.stack.system.services import ServicePlan, scheduler_processes
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, gpu_model_node


def _args(spec: SystemSpec, plan: ServicePlan, tmp_path: Path) -> list[tuple[str, ...]]:
    return [p.spec.args for p in scheduler_processes(spec, plan, "http://127.0.0.1:1", tmp_path)]


def test_each_replica_serves_its_gpu_map_on_its_own_port(tmp_path: Path) -> None:
    node = gpu_model_node("n1", "Tesla T4", count=1, memory_mib=15360)
    spec = SystemSpec(nodes=(node,), scheduler=SchedulerOptions(replicas=2), gpumap=True)
    plan = ServicePlan(tmp_path, 1, (2, 3), 4, gpumap_ports=(5, 6))
    first, second = _args(spec, plan, tmp_path)
    assert "--gpumap-bind-address=127.0.0.1:5" in first
    assert "--gpumap-bind-address=127.0.0.1:6" in second
    off = ServicePlan(tmp_path, 1, (2, 3), 4)
    for args in _args(spec, off, tmp_path):
        assert [a for a in args if a.startswith("--gpumap")] == [
            "--gpumap-bind-address=",
            "--gpumap-max-age=0s",
            "--gpumap-monitors=",
        ]


def test_the_map_reads_the_monitors_the_stack_runs_through_their_service(tmp_path: Path) -> None:
    node = gpu_model_node("n1", "Tesla T4", count=1, memory_mib=15360)
    plan = ServicePlan(tmp_path, 1, (2,), 2, gpumap_ports=(5,))
    monitored = SystemSpec(nodes=(node,), vgpu_monitor=True)
    ((args),) = _args(monitored, plan, tmp_path)
    assert MONITOR_SERVICE == ("hami-system", "hami-device-plugin-monitor")
    assert "--gpumap-monitors=hami-system/hami-device-plugin-monitor" in args
    # No monitors: off (the flag's default, each node's InternalIP, leads nowhere here).
    ((bare),) = _args(SystemSpec(nodes=(node,)), plan, tmp_path)
    assert "--gpumap-monitors=" in bare


def test_the_proxy_path_is_the_plugins_default() -> None:
    assert GPUMAP_PORT == ("gpumap", 9397)
    assert SCHEDULER_GPUMAP_PROXY == (
        "/api/v1/namespaces/kube-system/services/hami-scheduler:gpumap/proxy/"
    )
