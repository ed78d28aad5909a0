"""``python -m hami_kubesim.demo [--keep-running]``: the whole system, end to end, on one machine.

Starts kubesim (API server, admission dispatch, the scheduling loop reading the chart's
KubeSchedulerConfiguration, kubelet stand-ins whose containers play HAMi-core), the webhook, the
scheduler extender, one device plugin and one vGPU monitor per GPU node as real processes on
real ports with generated TLS certificates, on five simulated GPU nodes (fake device backend):

* ``gpu-node-a``: 4 × Tesla T4 (15 GiB), two NUMA nodes;
* ``gpu-node-b``: 2 × A100-SXM4-80GB, one per NUMA node;
* ``gpu-node-c``: 8 × A10 (24 GB), two NUMA nodes, GPUs 0-1, 2-3, 4-5 and 6-7 joined by 4
  NVLinks each; its device plugin writes the GPU pair scores (topology-aware placement);
* ``gpu-node-mig``: 1 × A100-SXM4-40GB in ``operatingmode: mig`` (dynamic MIG: instances made
  at the placements the scheduler reserves), tainted ``nvidia.com/mig=true:NoSchedule`` so only
  pods that ask for MIG land there;
* ``gpu-node-p``: 1 × L4 (23034 MiB), tainted ``demo.hami.io/preemption=true:NoSchedule`` and
  labelled ``demo.hami.io/pool=preemption``, for the preemption example alone;
* ``gpu-node-dra``: 1 × V100 16 GB through DRA (its device plugin runs ``--mode dra`` and
  publishes the card in a ResourceSlice; the extender never sees it), tainted
  ``demo.hami.io/dra=true:NoSchedule`` and labelled ``demo.hami.io/pool=dra``, for the DRA
  examples alone.

and nine nodes of other vendors, whose device plugins kubesim plays (:mod:`hami_kubesim.vendors`):

* ``npu-node-a``: 8 × Ascend 910B3 (64 GiB), JSON register with NetworkIDs and Ascend's
  handshake (template mode);
* ``npu-node-b``: 4 × Ascend 910B4 with the node annotation ``hami-vnpu-core: "true"``
  (hami-core mode);
* ``dcu-node-a``: 4 × Hygon DCU Z100 (32 GiB), colon register and handshake;
* ``mlu-node-a``: 4 × Cambricon MLU (24 GiB), from node capacity (``cambricon.com/vmlu`` …);
* ``metax-node-a``: 2 × MetaX GPU, from node capacity (``metax-tech.com/gpu``);
* ``xpu-node-a``: 4 × Kunlunxin P800 vXPU, JSON register and handshake;
* ``kunlun-node-a``: 8 whole Kunlunxin XPUs (two wings of 4), from node capacity;
* ``neuron-node-a``: 8 × AWS Neuron on a ``trn1.32xlarge``, from node capacity;
* ``sgpu-node-a``: 2 × MetaX sGPU (MXC500), from MetaX's ``metax-tech.com/node-gpu-devices``.

The test bed enables Ascend in the scheduler and the webhook (``--enable-ascend``), as the
chart's ``global.devices.ascend.enabled`` does. It runs the capacity totals mode
(``global.capacityTotals``, ``docs/capacity.md``) with kube-scheduler's preemption as it is up to
Kubernetes 1.37, what a user of today's clusters runs: in that mode the in-tree filters count
GPU memory, so default preemption finds victims for GPU pressure and the extender's preempt
verb refines them per GPU.

It then submits the examples of ``deploy/examples/*.yaml``, ``deploy/examples/vendors/*.yaml``,
``deploy/examples/preemption/*.yaml`` and ``deploy/examples/dra/*.yaml`` one after another (in
file order; PriorityClasses, ResourceClaimTemplates and ResourceClaims are created as they
come, each pod waits until it is placed, refused or reported unschedulable, so
the outcome does not depend on timing; a pod evicted later counts as settled once it is gone).
In the preemption example a high-priority pod evicts a low-priority one from ``gpu-node-p``'s
GPU; in the DRA examples two 4 GiB claims share ``gpu-node-dra``'s GPU and a 10 GiB one is
refused with the allocator's reason (the cluster has the chart's DeviceClass ``gpu.hami.io``).
It prints where every pod landed, which GPUs, memory and cores each container got and
the env the device plugin gave it and what the node's vGPU monitor reports for it (memory used
of the limit, utilisation, read back from the monitor's ``/metrics``), the pods not placed with
the scheduler's reason, who evicted whom on which node and GPU (from the Events), the DRA
claims (device, consumed capacity, the pods they are reserved for), and each GPU's
utilisation. The exit status is 0 when every outcome the
examples expect (``demo.hami.io/*`` annotations, see :mod:`hami_kubesim.stack.checks.expectations`)
happened, the cluster invariants hold and the monitors report every running container's GPUs
with the memory limit the scheduler allocated (:mod:`hami_kubesim.stack.checks.usage`).
``--keep-running`` then leaves everything up for ``kubectl`` and ``curl`` until Ctrl-C. Every
process is stopped on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from hami_kube.objects import PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.stack.checks.expectations import ExpectationResult, evaluate, expectation_of
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.checks.preemptions import preemptions
from hami_kubesim.stack.report import render_report
from hami_kubesim.stack.state import ClusterState, outcome, pod_key, stage
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import SCHEDULER_GPUMAP_PROXY
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import (
    REPO_ROOT,
    SystemSpec,
    dra_node,
    gpu_model_node,
    mig_node,
    nvlinked_pairs,
    vendor_node,
)
from hami_kubesim.testing import write_kubeconfig
from hami_kubesim.vendors.inventory import VendorDevices
from hami_protocol import keys
from hami_runtime.logs import configure_logging

__all__ = [
    "DEMO_NODES",
    "DRA_EXAMPLES",
    "DRA_NODE",
    "EXAMPLE_KINDS",
    "PREEMPTION_EXAMPLES",
    "PREEMPTION_MODE",
    "PREEMPTION_NODE",
    "VENDOR_EXAMPLES",
    "demo_spec",
    "load_examples",
    "main",
]

PREEMPTION_NODE = "gpu-node-p"
"""The preemption example's node: tainted so only its two pods land there (the other examples'
placements stay as they were); the demo's own, compose does not run it."""
DRA_NODE = "gpu-node-dra"
"""The DRA examples' node: tainted so only they land there."""
_NODE_C = gpu_model_node("gpu-node-c", "NVIDIA A10", count=8, memory_mib=23028, numa_nodes=2)
DEMO_NODES = (
    gpu_model_node("gpu-node-a", "Tesla T4", count=4, memory_mib=15360, numa_nodes=2),
    gpu_model_node("gpu-node-b", "NVIDIA A100-SXM4-80GB", count=2, memory_mib=81920, numa_nodes=2),
    dataclasses.replace(_NODE_C, links=nvlinked_pairs(_NODE_C, nvlinks=4), topology_score=True),
    dataclasses.replace(
        mig_node("gpu-node-mig", "NVIDIA A100-SXM4-40GB"),
        taints=({"key": "nvidia.com/mig", "value": "true", "effect": "NoSchedule"},),
    ),
    vendor_node("npu-node-a", VendorDevices(vendor="Ascend910B3", devices=8, memory_mib=65536)),
    vendor_node(
        "npu-node-b",
        VendorDevices(
            vendor="Ascend910B4", devices=4, annotations={keys.ASCEND_NODE_VNPU_CORE: "true"}
        ),
    ),
    vendor_node("dcu-node-a", VendorDevices(vendor="DCU", devices=4, memory_mib=32768, split=4)),
    vendor_node("mlu-node-a", VendorDevices(vendor="MLU", devices=4, memory_mib=24576)),
    vendor_node("metax-node-a", VendorDevices(vendor="Metax-GPU", devices=2)),
    vendor_node("xpu-node-a", VendorDevices(vendor="XPU", devices=4)),
    vendor_node("kunlun-node-a", VendorDevices(vendor="kunlun", devices=8)),
    vendor_node("neuron-node-a", VendorDevices(vendor="AWSNeuron", devices=8)),
    vendor_node("sgpu-node-a", VendorDevices(vendor="Metax-SGPU", devices=2)),
    dataclasses.replace(
        gpu_model_node(
            PREEMPTION_NODE,
            "NVIDIA L4",
            count=1,
            memory_mib=23034,
            labels={"demo.hami.io/pool": "preemption"},
        ),
        taints=({"key": "demo.hami.io/preemption", "value": "true", "effect": "NoSchedule"},),
    ),
    dra_node(
        DRA_NODE,
        labels={"demo.hami.io/pool": "dra"},
        taints=({"key": "demo.hami.io/dra", "value": "true", "effect": "NoSchedule"},),
    ),
)
EXAMPLES_DIR = REPO_ROOT / "deploy" / "examples"
VENDOR_EXAMPLES = "vendors"
"""The examples dir's sub-folder of pods for the other vendors' nodes (the demo's own: the
compose stack has GPU nodes only)."""
PREEMPTION_EXAMPLES = "preemption"
"""The sub-folder of the preemption example: the demo's own too (it needs ``gpu-node-p``, the
PriorityClasses and the capacity totals mode, none of which the compose stack has)."""
DRA_EXAMPLES = "dra"
"""The sub-folder of the DRA examples (claims, templates and the pods using them): the demo's
own (they need ``gpu-node-dra``)."""
EXAMPLE_KINDS = ("PriorityClass", "ResourceClaimTemplate", "ResourceClaim", "Pod")
"""The documents the demo creates from the example files, in file order."""
PREEMPTION_MODE = (
    "kube-scheduler <= 1.37 preemption with the capacity totals mode (global.capacityTotals): "
    "in-tree filters count GPU memory, the extender's preempt verb refines the victims per GPU"
)
_EVENTS_TIMEOUT = 5.0
"""How long the extender gets to record its PreemptedForGPU Events (it writes them on its own
watches, after kube-scheduler's deletions)."""
_POD_TIMEOUT = 30.0
_MONITOR_TIMEOUT = 15.0
"""How long the monitors get to report every running container (each finds a new region at its
next pass)."""


