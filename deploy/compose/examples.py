"""Submit the example pods to the compose stack's API server, print what became of each, and
check the outcome each example expects.

Waits (with a deadline) until every GPU node of ``--gpu-node`` is registered by its device
plugin, then submits the pods of ``--examples`` (``*.yaml`` in name order, documents in file
order) one at a time, each once the previous one has settled: Running, reported unschedulable
(``PodScheduled=False``), or refused at admission.  An example states what it expects in
``demo.hami.io/*`` annotations (``expect``: placed / unschedulable / rejected; ``expect-node``,
``expect-gpu-model``, ``expect-gpu``, ``expect-same-gpu-as``, ``expect-other-gpu-than``,
``expect-reason``); one line per pod says what happened and whether it matched.  Exit status 1
when an expectation failed.  Standard library plus PyYAML only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REGISTER_KEY = "hami.io/node-nvidia-register"
DEVICES_KEY = "hami.io/vgpu-devices-allocated"
EXPECT = "demo.hami.io/expect"
POLL_S = 0.5


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"null")
    except ValueError:
        return raw.decode(errors="replace")  # /healthz answers plain text


def _call(method: str, url: str, body: Mapping[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, _decode(response.read())
    except urllib.error.HTTPError as error:
        return error.code, _decode(error.read())


def _wait(what: str, check: Callable[[], bool], deadline: float) -> bool:
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except (urllib.error.URLError, OSError, KeyError, TypeError, ValueError):
            pass
        time.sleep(POLL_S)
    sys.stdout.write(f"examples: timed out waiting for {what}\n")
    return False


@dataclass
class Cluster:
    api: str
    gpu_types: dict[str, str] = field(default_factory=dict)
    """GPU UUID -> registered type, from the nodes' register annotations."""

    def registered_nodes(self) -> set[str]:
        _, nodes = _call("GET", f"{self.api}/api/v1/nodes")
        names = set()
        for node in nodes.get("items", []):
            registered = (node["metadata"].get("annotations") or {}).get(REGISTER_KEY)
            if registered:
                names.add(node["metadata"]["name"])
                for device in json.loads(registered):
                    self.gpu_types[device["id"]] = device["type"]
        return names

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        _, pod = _call("GET", f"{self.api}/api/v1/namespaces/{namespace}/pods/{name}")
        return dict(pod) if isinstance(pod, dict) else {}

    def scheduling_messages(self, namespace: str, name: str) -> list[str]:
        selector = urllib.parse.quote(f"involvedObject.name={name}")
        _, events = _call(
            "GET", f"{self.api}/api/v1/namespaces/{namespace}/events?fieldSelector={selector}"
        )
        return [
            str(event.get("message", ""))
            for event in (events or {}).get("items", [])
            if event.get("reason") == "FailedScheduling"
        ]


def gpus_of(pod: Mapping[str, Any]) -> list[str]:
    """UUIDs in the pod's ``hami.io/vgpu-devices-allocated`` (``uuid,type,mem,cores:...;``)."""
    text = (pod.get("metadata", {}).get("annotations") or {}).get(DEVICES_KEY, "")
    return [
        device.split(",")[0]
        for container in text.split(";")
        for device in container.split(":")
        if device.strip()
    ]


def unschedulable_message(pod: Mapping[str, Any]) -> str | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return None


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    outcome: str
    detail: str
    problems: tuple[str, ...]


def submit(cluster: Cluster, pod: Mapping[str, Any], deadline: float) -> tuple[str, str]:
    """Create ``pod`` and wait until it settles; returns (outcome, message)."""
    namespace = pod["metadata"].get("namespace", "default")
    name = pod["metadata"]["name"]
    status, body = _call("POST", f"{cluster.api}/api/v1/namespaces/{namespace}/pods", pod)
    if status == 409:
        _call("DELETE", f"{cluster.api}/api/v1/namespaces/{namespace}/pods/{name}")
        _wait(f"{name} deleted", lambda: not cluster.pod(namespace, name), deadline)
        status, body = _call("POST", f"{cluster.api}/api/v1/namespaces/{namespace}/pods", pod)
    if status >= 400:
        return "rejected", str((body or {}).get("message", body))
    settled: dict[str, Any] = {}

    def done() -> bool:
        current = cluster.pod(namespace, name)
        settled.update(current)
        phase = (current.get("status") or {}).get("phase")
        return phase == "Running" or unschedulable_message(current) is not None

    if not _wait(f"{name} to settle", done, deadline):
        return "in-flight", ""
    message = unschedulable_message(settled)
    if (settled.get("status") or {}).get("phase") == "Running":
        return "placed", ""
    return "unschedulable", " | ".join(
        [message or "", *cluster.scheduling_messages(namespace, name)]
    )


