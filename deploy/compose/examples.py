"""Submit the example pods to the compose stack's API server, print what became of each, and
check the outcome each example expects.

Waits (with a deadline) until every GPU node of ``--gpu-node`` is registered by its device
plugin and every DRA node of ``--dra-node`` has its GPUs in a ResourceSlice of driver
``gpu.hami.io``, then submits the documents of each ``--examples`` (``*.yaml`` in name order,
documents in file order) in turn.  Claims, claim templates and PriorityClasses are created (one
that exists already is kept); pods one at a time, each once the previous one has settled:
Running, reported unschedulable (``PodScheduled=False``), or refused at admission.  An example
states what it expects in ``demo.hami.io/*`` annotations (``expect``: placed / unschedulable /
rejected; ``expect-node``, ``expect-gpu-model``, ``expect-gpu``, ``expect-same-gpu-as``,
``expect-other-gpu-than``, ``expect-reason``); a pod's GPUs are those of its
``hami.io/vgpu-devices-allocated`` annotation and those allocated to its DRA claims (by UUID, from
the ResourceSlices).  One line per pod says what happened and whether it matched (one per other
object too).  Exit status 1 when an expectation failed or an object was refused.  Standard
library plus PyYAML only.
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
DRA_DRIVER = "gpu.hami.io"
RESOURCE_API = "apis/resource.k8s.io/v1"
OBJECT_PATHS = {
    "ResourceClaim": (RESOURCE_API, "resourceclaims", True),
    "ResourceClaimTemplate": (RESOURCE_API, "resourceclaimtemplates", True),
    "PriorityClass": ("apis/scheduling.k8s.io/v1", "priorityclasses", False),
}
"""The other kinds the examples hold: API group path, resource, namespaced."""
CLAIM_WAITS = (
    "ResourceClaim not created yet",
    'resourceclaim.resource.k8s.io "',  # ... not found
    "is in the process of being allocated",
    "is being deleted",
)


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


def _attribute(device: Mapping[str, Any], name: str) -> str:
    """A device's string attribute, named bare or qualified by the driver's domain."""
    attributes = device.get("attributes") or {}
    value = attributes.get(name) or attributes.get(f"{DRA_DRIVER}/{name}") or {}
    return str(value.get("string", ""))


@dataclass
class Cluster:
    api: str
    gpu_types: dict[str, str] = field(default_factory=dict)
    """GPU UUID -> registered type, from the nodes' register annotations and the slices."""
    dra_devices: dict[str, str] = field(default_factory=dict)
    """``<driver>/<pool>/<device>`` -> the GPU's UUID, from our driver's ResourceSlices."""

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

    def sliced_nodes(self) -> set[str]:
        """Nodes with a ResourceSlice of our driver that lists devices."""
        _, slices = _call("GET", f"{self.api}/{RESOURCE_API}/resourceslices")
        names = set()
        for item in slices.get("items", []):
            spec = item.get("spec") or {}
            if spec.get("driver") != DRA_DRIVER or not spec.get("devices"):
                continue
            names.add(str(spec.get("nodeName")))
            pool = (spec.get("pool") or {}).get("name")
            for device in spec["devices"]:
                key = f"{DRA_DRIVER}/{pool}/{device['name']}"
                uuid = _attribute(device, "uuid")
                self.dra_devices[key] = uuid or key
                if uuid:
                    self.gpu_types[uuid] = _attribute(device, "model")
        return names

    def claimed_gpus(self, pod: Mapping[str, Any]) -> list[str]:
        """The GPUs allocated to the pod's DRA claims (UUIDs where the slices name them)."""
        namespace = pod.get("metadata", {}).get("namespace", "default")
        generated = {
            entry.get("name"): entry.get("resourceClaimName")
            for entry in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        gpus = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or generated.get(entry.get("name"))
            if not name:
                continue
            _, claim = _call(
                "GET", f"{self.api}/{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}"
            )
            allocation = ((claim or {}).get("status") or {}).get("allocation") or {}
            for result in (allocation.get("devices") or {}).get("results") or []:
                key = f"{result.get('driver')}/{result.get('pool')}/{result.get('device')}"
                gpus.append(self.dra_devices.get(key, key))
        return gpus

    def gpus(self, pod: Mapping[str, Any]) -> list[str]:
        """The GPUs the scheduler extender allocated to the pod, then those of its claims."""
        return gpus_of(pod) + (self.claimed_gpus(pod) if pod else [])

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


def waits_for_claims(message: str) -> bool:
    """kube-scheduler's verdicts that wait for a claim to be created (by the resourceclaim
    controller, for a template), allocated for another pod or deleted: not an outcome, the pod
    is tried again when that happens."""
    return any(reason in message for reason in CLAIM_WAITS)


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    outcome: str
    detail: str
    problems: tuple[str, ...]


def create(cluster: Cluster, document: Mapping[str, Any]) -> tuple[str, str]:
    """Create a document that is not a pod; returns (outcome, message): created, exists (kept:
    the examples ran before) or refused."""
    group, resource, namespaced = OBJECT_PATHS[document["kind"]]
    namespace = document["metadata"].get("namespace", "default")
    scope = f"namespaces/{namespace}/" if namespaced else ""
    status, body = _call("POST", f"{cluster.api}/{group}/{scope}{resource}", document)
    if status == 409:
        return "exists", ""
    if status >= 400:
        return "refused", str((body or {}).get("message", body))
    return "created", ""


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
        message = unschedulable_message(current)
        return phase == "Running" or (message is not None and not waits_for_claims(message))

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
    gpus = cluster.gpus(live)
    model = annotations.get(EXPECT + "-gpu-model")
    if model and not all(model.lower() in cluster.gpu_types.get(g, "").lower() for g in gpus):
        problems.append(f"expected {model} GPUs")
    gpu = annotations.get(EXPECT + "-gpu")
    if gpu and gpu not in gpus:
        problems.append(f"expected GPU {gpu}")
    same = annotations.get(EXPECT + "-same-gpu-as")
    if same and not set(gpus) & set(cluster.gpus(placed.get(same, {}))):
        problems.append(f"expected a GPU shared with {same}")
    other = annotations.get(EXPECT + "-other-gpu-than")
    if other and set(gpus) & set(cluster.gpus(placed.get(other, {}))):
        problems.append(f"expected no GPU shared with {other}")
    return problems


def describe(cluster: Cluster, pod: Mapping[str, Any], outcome: str, message: str) -> str:
    if outcome != "placed":
        return message[:160]
    node = (pod.get("spec") or {}).get("nodeName", "-")
    devices = (pod["metadata"].get("annotations") or {}).get(DEVICES_KEY)
    claimed = cluster.claimed_gpus(pod)
    return f"node={node} devices={devices}" + (f" claims={','.join(claimed)}" if claimed else "")


def load(examples: list[Path]) -> list[dict[str, Any]]:
    """The documents of each directory's ``*.yaml`` (or file), in the order given."""
    files = [p for e in examples for p in (sorted(e.glob("*.yaml")) if e.is_dir() else [e])]
    return [doc for path in files for doc in yaml.safe_load_all(path.read_text()) if doc]


def run(
    api: str, examples: list[Path], gpu_nodes: list[str], dra_nodes: list[str], timeout: float
) -> int:
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
    if dra_nodes and not _wait(
        f"DRA plugins to publish the GPUs of {', '.join(dra_nodes)}",
        lambda: set(dra_nodes) <= cluster.sliced_nodes(),
        deadline,
    ):
        return 1
    placed: dict[str, dict[str, Any]] = {}
    failures = 0
    for pod in load(examples):
        if pod.get("kind", "Pod") != "Pod":
            outcome, message = create(cluster, pod)
            failures += outcome == "refused"
            what = f"{pod['kind']}/{pod['metadata']['name']}"
            sys.stdout.write(f"{what:<18} {outcome:<13} {message[:160]}".rstrip() + "\n")
            continue
        outcome, message = submit(cluster, pod, deadline)
        name = pod["metadata"]["name"]
        live = cluster.pod(pod["metadata"].get("namespace", "default"), name)
        if outcome == "placed":
            placed[name] = live
        problems = check(cluster, pod, outcome, message, placed)
        failures += bool(problems)
        verdict = "ok" if not problems else "MISMATCH: " + "; ".join(problems)
        line = f"{name:<18} {outcome:<13} {describe(cluster, live, outcome, message)}  [{verdict}]"
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--api", default="http://kubesim:8001", help="API server URL")
    parser.add_argument(
        "--examples",
        type=Path,
        action="append",
        required=True,
        help="directory of *.yaml, or one file (repeatable, submitted in that order)",
    )
    parser.add_argument("--gpu-node", action="append", default=[], help="node to wait for")
    parser.add_argument(
        "--dra-node", action="append", default=[], help="DRA node whose slice to wait for"
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds for everything")
    args = parser.parse_args(argv)
    return run(args.api.rstrip("/"), args.examples, args.gpu_node, args.dra_node, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