def demo_spec(work_dir: Path | None = None) -> SystemSpec:
    # Capacity totals on kube-scheduler's <= 1.37 preemption: the preemption example works as
    # it would on today's clusters (without the totals, <= 1.37 never preempts for GPU memory).
    return SystemSpec(
        nodes=DEMO_NODES,
        work_dir=work_dir,
        vgpu_monitor=True,
        capacity_totals=True,
        preemption_behaviour="1.37",
    )


def load_examples(directory: Path) -> list[dict[str, Any]]:
    """Every document of ``directory/*.yaml`` of a kind in :data:`EXAMPLE_KINDS`, files in name
    order and documents in file order (a PriorityClass before the pods naming it)."""
    documents: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if isinstance(document, dict) and document.get("kind", "Pod") in EXAMPLE_KINDS:
                documents.append(document)
    return documents


def _pods(documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d for d in documents if d.get("kind", "Pod") == "Pod"]


class _Progress:
    """One progress line rewritten in place on a terminal; elsewhere only finished steps."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._last = ""

    def show(self, text: str, *, tick: bool = False) -> None:
        """``tick``: a timer update, shown only where it can be rewritten in place."""
        if self._tty:
            self._stream.write("\r\033[K" + text)
            self._stream.flush()
            self._last = text
        elif not tick:
            self._stream.write(text + "\n")
            self._stream.flush()

    def done(self, text: str) -> None:
        if self._tty and self._last:
            self._stream.write("\r\033[K")
        self._stream.write(text + "\n")
        self._stream.flush()
        self._last = ""


async def _create_other(system: System, document: dict[str, Any], progress: _Progress) -> None:
    """A document that is not a pod (a PriorityClass, a claim or a claim template): created,
    nothing to wait for."""
    what = f"{document.get('kind')} {(document.get('metadata') or {}).get('name')}"
    try:
        await system.create(document)
    except StatusError as error:
        progress.done(f"{what}: refused: {error.message}")
        return
    progress.done(f"{what}: created")


async def _submit(
    system: System, documents: Sequence[dict[str, Any]], progress: _Progress
) -> dict[str, str]:
    """Create each document in order, and wait until each pod has an outcome; returns admission
    refusals by pod key.

    A pod evicted by a later one's preemption is gone: :func:`settled` reads pods that exist,
    so the wait for its preemptor ends once the preemptor itself is Running."""
    rejections: dict[str, str] = {}
    pods = _pods(documents)
    number = 0
    for pod in documents:
        if pod.get("kind", "Pod") != "Pod":
            await _create_other(system, pod, progress)
            continue
        number += 1
        key = pod_key(pod)
        label = f"[{number}/{len(pods)}] {key}"
        progress.show(f"{label}: submitting", tick=True)
        try:
            await system.create(pod)
        except StatusError as error:
            rejections[key] = error.message
            progress.done(f"{label}: refused at admission")
            continue

        def report(state: ClusterState, elapsed: float, label: str = label, key: str = key) -> None:
            found = next((p for p in state.pods if pod_key(p) == key), None)
            where = "admitted" if found is None else stage(state, found)
            progress.show(f"{label}: {where} ({elapsed:.1f} s)", tick=True)

        state = await system.wait_for(
            settled([key]), within=_POD_TIMEOUT, what=f"an outcome for {key}", progress=report
        )
        found = state.pod(*key.split("/", 1))
        result = "?" if found is None else outcome(state, found).value
        node = "" if found is None else PodView(found).node_name
        evicted = [seen.victim for seen in preemptions(state) if seen.preemptor == key]
        took = f", evicting {', '.join(evicted)}" if evicted else ""
        progress.done(f"{label}: {result}{' on ' + node if node else ''}{took}")
    return rejections


def _evaluate(
    state: ClusterState, pods: Sequence[dict[str, Any]], rejections: dict[str, str]
) -> list[ExpectationResult]:
    results = []
    for pod in pods:
        want = expectation_of(pod)
        if want is not None:
            results.append(evaluate(state, want, rejection=rejections.get(want.key)))
    return results


def _print_access(system: System, out: TextIO) -> None:
    kubeconfig = write_kubeconfig(system.work_dir / "kubeconfig", system.url)
    gpumap = system.url + SCHEDULER_GPUMAP_PROXY
    endpoints = [
        ("API server", system.url),
        ("GPU map", f"{gpumap}  (the page, through the API server's service proxy)"),
        *((f"{name} metrics", url) for name, url in sorted(system.metrics_urls().items())),
        ("extender (TLS)", system.extender_url),
        ("webhook (TLS)", "called through the MutatingWebhookConfiguration 'hami-webhook'"),
        ("logs", str(system.logs_dir)),
    ]
    width = max(len(label) for label, _ in endpoints) + 2
    lines = [
        "",
        "Everything keeps running until Ctrl-C.",
        *(f"  {label:<{width}}{value}" for label, value in endpoints),
        "",
        "Try:",
        f"  open {gpumap}   (pending pods: {gpumap}pending, would it fit?: {gpumap}fit)",
        f"  KUBECONFIG={kubeconfig} uv run kubectl-hami map      (or `kubectl hami map`,",
        "      with kubectl and the project's environment on PATH; also: pending, fit --gpus 1"
        " --memory 20000)",
        f"  kubectl --server {system.url} get pods -o wide",
        f"  kubectl --server {system.url} get events --field-selector reason=FailedScheduling",
        f"  kubectl --server {system.url} get events --field-selector reason=Preempted",
        f"  kubectl --server {system.url} get node gpu-node-a -o yaml",
        f"  curl -s {system.metrics_urls().get('scheduler-0', '')} | grep '^hami_gpu'",
        *(
            f"  curl -s {monitor.spec.metrics_url} | grep '^hami_vgpu_memory'"
            for monitor in list(system.monitors.values())[:1]
        ),
    ]
    print("\n".join(lines), file=out, flush=True)


async def _tick(progress: _Progress, text: str, started: float) -> None:
    """Keep a timer on the progress line while the system starts (terminals only)."""
    while True:
        await asyncio.sleep(0.2)
        progress.show(f"{text} ({time.monotonic() - started:.1f} s)", tick=True)


def _gpu_events_recorded(state: ClusterState) -> bool:
    """Every preemption has the extender's PreemptedForGPU Event too (what its victim freed)."""
    return all(seen.frees for seen in preemptions(state))