def check(
    cluster: Cluster,
    pod: Mapping[str, Any],
    outcome: str,
    message: str,
    placed: Mapping[str, Mapping[str, Any]],
) -> list[str]:
    annotations = pod["metadata"].get("annotations") or {}
    name = pod["metadata"]["name"]
    expected = annotations.get(EXPECT)
    problems = []
    if expected and expected != outcome:
        problems.append(f"expected {expected}, got {outcome}")
    reason = annotations.get(EXPECT + "-reason")
    if reason and reason not in message:
        problems.append(f"reason {reason!r} not in {message[:200]!r}")
    live = placed.get(name, {})
    node = annotations.get(EXPECT + "-node")
    if node and (live.get("spec") or {}).get("nodeName") != node:
        problems.append(f"expected node {node}")
    gpus = gpus_of(live)
    model = annotations.get(EXPECT + "-gpu-model")
    if model and not all(model.lower() in cluster.gpu_types.get(g, "").lower() for g in gpus):
        problems.append(f"expected {model} GPUs")
    gpu = annotations.get(EXPECT + "-gpu")
    if gpu and gpu not in gpus:
        problems.append(f"expected GPU {gpu}")
    same = annotations.get(EXPECT + "-same-gpu-as")
    if same and not set(gpus) & set(gpus_of(placed.get(same, {}))):
        problems.append(f"expected a GPU shared with {same}")
    other = annotations.get(EXPECT + "-other-gpu-than")
    if other and set(gpus) & set(gpus_of(placed.get(other, {}))):
        problems.append(f"expected no GPU shared with {other}")
    return problems


def describe(pod: Mapping[str, Any], outcome: str, message: str) -> str:
    if outcome != "placed":
        return message[:160]
    node = (pod.get("spec") or {}).get("nodeName", "-")
    return f"node={node} devices={(pod['metadata'].get('annotations') or {}).get(DEVICES_KEY)}"


def run(api: str, examples: Path, gpu_nodes: list[str], timeout: float) -> int:
    cluster = Cluster(api)
    deadline = time.monotonic() + timeout
    if not _wait("the API server", lambda: _call("GET", f"{api}/healthz")[0] == 200, deadline):
        return 1
    if not _wait(
        f"device plugins to register {', '.join(gpu_nodes)}",
        lambda: set(gpu_nodes) <= cluster.registered_nodes(),
        deadline,
    ):
        return 1
    files = sorted(examples.glob("*.yaml")) if examples.is_dir() else [examples]
    pods = [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]
    placed: dict[str, dict[str, Any]] = {}
    failures = 0
    for pod in pods:
        outcome, message = submit(cluster, pod, deadline)
        name = pod["metadata"]["name"]
        live = cluster.pod(pod["metadata"].get("namespace", "default"), name)
        if outcome == "placed":
            placed[name] = live
        problems = check(cluster, pod, outcome, message, placed)
        failures += bool(problems)
        verdict = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
        line = f"{name:<18} {outcome:<13} {describe(live, outcome, message)}  [{verdict}]"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--api", default="http://kubesim:8001", help="API server URL")
    parser.add_argument(
        "--examples", type=Path, required=True, help="directory of *.yaml, or one file"
    )
    parser.add_argument("--gpu-node", action="append", default=[], help="node to wait for")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for everything")
    args = parser.parse_args(argv)
    return run(args.api.rstrip("/"), args.examples, args.gpu_node, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
