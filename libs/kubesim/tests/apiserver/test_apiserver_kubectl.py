"""kubectl against the emulator: get, describe, annotate, apply (skipped without kubectl)."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hami_kubesim.testing import RunningApiServer, running_apiserver

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

POD_YAML = """\
apiVersion: v1
kind: Pod
metadata:
  name: demo
  namespace: default
  labels: {app: "LABEL"}
spec:
  containers:
  - name: main
    image: busybox:1.36
    resources:
      limits: {nvidia.com/gpu: "1", nvidia.com/gpumem: "3000"}
"""


class Kubectl:
    def __init__(self, sim: RunningApiServer, tmp: Path) -> None:
        self.sim = sim
        self.tmp = tmp
        self.config = tmp / "kubeconfig"
        self.config.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "sim", "cluster": {"server": sim.url}}],
                    "users": [{"name": "u", "user": {}}],
                    "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
                    "current-context": "sim",
                }
            )
        )

    async def __call__(self, *args: str, ok: bool = True) -> str:
        assert KUBECTL is not None
        proc = await asyncio.create_subprocess_exec(
            KUBECTL,
            f"--kubeconfig={self.config}",
            f"--cache-dir={self.tmp / 'cache'}",
            "--request-timeout=20s",
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        async with asyncio.timeout(60):
            out, err = await proc.communicate()
        if ok:
            assert proc.returncode == 0, err.decode()
        return out.decode() + err.decode()

    def manifest(self, label: str) -> str:
        path = self.tmp / f"pod-{label}.yaml"
        path.write_text(POD_YAML.replace("LABEL", label))
        return str(path)


@pytest.fixture
async def kubectl(tmp_path: Path) -> AsyncIterator[Kubectl]:
    async with running_apiserver() as sim:
        yield Kubectl(sim, tmp_path)


async def test_get_nodes_and_namespaces(kubectl: Kubectl) -> None:
    node = {
        "metadata": {"name": "gpu-1", "labels": {"node-role.kubernetes.io/worker": ""}},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0"},
        },
    }
    await kubectl.sim.server.create("nodes", node)
    out = await kubectl("get", "nodes")
    header, row = out.strip().splitlines()
    assert header.split()[:5] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row.split()[:3] == ["gpu-1", "Ready", "worker"]
    out = await kubectl("get", "ns", "-o", "name")
    assert "namespace/kube-system" in out.split()
    missing = await kubectl("get", "pod", "nope", ok=False)
    assert 'pods "nope" not found' in missing
    await kubectl.sim.server.create(
        "pods",
        {
            "metadata": {"name": "p"},
            "spec": {
                "nodeName": "gpu-1",
                "containers": [
                    {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
                ],
            },
        },
    )
    described = await kubectl("describe", "node", "gpu-1")
    assert re.search(r"Non-terminated Pods:\s+\(1 in total\)", described)
    assert re.search(r"\n\s+default\s+p\s", described)


async def test_apply_annotate_describe(kubectl: Kubectl) -> None:
    assert "pod/demo created" in await kubectl("apply", "-f", kubectl.manifest("one"))
    assert "pod/demo unchanged" in await kubectl("apply", "-f", kubectl.manifest("one"))
    assert "pod/demo configured" in await kubectl("apply", "-f", kubectl.manifest("two"))
    stored = kubectl.sim.server.get("pods", "demo", namespace="default")
    assert stored["metadata"]["labels"] == {"app": "two"}
    limits = stored["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}
    assert "pod/demo annotated" in await kubectl("annotate", "pod", "demo", "hami.io/x=y")
    assert (
        kubectl.sim.server.get("pods", "demo", namespace="default")["metadata"]["annotations"][
            "hami.io/x"
        ]
        == "y"
    )
    await kubectl.sim.server.bind("default", "demo", "gpu-1")
    event = {
        "metadata": {"name": "demo.1", "namespace": "default"},
        "involvedObject": {
            "kind": "Pod",
            "name": "demo",
            "namespace": "default",
            "uid": stored["metadata"]["uid"],
        },
        "reason": "Scheduled",
        "message": "Successfully assigned default/demo to gpu-1",
        "type": "Normal",
        "source": {"component": "default-scheduler"},
        "count": 1,
    }
    await kubectl.sim.server.create("events", event)
    described = await kubectl("describe", "pod", "demo")
    assert "Node:             gpu-1" in described
    assert "hami.io/x: y" in described
    assert re.search(r"nvidia.com/gpumem:\s+3k", described)
    assert "Successfully assigned default/demo to gpu-1" in described
    wide = await kubectl("get", "pods", "-o", "wide")
    assert "gpu-1" in wide.splitlines()[1]
    as_json = json.loads(await kubectl("get", "pod", "demo", "-o", "json"))
    assert as_json["kind"] == "Pod"
    assert as_json["spec"]["nodeName"] == "gpu-1"
    assert 'pod "demo" deleted' in await kubectl("delete", "pod", "demo")
    assert kubectl.sim.server.try_get("pods", "demo", namespace="default") is None


async def test_priority_classes_and_budgets(kubectl: Kubectl) -> None:
    # (kubectl create sends protobuf, which kubesim does not read: apply sends JSON.)
    manifest = kubectl.tmp / "objects.yaml"
    manifest.write_text(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: batch}\n"
        "value: 1000\npreemptionPolicy: Never\n---\n"
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\n"
        "metadata: {name: web, namespace: default}\n"
        "spec: {minAvailable: 1, selector: {matchLabels: {app: web}}}\n"
    )
    out = await kubectl("apply", "-f", str(manifest))
    assert "priorityclass.scheduling.k8s.io/batch created" in out
    assert "poddisruptionbudget.policy/web created" in out
    header, *rows = (await kubectl("get", "pc")).strip().splitlines()
    assert header.split() == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    by_name = {row.split()[0]: row.split() for row in rows}
    assert by_name["batch"][1:3] == ["1000", "false"]
    assert by_name["batch"][-1] == "Never"
    assert by_name["system-node-critical"][1] == "2000001000"
    refused = await kubectl("delete", "pc", "system-node-critical", ok=False)
    assert "this is a system priority class and cannot be deleted" in refused
    header, row = (await kubectl("get", "pdb")).strip().splitlines()
    assert header.split()[:4] == ["NAME", "MIN", "AVAILABLE", "MAX"]
    assert row.split()[:4] == ["web", "1", "N/A", "0"]
