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
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from hami_kubesim.demo.cluster import DEMO_NODES, demo_spec
from hami_kubesim.demo.examples import (
    DRA_EXAMPLES,
    EXAMPLES_DIR,
    PREEMPTION_EXAMPLES,
    VENDOR_EXAMPLES,
    load_examples,
    pods_of,
)
from hami_kubesim.demo.submit import Progress, run_examples
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import SCHEDULER_GPUMAP_PROXY
from hami_kubesim.testing import write_kubeconfig
from hami_runtime.logs import configure_logging

# This module holds the start-up, the --keep-running access hints and the command line; its
# docstring above is the --help text, so the package's docstring says where the rest lives.


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


async def _tick(progress: Progress, text: str, started: float) -> None:
    """Keep a timer on the progress line while the system starts (terminals only)."""
    while True:
        await asyncio.sleep(0.2)
        progress.show(f"{text} ({time.monotonic() - started:.1f} s)", tick=True)


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
    if not pods_of(pods):
        print(f"no example pods in {examples}", file=out)
        return 2
    progress = Progress(out)
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
            ok = await run_examples(system, pods, examples=examples, out=out)
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
