"""The GPU map as a person meets it, on a running system: the page through the API server's
service proxy in headless Chromium, and ``kubectl hami`` through the same proxy.

Two pods share a T4 of ``e2e-node-a`` and one pod asks for more memory than any card has.  The
map's cards and holders must be exactly the allocations the pods carry, the pending view must
show the big pod with the extender's reasons, the fit form must answer, and the plugin must read
the same data (and say fit / no fit in its exit status).  Screenshots of the map and the pending
view land in ``build/screenshots/`` (``$HAMI_SCREENSHOT_DIR``) for a person to look at.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from hami_kubesim.browser import launch
from hami_kubesim.stack.state import Outcome, allocated_devices, outcome
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.objects import SCHEDULER_GPUMAP_PROXY, gpu_pod
from hami_kubesim.testing import write_kubeconfig

pytestmark = pytest.mark.asyncio(loop_scope="package")

NS = "gpumap"
NODE = "e2e-node-a"
PLUGIN = Path(sys.executable).parent / "kubectl-hami"
"""The console script, beside the interpreter running the tests (the project's environment)."""


def _pod(name: str, memory_mib: int, *, node: str | None = NODE) -> dict[str, Any]:
    pod = gpu_pod(name, namespace=NS, memory_mib=memory_mib, cores=20)
    if node is not None:
        pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    # Both shared pods on one card: binpack the GPUs.
    pod["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "binpack"}
    return pod


@pytest_asyncio.fixture(scope="module", loop_scope="package")
async def placed(system: System) -> AsyncIterator[System]:
    await system.ensure_namespace(NS)
    for name, memory in (("shared-a", 3000), ("shared-b", 2000)):
        await system.create(_pod(name, memory))
        await system.wait_for(
            lambda s, n=name: (p := s.pod(NS, n)) is not None and outcome(s, p) is Outcome.RUNNING,
            within=60,
            what=f"{name} runs",
        )
    await system.create(_pod("too-big", 100000, node=None))
    await system.wait_for(
        lambda s: (
            (p := s.pod(NS, "too-big")) is not None and outcome(s, p) is Outcome.UNSCHEDULABLE
        ),
        within=60,
        what="too-big is unschedulable",
    )
    try:
        yield system
    finally:
        await system.clear_pods(NS)


def _allocations(system: System) -> dict[str, set[tuple[str, int]]]:
    """Pod name -> (GPU, MiB) it holds, as its allocation annotation says."""
    state = system.state()
    found: dict[str, set[tuple[str, int]]] = {}
    for name in ("shared-a", "shared-b"):
        pod = state.pod(NS, name)
        assert pod is not None
        found[name] = {(d.uuid, d.usedmem) for c in allocated_devices(pod) or () for d in c}
    return found


def _holders(document: dict[str, Any]) -> dict[str, set[tuple[str, int]]]:
    found: dict[str, set[tuple[str, int]]] = {}
    for node in document["nodes"]:
        for device in node["devices"]:
            for holder in device["holders"]:
                if holder["namespace"] == NS:
                    found.setdefault(holder["pod"], set()).add((device["id"], holder["memory"]))
    return found


@pytest.mark.timeout(900)  # a first Chromium install may take minutes
async def test_the_page_shows_what_the_scheduler_holds(
    placed: System, chromium_executable: Path, screenshot_dir: Path, tmp_path: Path
) -> None:
    allocations = _allocations(placed)
    (gpu,) = {uuid for held in allocations.values() for uuid, _ in held}
    base = placed.url + SCHEDULER_GPUMAP_PROXY
    async with launch(chromium_executable, tmp_path / "profile") as browser:
        page = await browser.new_page()
        await page.goto(base + f"?node={NODE}")
        # The page groups digits ("3,000 MiB"); compare without the separators.
        holders = [h.replace(",", "") for h in await page.texts("table.cards ul.holders li")]
        assert any(f"{NS}/shared-a/" in h and "3000 MiB" in h for h in holders), holders
        assert any(f"{NS}/shared-b/" in h and "2000 MiB" in h for h in holders), holders
        rows = [r.replace(",", "") for r in await page.texts("table.cards tbody tr")]
        (card,) = [row for row in rows if "shared-a" in row]
        assert "shared-b" in card  # binpacked: one card, both holders
        assert "5000/15360 MiB" in card, card
        assert gpu[:12] in await page.html()
        await page.screenshot(screenshot_dir / "e2e-gpumap-map.png")

        await page.goto(base + "pending")
        pods = await page.texts("table.pending tbody th[scope=row]")
        assert any("too-big" in p for p in pods), pods
        verdicts = await page.texts("table.pending tbody td:nth-of-type(3)")
        assert any("CardInsufficientMemory" in v for v in verdicts), verdicts
        # kube-scheduler's message repeats the GPU reasons; the Kubernetes column leaves them out.
        causes = await page.texts("table.pending tbody td:nth-of-type(4)")
        assert any("none besides the GPU scheduler" in c for c in causes), causes
        await page.screenshot(screenshot_dir / "e2e-gpumap-pending.png")

        await page.goto(base + "fit")
        await page.fill("input[name=gpus]", "1")
        await page.fill("input[name=memory]", "4000")
        await page.click_and_wait("form:nth-of-type(1) button")
        assert (await page.texts("p.answer"))[0].startswith("✓ fits now")
        await page.fill("input[name=memory]", "100000")
        await page.click_and_wait("form:nth-of-type(1) button")
        assert "CardInsufficientMemory" in (await page.texts("p.answer"))[0]
        failed = [r for r in page.responses if r.status != 200]
        assert failed == [], failed
        assert page.console_errors == []


async def _plugin(kubeconfig: Path, *args: str) -> tuple[int, str, str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    process = await asyncio.create_subprocess_exec(
        str(PLUGIN),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_kubectl_hami_reads_the_same_map_through_the_service_proxy(
    placed: System, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", placed.url)
    code, out, err = await _plugin(kubeconfig, "map", "--node", NODE, "-o", "json")
    assert code == 0, err
    assert _holders(json.loads(out)) == _allocations(placed)

    code, out, err = await _plugin(kubeconfig, "map", "--node", NODE)
    assert code == 0, err
    assert "shared-a" in out
    assert "shared-b" in out

    code, out, err = await _plugin(kubeconfig, "pending", "-n", NS)
    assert code == 0, err
    assert "too-big" in out
    assert "CardInsufficientMemory" in out

    fits, out, err = await _plugin(kubeconfig, "fit", "--gpus", "1", "--memory", "4000")
    assert fits == 0, (out, err)
    nowhere, out, err = await _plugin(kubeconfig, "fit", "--gpus", "1", "--memory", "100000")
    assert nowhere == 1, (out, err)
    assert "CardInsufficientMemory" in out
