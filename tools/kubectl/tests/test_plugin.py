"""``kubectl-hami`` through its console script, against kubesim's service proxy and a stand-in
serving the GPU map API's contract documents (see conftest.py)."""

from __future__ import annotations

import json

import pytest

from hami_kubesim.testing import RunningApiServer

from .plugin_helpers import Plugin, StandIn, contract


async def test_map_table_through_the_service_proxy(plugin: Plugin, standin: StandIn) -> None:
    result = await plugin("map", "--node", "gpu-", "--fragmented", "--page", "2")
    assert result.status == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["GPU", "TYPE", "MEMORY(MiB)", "CORES", "SHARES", "HOLDERS"]
    assert lines[1].startswith("gpu-a · Healthy")
    assert lines[2].split()[:5] == ["GPU0", "T4", "9216/15360", "50/100%", "2/10"]
    assert "ml/train-1(6144 MiB), ml/infer-2(3072 MiB)" in lines[2]
    assert "GPU0 (unhealthy)" in result.stdout
    assert "largest piece 15360 MiB" in result.stdout
    assert standin.seen == [("/api/v1/map", {"node": "gpu-", "fragmented": "1", "page": "2"})]


async def test_json_is_the_document_as_served(plugin: Plugin, standin: StandIn) -> None:
    result = await plugin("pending", "-n", "ml", "--per-page", "10", "-o", "json")
    assert result.status == 0, result.stderr
    assert json.loads(result.stdout) == contract("pending")
    assert standin.seen == [("/api/v1/pending", {"namespace": "ml", "perPage": "10"})]


async def test_pending_wide_groups_reasons(plugin: Plugin, standin: StandIn) -> None:
    result = await plugin("pending", "-o", "wide")
    assert result.status == 0, result.stderr
    big = next(line for line in result.stdout.splitlines() if line.startswith("ml "))
    assert "5m12s" in big
    assert "0/8 nodes fit: 5 CardInsufficientMemory (gpu-a, gpu-c), 3 CardTypeMismatch" in big
    assert "Unschedulable: 0/8 nodes are available" in big


@pytest.mark.usefixtures("standin")
async def test_fit_exit_status_says_fit_or_not(plugin: Plugin, tmp_path: object) -> None:
    fits = await plugin("fit", "--gpus", "1", "--memory", "4000", "--cores", "30", "--type", "T4")
    assert fits.status == 0, fits.stderr
    assert fits.stdout.startswith("fits now on 2 nodes")
    nofit = await plugin("fit", "--memory", "20000")
    assert nofit.status == 1, nofit.stderr
    assert nofit.stdout.startswith("does not fit anywhere now: CardInsufficientMemory binds")


async def test_fit_sends_a_manifest_and_reports_a_refusal(plugin: Plugin, standin: StandIn) -> None:
    pod = b"apiVersion: v1\nkind: Pod\nmetadata: {name: big}\n# 20000 MiB\n"
    result = await plugin("fit", "-f", "-", stdin=pod)
    assert result.status == 1, result.stderr
    assert "manifest" in standin.seen[-1][1]
    bad = await plugin("fit", "-f", "-", stdin=b"just: text\n")
    assert bad.status == 2
    assert bad.stderr == (
        "error: the scheduler refused the request: manifest: line 1: not a Pod (kind is missing)\n"
    )


@pytest.mark.usefixtures("standin")
async def test_a_forbidden_user_is_told_the_permission(
    plugin: Plugin, sim: RunningApiServer
) -> None:
    message = (
        'services "hami-scheduler:gpumap" is forbidden: User "alice" cannot get resource '
        '"services/proxy" in API group "" in the namespace "kube-system"'
    )
    sim.server.inject_error("get", "services/proxy", code=403, message=message)
    result = await plugin("map")
    assert result.status == 3
    assert message in result.stderr
    assert (
        "--verb=get --resource=services/proxy --resource-name=hami-scheduler:gpumap"
        in result.stderr
    )


async def test_without_the_scheduler_service(plugin: Plugin) -> None:
    result = await plugin("map")
    assert result.status == 4
    assert 'no endpoints available for service "hami-scheduler"' in result.stderr
    assert "scheduler.gpumap.enabled" in result.stderr
    result = await plugin("map", "--port", "9397")
    assert result.status == 4
    assert 'services "hami-scheduler" not found' in result.stderr


@pytest.mark.usefixtures("standin")
async def test_a_wrong_port_is_not_the_gpu_map(plugin: Plugin) -> None:
    result = await plugin("map", "--port", "https")
    assert result.status == 4  # nothing listens on the https backend port of the stand-in
    assert "error trying to reach service" in result.stderr


async def test_usage_errors_exit_2(plugin: Plugin) -> None:
    assert (await plugin("fit")).status == 2
    assert (await plugin("map", "--per-page", "501")).status == 2
