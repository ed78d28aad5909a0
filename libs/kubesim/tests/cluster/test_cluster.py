"""Cluster mode: the API server, admission, scheduling loop and kubelet stand-ins together."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_kubesim.cluster.config import ClusterConfig, ClusterConfigError, parse_cluster_config
from hami_kubesim.cluster.simulated import running_cluster
from hami_kubesim.testing import eventually


def _document(**extra: Any) -> dict[str, Any]:
    return {
        "namespaces": ["default", "team-a"],
        "nodes": [
            {"name": "worker-1", "labels": {"pool": "one"}},
            {"name": "worker-2", "labels": {"pool": "two"}, "kubelet": False},
        ],
        "objects": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "team-a"},
                "data": {"k": "v"},
            },
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "q", "namespace": "team-a"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}},
            },
        ],
        **extra,
    }


def _pod(name: str, pool: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "nodeSelector": {"pool": pool},
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


async def test_cluster_schedules_and_runs_a_plain_pod(tmp_path: Path) -> None:
    config = parse_cluster_config(_document(), base_dir=tmp_path)
    async with running_cluster(config) as cluster:
        server = cluster.apiserver.server
        assert sorted(n["metadata"]["name"] for n in server.list("nodes")) == [
            "worker-1",
            "worker-2",
        ]
        assert server.get("configmaps", "settings", namespace="team-a")["data"] == {"k": "v"}
        assert server.try_get("resourcequotas", "q", namespace="team-a") is not None
        assert list(cluster.kubelets) == ["worker-1"]
        assert cluster.kubelet("worker-1").kubelet_socket.is_socket()
        assert cluster.info()["nodes"]["worker-1"]["pluginDir"] == str(
            cluster.plugin_dirs["worker-1"]
        )
        pod_resources = cluster.kubelet("worker-1").pod_resources_socket
        assert pod_resources.is_socket()
        assert pod_resources.parent == cluster.plugin_dirs["worker-1"].with_name(
            "worker-1-pod-resources"
        )
        assert cluster.info()["nodes"]["worker-1"]["podResourcesSocket"] == str(pod_resources)
        assert set(server.kubelets) == {"worker-1"}  # /_sim/kubelets/worker-1/...
        assert cluster.scheduler is not None
        assert cluster.admission is not None

        await server.create("pods", _pod("runs", "one"))
        await server.create("pods", _pod("waits", "two"))

        def phase(name: str) -> tuple[str | None, str | None]:
            pod = server.get("pods", name, namespace="team-a")
            return pod["spec"].get("nodeName"), pod.get("status", {}).get("phase")

        await eventually(
            lambda: phase("runs") == ("worker-1", "Running"), within=15.0, what="runs running"
        )
        # worker-2 has no kubelet stand-in: the pod is bound there but never started.
        await eventually(lambda: phase("waits")[0] == "worker-2", within=15.0, what="waits bound")
        assert phase("waits")[1] == "Pending"
        running = server.get("pods", "runs", namespace="team-a")["status"]
        assert running["hostIP"] == config.nodes[0].address
        plugin_root = cluster.plugin_dirs["worker-1"].parent
    assert not plugin_root.exists()  # the temporary plugin root is removed
    assert server.kubelets == {}


async def test_cluster_without_scheduler_or_admission(tmp_path: Path) -> None:
    document = _document(
        scheduling={"enabled": False},
        admission={"enabled": False},
        kubelet={"pluginRoot": "dp"},
    )
    config = parse_cluster_config(document, base_dir=tmp_path)
    async with running_cluster(config) as cluster:
        assert cluster.scheduler is None
        assert cluster.admission is None
        assert cluster.plugin_dirs["worker-1"] == (tmp_path / "dp" / "worker-1").absolute()
        server = cluster.apiserver.server
        pod = _pod("pinned", "one")
        pod["spec"]["nodeName"] = "worker-1"
        await server.create("pods", pod)
        await eventually(
            lambda: (
                server.get("pods", "pinned", namespace="team-a")["status"].get("phase") == "Running"
            ),
            within=15.0,
            what="pinned running",
        )
    assert (tmp_path / "dp" / "worker-1").is_dir()  # a configured dir is kept
    assert not (tmp_path / "dp" / "worker-1" / "kubelet.sock").exists()


async def test_cluster_with_hami_core_gives_each_kubelet_a_host_root(tmp_path: Path) -> None:
    document = _document(
        scheduling={"enabled": False},
        admission={"enabled": False},
        kubelet={"pluginRoot": "dp", "hamiCore": True, "hamiCoreIntervalSeconds": 0.5},
    )
    config = parse_cluster_config(document, base_dir=tmp_path)
    async with running_cluster(config) as cluster:
        kubelet = cluster.kubelet("worker-1")
        root = (tmp_path / "dp" / "worker-1" / "host").absolute()
        assert kubelet.settings.host_root == root
        assert kubelet.workloads is not None
        assert kubelet.workloads.interval == 0.5
        assert cluster.info()["nodes"]["worker-1"]["hostRoot"] == str(root)
    async with running_cluster(_document_config(tmp_path)) as plain:
        assert plain.kubelet("worker-1").workloads is None
        assert "hostRoot" not in plain.info()["nodes"]["worker-1"]


def _document_config(tmp_path: Path) -> ClusterConfig:
    document = _document(scheduling={"enabled": False}, admission={"enabled": False})
    return parse_cluster_config(document, base_dir=tmp_path)


async def test_cluster_refuses_unknown_kinds_and_extender_indexes(tmp_path: Path) -> None:
    bad_kind = _document(
        objects=[{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]
    )
    with pytest.raises(ClusterConfigError, match=r"objects\[0\]"):
        async with running_cluster(parse_cluster_config(bad_kind, base_dir=tmp_path)):
            pass
    bad_index = _document(scheduling={"extenderURLs": ["http://127.0.0.1:1"]})
    with pytest.raises(ClusterConfigError, match=r"scheduling.extenderURLs\[0\]"):
        async with running_cluster(parse_cluster_config(bad_index, base_dir=tmp_path)):
            pass


async def test_cluster_command_prints_dirs_and_stops_on_sigterm(tmp_path: Path) -> None:
    config_file = tmp_path / "cluster.yaml"
    config_file.write_text(yaml.safe_dump(_document(kubelet={"pluginRoot": "dp"})))
    info_file = tmp_path / "info.json"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_kubesim",
        "cluster",
        "--config",
        str(config_file),
        "--port",
        "0",
        "--info-file",
        str(info_file),
        "--log-level",
        "WARNING",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    plugin_dir = tmp_path / "dp" / "worker-1"
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not lines or lines[-1] != "ready":
                raw = await process.stdout.readline()
                if not raw:
                    break
                lines.append(raw.decode().strip())
        assert lines[-1] == "ready"
        url = lines[0].removeprefix("api-server ")
        assert url.startswith("http://127.0.0.1:")
        assert f"node worker-1 plugin-dir {plugin_dir}" in lines
        assert (plugin_dir / "kubelet.sock").is_socket()
        info = json.loads(info_file.read_text())
        assert info["url"] == url
        assert info["nodes"]["worker-1"]["kubeletSocket"] == str(plugin_dir / "kubelet.sock")
    finally:
        process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(30):
            _, stderr = await process.communicate()
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert not (plugin_dir / "kubelet.sock").exists()


async def test_cluster_command_reports_a_bad_file(tmp_path: Path) -> None:
    config_file = tmp_path / "cluster.yaml"
    config_file.write_text(yaml.safe_dump({"nodes": [{"name": "a", "kubelet": "maybe"}]}))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hami_kubesim",
        "cluster",
        "--config",
        str(config_file),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode == 2
    assert "nodes[0].kubelet" in stderr.decode()