async def _run(
    system: System, documents: Sequence[dict[str, Any]], *, examples: Path, out: TextIO
) -> bool:
    """Submit the examples, print the report; whether every expectation and invariant held."""
    pods = _pods(documents)
    print(f"submitting {len(pods)} example pods from {examples}", file=out)
    progress = _Progress(out)
    rejections = await _submit(system, documents, progress)
    # Pods placed later may have woken an unschedulable one (a bind's node lock changes the
    # node): report once every pod has settled again, as kube-scheduler left them.
    keys = [pod_key(pod) for pod in pods if pod_key(pod) not in rejections]
    state = await system.wait_for(
        settled(keys), within=_POD_TIMEOUT, what="every example pod settles"
    )
    # The report names the GPU a victim freed from the extender's Event; a missing one is
    # reported as such, not waited for without end.
    with contextlib.suppress(TimeoutError):
        state = await system.wait_for(
            lambda s: settled(keys)(s) and _gpu_events_recorded(s),
            within=_EVENTS_TIMEOUT,
            what="the extender's PreemptedForGPU events",
        )
    usage, missed = await system.wait_monitors(within=_MONITOR_TIMEOUT)
    results = _evaluate(state, pods, rejections)
    out.write(
        render_report(
            state,
            results=results,
            rejections=rejections,
            usage=usage,
            preemption_mode=PREEMPTION_MODE,
        )
    )
    violations = check_all(state)
    print(f"Invariants: {len(violations)} violations", file=out)
    for violation in violations:
        print(f"  {violation}", file=out)
    print(
        f"vGPU monitors: {len(usage.containers)} containers reported, "
        f"{len(missed)} not as allocated",
        file=out,
    )
    for problem in missed:
        print(f"  {problem}", file=out)
    return all(r.ok for r in results) and not violations and not missed


