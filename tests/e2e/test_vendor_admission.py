"""Each vendor's admission rules through the API server's admission dispatch: the pod is created
in kubesim, the dispatcher calls the webhook process over TLS (the chart's
MutatingWebhookConfiguration), and what comes back is the pod as stored, or the refusal in
HAMi's words.  Iluvatar is enabled as the chart's ``global.devices.iluvatar.enabled`` does
(Ascend always is in the test bed).  A 910C superPod pod is also placed, on one module's two
NPUs."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from hami_kube.objects import PodView
from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.stack.checks.invariants import check_all
from hami_kubesim.stack.state import failed_scheduling
from hami_kubesim.stack.system.handle import System
from hami_kubesim.stack.system.lifecycle import running_system
from hami_kubesim.stack.system.objects import device_pod
from hami_kubesim.stack.system.settle import settled
from hami_kubesim.stack.system.spec import SchedulerOptions, SystemSpec, vendor_node
from hami_kubesim.vendors.inventory import VendorDevices, device_ids
from hami_protocol import keys

pytestmark = pytest.mark.asyncio(loop_scope="module")

NS = "vendor-admission"
ENABLE = ("--enable-iluvatar=true",)
SUPERPOD = VendorDevices(vendor="Ascend910C", devices=4)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster() -> AsyncIterator[System]:
    spec = SystemSpec(
        nodes=(vendor_node("superpod-node", SUPERPOD),),
        namespaces=("default", "kube-system", "hami-system", NS),
        scheduler=SchedulerOptions(extra_args=ENABLE),
        webhook_args=ENABLE,
    )
    async with running_system(spec) as running:
        yield running
        await running.clear_pods(NS)


async def _admitted(cluster: System, name: str, limits: Mapping[str, str | int]) -> dict[str, Any]:
    return await cluster.create(device_pod(name, limits, namespace=NS))


async def _refused(cluster: System, name: str, limits: Mapping[str, str | int]) -> str:
    with pytest.raises(StatusError) as refused:
        await cluster.create(device_pod(name, limits, namespace=NS))
    assert cluster.api.try_get("pods", name, namespace=NS) is None
    return refused.value.message


def _limits(pod: Mapping[str, Any]) -> dict[str, str]:
    return dict(pod["spec"]["containers"][0]["resources"]["limits"])


async def test_ascend_910c_superpod_one_npu_becomes_a_module_of_two(cluster: System) -> None:
    admitted = await _admitted(cluster, "superpod", {"huawei.com/Ascend910C": 1})
    assert _limits(admitted)["huawei.com/Ascend910C"] == "2"
    assert admitted["spec"]["schedulerName"] == "hami-scheduler"
    state = await cluster.wait_for(settled([f"{NS}/superpod"]), within=30, what="superpod")
    pod = state.pod(NS, "superpod")
    assert pod is not None
    view = PodView(pod)
    assert (view.phase, view.node_name) == ("Running", "superpod-node"), failed_scheduling(
        state, pod
    )
    records = json.loads(view.annotations["huawei.com/Ascend910C"])
    ids = device_ids(SUPERPOD, "superpod-node")
    first, second = sorted(ids.index(record["UUID"]) for record in records)
    assert (first % 2, second) == (0, first + 1)
    assert check_all(state) == ()
    await cluster.clear_pods(NS)


async def test_ascend_910c_superpod_refuses_an_odd_count(cluster: System) -> None:
    message = await _refused(cluster, "odd", {"huawei.com/Ascend910C": 3})
    assert "Ascend910C device request must be 1 or 2*n, got 3" in message


async def test_ascend_memory_above_every_template_and_the_card_is_refused(
    cluster: System,
) -> None:
    limits = {"huawei.com/Ascend910B3": 1, "huawei.com/Ascend910B3-memory": 70000}
    message = await _refused(cluster, "no-template", limits)
    assert "huawei.com/Ascend910B3-memory 70000 is invalid" in message


async def test_ascend_sub_card_memory_on_several_npus_is_refused(cluster: System) -> None:
    limits = {"huawei.com/Ascend910B3": 2, "huawei.com/Ascend910B3-memory": 16384}
    message = await _refused(cluster, "multi-vnpu", limits)
    assert "vNPU not supported for multiple devices" in message


async def test_mthreads_memory_outside_the_slices_is_refused(cluster: System) -> None:
    limits = {"mthreads.com/vgpu": 1, "mthreads.com/sgpu-memory": 5}
    message = await _refused(cluster, "mt-odd", limits)
    assert "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]" in (
        message
    )


async def test_kunlun_vxpu_memory_rounds_up_to_the_next_slice(cluster: System) -> None:
    for name, asked, rounded in (("xpu-a", 30000, "49152"), ("xpu-b", 60000, "98304")):
        limits = {"kunlunxin.com/vxpu": 1, "kunlunxin.com/vxpu-memory": asked}
        admitted = await _admitted(cluster, name, limits)
        assert _limits(admitted)["kunlunxin.com/vxpu-memory"] == rounded
    await cluster.clear_pods(NS)


async def test_iluvatar_several_cards_get_whole_cores_and_the_container_env(
    cluster: System,
) -> None:
    admitted = await _admitted(cluster, "iluvatar", {"iluvatar.ai/BI-V150-vgpu": 3})
    assert _limits(admitted)["iluvatar.ai/BI-V150.vCore"] == "300"
    env = {item["name"]: item.get("value") for item in admitted["spec"]["containers"][0]["env"]}
    assert env[keys.ILUVATAR_CONTAINER_NAME_ENV] == "app"
    await cluster.clear_pods(NS)


async def test_metax_sgpu_app_class_outside_the_two_is_refused(cluster: System) -> None:
    pod = device_pod("metax-class", {"metax-tech.com/sgpu": 1}, namespace=NS)
    pod["metadata"]["annotations"] = {keys.METAX_SGPU_APP_CLASS: "batch"}
    with pytest.raises(StatusError) as refused:
        await cluster.create(pod)
    assert f"{keys.METAX_SGPU_APP_CLASS} must be set one of [online, offline]" in (
        refused.value.message
    )
