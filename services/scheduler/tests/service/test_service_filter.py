"""``/filter`` and ``/prioritize`` through HTTP against the emulated API server."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from hami_protocol import keys
from hami_protocol.pod.devices import decode_pod_devices_canonical
from hami_scheduler.filter import MISSING_POD

from ..service_helpers import (
    annotations_of,
    container,
    eventually,
    gpu_limits,
    gpus,
    harness,
    labels_of,
    node_object,
    pod_object,
    refused,
    register_annotations,
)

pytestmark = pytest.mark.timeout(60)


async def test_single_mode_picks_one_node_writes_nothing_and_the_binding_carries_it() -> None:
    async with harness() as h:
        await h.add_node("n1", gpus("n1", 2))
        await h.add_node("n2", gpus("n2", 2))
        await h.synced_node("n1")
        await h.synced_node("n2")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=3000, cores=30))))
        version = pod["metadata"]["resourceVersion"]
        reply = await h.filter(pod, ["n1", "n2", "ghost"])
        assert set(reply) == {
            "Nodes",
            "NodeNames",
            "FailedNodes",
            "FailedAndUnresolvableNodes",
            "Error",
        }
        assert reply["Error"] == ""
        assert reply["Nodes"] is None
        # The pod fits: kube-scheduler will not preempt, so the refused are not split.
        assert reply["FailedAndUnresolvableNodes"] is None
        assert reply["FailedNodes"] == {"ghost": "node unregistered"}
        (chosen,) = reply["NodeNames"]
        assert chosen in {"n1", "n2"}
        # The filter wrote nothing: the decision is assumed, counted at once.
        assert h.pod("p")["metadata"]["resourceVersion"] == version
        assert h.scheduler.cache.assumed_count() == 1
        assert sum(d.usedmem for d in h.scheduler.cache.nodes[chosen].devices) == 3000
        assert await h.bind(pod, chosen) == ""
        stored = h.pod("p")
        notes = annotations_of(stored)
        assert notes[keys.VGPU_NODE] == chosen
        # The label is the device plugin's to set, once the pod is allocated.
        assert keys.VGPU_NODE not in labels_of(stored)
        assert int(notes[keys.VGPU_TIME]) > 0
        allocated = notes[keys.NVIDIA_DEVICES_ALLOCATED]
        assert notes[keys.NVIDIA_DEVICES_TO_ALLOCATE] == allocated
        (devices,) = decode_pod_devices_canonical(allocated)
        (device,) = devices
        assert (device.type, device.usedmem, device.usedcores) == ("NVIDIA", 3000, 30)
        assert device.uuid.startswith(f"GPU-{chosen}-")
        usage = h.scheduler.cache.nodes[chosen].device(device.uuid)
        assert usage is not None
        assert (usage.used, usage.usedmem) == (1, 3000)
        # Still counted once the watch has shown the bound pod.
        await eventually(
            lambda: h.scheduler.cache.assumed_count() == 0, what="assumption confirmed"
        )
        usage = h.scheduler.cache.nodes[chosen].device(device.uuid)
        assert usage is not None
        assert (usage.used, usage.usedmem, usage.usedcores) == (1, 3000, 30)
        await eventually(lambda: bool(h.events("FilteringSucceed")), what="event")
        message = h.events("FilteringSucceed")[0]["message"]
        assert message.startswith(f"find fit node({chosen}), 1 nodes not fit, 2 nodes fit(")


async def test_binpack_fills_the_busier_node_and_reasons_follow_hami() -> None:
    async with harness() as h:
        await h.add_node("a", gpus("a", 1, mem=8000))
        await h.add_node("b", gpus("b", 1, mem=8000))
        await h.synced_node("a")
        await h.synced_node("b")
        first = await h.add_pod(pod_object("one", container(limits=gpu_limits(1, mem=5000))))
        (node,) = (await h.filter(first, ["a", "b"]))["NodeNames"]
        second = await h.add_pod(pod_object("two", container(limits=gpu_limits(1, mem=2000))))
        assert (await h.filter(second, ["a", "b"]))["NodeNames"] == [node]
        third = await h.add_pod(pod_object("three", container(limits=gpu_limits(1, mem=2000))))
        reply = await h.filter(third, ["a", "b"])
        other = "b" if node == "a" else "a"
        assert reply["NodeNames"] == [other]
        assert refused(reply) == {node: "1/1 CardInsufficientMemory"}
        huge = await h.add_pod(pod_object("huge", container(limits=gpu_limits(2))))
        reply = await h.filter(huge, ["a", "b"])
        assert reply["NodeNames"] is None
        assert refused(reply) == {
            "a": "NodeInsufficientDevice",
            "b": "NodeInsufficientDevice",
        }
        await eventually(lambda: bool(h.events("FilteringFailed")), what="failure event")
        message = h.events("FilteringFailed")[0]["message"]
        assert message.startswith("no available node, 2 nodes do not meet")
        assert "2 nodes NodeInsufficientDevice(a,b)" in message


async def test_pod_without_managed_requests_gets_every_node_back() -> None:
    async with harness() as h:
        plain = pod_object("plain", container())
        reply = await h.filter({**plain, "metadata": {**plain["metadata"], "uid": "u"}}, ["x", "y"])
        assert reply["NodeNames"] == ["x", "y"]
        assert reply["Error"] == ""
        status, echoed = await h.post("filter", {"pod": plain, "nodenames": None})
        assert status == 200
        assert echoed["NodeNames"] is None


async def test_missing_pod_invalid_weights_and_unreadable_requests_are_errors() -> None:
    async with harness() as h:
        status, reply = await h.post("filter", {"Pod": None, "NodeNames": ["n1"]})
        assert (status, reply["Error"]) == (200, MISSING_POD)
        status, reply = await h.post("filter", {"NodeNames": ["n1"]})
        assert reply["Error"] == MISSING_POD
        weighted = pod_object("w", annotations={keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=1"})
        reply = await h.filter(weighted, ["n1"])
        assert keys.DEVICE_SCORING_WEIGHTS in reply["Error"]
        assert reply["NodeNames"] is None
        broken = pod_object("b", container(limits={"nvidia.com/gpu": "lots"}))
        reply = await h.filter(broken, ["n1"])
        assert reply["Error"].startswith("cannot read the pod's device requests")
        running = pod_object("r", container(limits=gpu_limits(1)))
        running["spec"]["nodeName"] = "n1"
        reply = await h.filter(running, ["n1"])
        assert reply["Error"] == "pod default/r is already bound to node n1"


async def test_garbage_register_annotation_fails_only_that_node_with_one_event() -> None:
    async with harness() as h:
        await h.add_node("good", gpus("good", 1))
        await h.add_node("bad", annotations={keys.NVIDIA_REGISTER: "not a device list"})
        await h.add_node("worse", annotations={keys.NVIDIA_REGISTER: "[{]"})
        await h.synced_node("good")
        await eventually(lambda: h.scheduler.cache.node_count == 3, what="nodes seen")
        for attempt in range(3):
            pod = await h.add_pod(
                pod_object(f"p{attempt}", container(limits=gpu_limits(1, mem=100)))
            )
            reply = await h.filter(pod, ["bad", "good", "worse"])
            assert reply["NodeNames"] == ["good"]
            assert refused(reply)["bad"].startswith(
                f"node annotation {keys.NVIDIA_REGISTER} is invalid:"
            )
            assert keys.NVIDIA_REGISTER in refused(reply)["worse"]
        await eventually(lambda: len(h.events("InvalidDeviceAnnotation")) == 2, what="events")
        # A changed value is reported again; an unchanged one never twice.
        await h.api.patch(
            "nodes",
            "bad",
            {"metadata": {"annotations": {keys.NVIDIA_REGISTER: "still bad"}}},
            patch_type="merge",
        )

        def counts() -> dict[str, int]:
            return {
                e["involvedObject"]["name"]: e["count"] for e in h.events("InvalidDeviceAnnotation")
            }

        await eventually(lambda: counts() == {"bad": 2, "worse": 1}, what="reported again")
        events = h.events("InvalidDeviceAnnotation")
        assert all(e["involvedObject"]["kind"] == "Node" for e in events)
        assert all(e["type"] == "Warning" for e in events)


async def test_legacy_colon_registration_is_read() -> None:
    async with harness() as h:
        await h.api.create(
            "nodes", node_object("old", register_annotations(gpus("old", 1), colon=True))
        )
        await h.synced_node("old")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        assert (await h.filter(pod, ["old"]))["NodeNames"] == ["old"]


async def test_selectors_cordon_and_policies_from_annotations() -> None:
    async with harness() as h:
        await h.add_node(
            "n",
            gpus("n", 3),
            annotations={keys.DEVICE_CORDON: "GPU-n-0, "},
        )
        await h.synced_node("n")
        pod = await h.add_pod(
            pod_object(
                "p",
                container(limits=gpu_limits(1, mem=100)),
                annotations={keys.NVIDIA_NOUSE_GPUUUID: "GPU-n-1"},
            )
        )
        await h.schedule(pod, ["n"])
        (devices,) = decode_pod_devices_canonical(
            annotations_of(h.pod("p"))[keys.NVIDIA_DEVICES_ALLOCATED]
        )
        assert [d.uuid for d in devices] == ["GPU-n-2"]
        typed = await h.add_pod(
            pod_object(
                "typed",
                container(limits=gpu_limits(1, mem=100)),
                annotations={keys.NVIDIA_USE_GPUTYPE: "A100"},
            )
        )
        reply = await h.filter(typed, ["n"])
        assert refused(reply) == {"n": "1/3 CardCordoned, 2/3 CardTypeMismatch"}


async def test_quota_from_resource_quota_objects() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 2))
        await h.synced_node("n")
        await h.api.create(
            "resourcequotas",
            {
                "metadata": {"name": "gpu", "namespace": "default"},
                "spec": {"hard": {"limits.nvidia.com/gpumem": "4000"}},
            },
        )
        await eventually(lambda: len(h.scheduler.cache.quotas) == 1, what="quota seen")
        first = await h.add_pod(pod_object("a", container(limits=gpu_limits(1, mem=3000))))
        assert (await h.schedule(first, ["n"]))["NodeNames"] == ["n"]
        second = await h.add_pod(pod_object("b", container(limits=gpu_limits(1, mem=2000))))
        reply = await h.filter(second, ["n"])
        assert reply["NodeNames"] is None
        assert refused(reply) == {"n": "2/2 ResourceQuotaNotFit"}
        # Another namespace is not limited; deleting the first pod frees the quota.
        other = await h.add_pod(
            pod_object("c", container(limits=gpu_limits(1, mem=2000)), namespace="kube-public")
        )
        assert (await h.filter(other, ["n"]))["NodeNames"] == ["n"]
        await h.api.delete("pods", "a", namespace="default")
        await eventually(
            lambda: h.scheduler.cache.ledger.used("default", "NVIDIA") == (0, 0), what="release"
        )
        assert (await h.filter(second, ["n"]))["NodeNames"] == ["n"]


async def test_a_filtered_pod_deleted_before_its_bind_is_swept() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 1, mem=8000))
        await h.synced_node("n")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=6000))))
        kept = await h.add_pod(pod_object("kept", container(limits=gpu_limits(1, mem=1000))))
        assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
        assert (await h.filter(kept, ["n"]))["NodeNames"] == ["n"]
        # The pod watch sees bound pods only: this deletion reaches the scheduler through the
        # sweep of decisions whose bind never came.
        await h.api.delete("pods", "p", namespace="default")
        pending = h.scheduler.filters.pending
        assert len(pending) == 2
        with capture_logs() as logs:
            assert await pending.sweep(h.scheduler.binder._client) == 0  # too young
            pending._max_age_s = 0.0
            assert await pending.sweep(h.scheduler.binder._client) == 1
        assert [e["pod"] for e in logs if e["event"] == "pending_bind_dropped"] == ["default/p"]
        device = h.scheduler.cache.nodes["n"].device("GPU-n-0")
        assert device is not None
        assert (device.used, device.usedmem) == (1, 1000)
        assert len(pending) == 1
        assert await h.bind(kept, "n") == ""


async def test_filtering_again_releases_the_previous_reservation() -> None:
    async with harness() as h:
        await h.add_node("n", gpus("n", 1, mem=8000))
        await h.synced_node("n")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=6000))))
        for _ in range(3):
            assert (await h.filter(pod, ["n"]))["NodeNames"] == ["n"]
            device = h.scheduler.cache.nodes["n"].device("GPU-n-0")
            assert device is not None
            assert (device.used, device.usedmem) == (1, 6000)
        assert h.scheduler.cache.assumed_count() == 1
        assert await h.bind(pod, "n") == ""
        await eventually(lambda: h.scheduler.cache.assumed_count() == 0, what="confirmed")
        device = h.scheduler.cache.nodes["n"].device("GPU-n-0")
        assert device is not None
        assert (device.used, device.usedmem) == (1, 6000)


async def test_full_nodes_path_decides_from_the_objects_and_writes_nothing() -> None:
    async with harness() as h:
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=6000))))
        small = node_object("small", register_annotations(gpus("small", 1, mem=4000)))
        big = node_object("big", register_annotations(gpus("big", 1, mem=16000)))
        bare = node_object("bare")
        status, reply = await h.post(
            "filter", {"Pod": pod, "Nodes": {"items": [small, big, bare]}, "NodeNames": None}
        )
        assert status == 200
        assert reply["NodeNames"] is None
        assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["big"]
        assert refused(reply) == {
            "small": "1/1 CardInsufficientMemory",
            "bare": "node unregistered",
        }
        assert keys.VGPU_NODE not in annotations_of(h.pod("p"))
        assert h.scheduler.cache.pod_count == 0
        assert h.scheduler.cache.nodes == {}


async def test_all_mode_returns_every_fitting_node_and_prioritize_scores_them() -> None:
    async with harness(filter_mode="all") as h:
        await h.add_node("busy", gpus("busy", 1))
        await h.add_node("idle", gpus("idle", 1))
        await h.add_node("tiny", gpus("tiny", 1, mem=500))
        for name in ("busy", "idle", "tiny"):
            await h.synced_node(name)
        # Make "busy" busy through a placed (bound) pod.
        placed = pod_object(
            "placed",
            container(limits=gpu_limits(1, mem=4000, cores=50)),
            annotations={
                keys.VGPU_NODE: "busy",
                keys.NVIDIA_DEVICES_ALLOCATED: "GPU-busy-0,NVIDIA,4000,50:;",
            },
        )
        placed["spec"]["nodeName"] = "busy"
        await h.add_pod(placed)
        await eventually(lambda: h.scheduler.cache.pod_count == 1, what="placed pod seen")
        pod = await h.add_pod(pod_object("p", container(limits=gpu_limits(1, mem=1000))))
        reply = await h.filter(pod, ["busy", "idle", "tiny"])
        assert sorted(reply["NodeNames"]) == ["busy", "idle"]
        assert refused(reply) == {"tiny": "1/1 CardInsufficientMemory"}
        assert keys.VGPU_NODE not in annotations_of(h.pod("p"))
        status, scores = await h.post("prioritize", {"Pod": pod, "NodeNames": ["busy", "idle"]})
        assert status == 200
        assert scores == [{"Host": "busy", "Score": 10}, {"Host": "idle", "Score": 0}]
        spread = await h.add_pod(
            pod_object(
                "s",
                container(limits=gpu_limits(1, mem=1000)),
                annotations={keys.NODE_SCHEDULER_POLICY: "spread"},
            )
        )
        _, scores = await h.post("prioritize", {"Pod": spread, "NodeNames": ["busy", "idle"]})
        assert scores == [{"Host": "busy", "Score": 0}, {"Host": "idle", "Score": 10}]