async def run_demo(
    *, examples: Path, keep_running: bool, work_dir: Path | None, out: TextIO
) -> int:
    # SIGTERM ends the demo like Ctrl-C does: the main task is cancelled and every process is
    # stopped on the way out.
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    pods = [
        *load_examples(examples),
        *load_examples(examples / VENDOR_EXAMPLES),
        *load_examples(examples / PREEMPTION_EXAMPLES),
        *load_examples(examples / DRA_EXAMPLES),
    ]
    if not _pods(pods):
        print(f"no example pods in {examples}", file=out)
        return 2
    progress = _Progress(out)
    started = time.monotonic()
    plugins = sum(1 for node in DEMO_NODES if node.device_plugin)
    vendors = sum(1 for node in DEMO_NODES if node.vendors)
    starting = (
        f"starting kubesim, the webhook, the scheduler, {plugins} device plugins, "
        f"{plugins} vGPU monitors and {vendors} nodes of other vendors"
    )
    progress.show(starting)
    ticker = asyncio.create_task(_tick(progress, starting, started), name="demo-progress")
    try:
        async with running_system(demo_spec(work_dir)) as system:
            ticker.cancel()
            progress.done(
                f"system up in {time.monotonic() - started:.1f} s: API server {system.url}, "
                f"{len(system.services())} service processes, "
                f"{sum(len(n.gpus) for n in DEMO_NODES)} GPUs and "
                f"{sum(v.devices for n in DEMO_NODES for v in n.vendors)} other devices on "
                f"{len(DEMO_NODES)} nodes"
            )
            ok = await _run(system, pods, examples=examples, out=out)
            elapsed = time.monotonic() - started
            print(f"\n{'OK' if ok else 'FAILED'}: demo finished in {elapsed:.1f} s", file=out)
            if keep_running:
                _print_access(system, out)
                try:
                    await asyncio.Event().wait()  # until Ctrl-C or SIGTERM
                finally:
                    print("\nstopping every process", file=out)
            else:
                print(
                    "The GPU map page and `kubectl hami` are served while the system runs: "
                    "make demo DEMO_ARGS=--keep-running",
                    file=out,
                )
    finally:
        ticker.cancel()
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hami_kubesim.demo", description=__doc__)
    parser.add_argument(
        "--keep-running", action="store_true", help="stay up for kubectl/curl until Ctrl-C"
    )
    parser.add_argument("--examples", type=Path, default=EXAMPLES_DIR, help="example pods dir")
    parser.add_argument("--work-dir", type=Path, default=None, help="keep logs and files here")
    parser.add_argument("--log-level", default="error", help="log level of the emulator itself")
    args = parser.parse_args(argv)
    configure_logging("console", args.log_level)
    try:
        return asyncio.run(
            run_demo(
                examples=args.examples,
                keep_running=args.keep_running,
                work_dir=args.work_dir,
                out=sys.stdout,
            )
        )
    except KeyboardInterrupt:
        return 130
    except asyncio.CancelledError:
        return 143


if __name__ == "__main__":
    sys.exit(main())
