"""Properties of the mutation over generated pods and rule sets.

For every generated pod: the request object is never modified; applying the reply's patch (with
the ``jsonpatch`` package) to the original yields exactly the admitted pod; admitting that pod
again changes nothing (the mutation is idempotent, as a reinvoked webhook must be); privileged
containers are never touched; every refusal says why.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import NvidiaConfig, parse_device_config
from hami_protocol.vendor.table import DEFAULT_VENDORS, vendors_from_config
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.quota.cache import QuotaCache

DEVICES = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)
RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    "cambricon.com/vmlu",
    "amd.com/gpu",
    "cpu",
    # vendors with admission rules of their own
    "huawei.com/Ascend910B3",
    "huawei.com/Ascend910B3-memory",
    "huawei.com/Ascend910B3-core",
    "huawei.com/Ascend910C",
    "huawei.com/Ascend310P-memory",
    "huawei.com/Ascend310P",
    "iluvatar.ai/BI-V150-vgpu",
    "iluvatar.ai/BI-V150.vCore",
    "mthreads.com/vgpu",
    "mthreads.com/sgpu-memory",
    "kunlunxin.com/vxpu",
    "kunlunxin.com/vxpu-memory",
    "metax-tech.com/sgpu",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "enflame.com/drs-gcu",
    "enflame.com/gcu-memory",
    "enflame.com/gcu-core",
)
QUANTITIES = ("0", "1", "2", "8", "50", "96", "100", "3000", "1500m", "101", "16384", "30000")
ENV_NAMES = (
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_TASK_PRIORITY",
    "GPU_CORE_UTILIZATION_POLICY",
    "A",
    "ASCEND_VISIBLE_DEVICES",
    "SOL_CONTINER_NAME",
)

resource_lists = st.dictionaries(
    st.sampled_from(RESOURCES), st.sampled_from(QUANTITIES), max_size=4
)
env_lists = st.lists(
    st.builds(
        lambda name, value: {"name": name, "value": value},
        st.sampled_from(ENV_NAMES),
        st.sampled_from(["none", "all", "1", "force"]),
    ),
    max_size=2,
)


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> list[dict[str, Any]]:
    count = draw(st.integers(0 if prefix == "init" else 1, 3))
    result = []
    for index in range(count):
        ctr: dict[str, Any] = {"name": f"{prefix}-{index}", "image": "busybox"}
        resources: dict[str, Any] = {}
        limits = draw(st.none() | resource_lists)
        requests = draw(st.none() | resource_lists)
        if limits is not None:
            resources["limits"] = limits
        if requests is not None:
            resources["requests"] = requests
        if draw(st.booleans()):
            ctr["resources"] = resources
        env = draw(st.none() | env_lists)
        if env is not None:
            ctr["env"] = env
        privileged = draw(st.sampled_from([None, None, None, False, True]))
        if privileged is not None:
            ctr["securityContext"] = {"privileged": privileged}
        result.append(ctr)
    return result


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers("app"))}
    init = draw(containers("init"))
    if init:
        spec["initContainers"] = init
    for key, values in (
        ("schedulerName", [None, "default-scheduler", "hami-scheduler", "volcano"]),
        ("nodeName", [None, None, "node-1"]),
        ("runtimeClassName", [None, None, "kata"]),
    ):
        value = draw(st.sampled_from(values))
        if value is not None:
            spec[key] = value
    meta: dict[str, Any] = {"name": "p", "namespace": "ns"}
    annotations = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "a/b",
                    "huawei.com/vnpu-mode",
                    "metax-tech.com/sgpu-qos-policy",
                    "metax-tech.com/sgpu-app-class",
                    "mthreads.com/request-gpu-num",
                ]
            ),
            st.sampled_from(["c", "hami-core", "best-effort", "online", "offline", "2"]),
            max_size=3,
        )
    )
    if annotations or draw(st.booleans()):
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


@st.composite
def rule_sets(draw: st.DrawFn) -> MutationRules:
    config = NvidiaConfig(
        overwrite_env=draw(st.booleans()),
        gpu_core_policy=draw(st.sampled_from(["default", "force", "disable"])),
        runtime_class_name=draw(st.sampled_from(["", "nvidia"])),
        default_gpu_num=draw(st.integers(0, 2)),
        default_memory=draw(st.sampled_from([0, 512])),
    )
    devices = replace(DEVICES, nvidia=config)
    if draw(st.booleans()):
        chips = tuple(
            replace(
                chip,
                overwrite_env=draw(st.booleans()),
                runtime_class_name=draw(st.sampled_from(["", "ascend"])),
            )
            for chip in DEVICES.vnpus.configs
        )
        devices = replace(devices, vnpus=replace(DEVICES.vnpus, configs=chips))
    enabled = draw(st.booleans())
    vendors = vendors_from_config(devices, enable_ascend=enabled, enable_iluvatar=enabled)
    return MutationRules(
        scheduler_name=draw(st.sampled_from(["hami-scheduler", ""])),
        force_overwrite_default_scheduler=draw(st.booleans()),
        nvidia=config,
        vendors=vendors,
        devices=devices,
    )


def quota_for(limit: int | None) -> QuotaCache | None:
    if limit is None:
        return None
    cache = QuotaCache(DEFAULT_VENDORS)
    hard = {"limits.nvidia.com/gpumem": str(limit), "limits.nvidia.com/gpucores": str(limit)}
    cache.set_quota({"metadata": {"namespace": "ns", "name": "q"}, "spec": {"hard": hard}})
    return cache


@given(pod=pods(), rules=rule_sets(), limit=st.none() | st.sampled_from([0, 100, 10_000]))
def test_patch_applied_to_the_original_is_the_admitted_pod(
    pod: dict[str, Any], rules: MutationRules, limit: int | None
) -> None:
    original = copy.deepcopy(pod)
    quota = quota_for(limit)
    decision = admit_pod(pod, namespace="ns", rules=rules, quota=quota)
    assert pod == original
    if not decision.allowed:
        assert decision.message
        assert decision.patch == ()
        return
    patched = jsonpatch.apply_patch(pod, list(decision.patch))
    if decision.outcome == "mutated":
        assert decision.patch
        assert patched == decision.pod
    else:
        assert patched == pod
    # Admitting the admitted pod again is a no-op.
    again = admit_pod(patched, namespace="ns", rules=rules, quota=quota)
    assert (again.outcome, again.patch) == ("allowed", ())
    # Privileged containers are never touched.
    for key in ("initContainers", "containers"):
        for index, ctr in enumerate(pod["spec"].get(key, [])):
            if (ctr.get("securityContext") or {}).get("privileged") is True:
                assert patched["spec"][key][index] == ctr


@given(pod=pods(), rules=rule_sets())
def test_the_scheduler_name_only_ever_becomes_ours_and_never_for_a_bound_pod(
    pod: dict[str, Any], rules: MutationRules
) -> None:
    decision = admit_pod(pod, namespace="ns", rules=rules)
    if decision.outcome != "mutated":
        return
    assert decision.pod is not None
    before, after = pod["spec"].get("schedulerName"), decision.pod["spec"].get("schedulerName")
    if before != after:
        assert after == rules.scheduler_name
        assert not pod["spec"].get("nodeName")
        assert before in (None, "default-scheduler")
