"""Every mutation rule, table-driven; each patch is applied with ``jsonpatch`` to the original."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from hami_protocol.config.device import NvidiaConfig
from hami_protocol.vendor.table import DEFAULT_VENDORS, nvidia_vendor
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.decision import Decision
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.quota.cache import QuotaCache

from .helpers import container, gpu, pod

RULES = MutationRules()
CORES = "nvidia.com/gpucores"


def rules_with(**nvidia: Any) -> MutationRules:
    config = replace(NvidiaConfig(), **nvidia)
    vendors = (nvidia_vendor(config), *DEFAULT_VENDORS[1:])
    return MutationRules(nvidia=config, vendors=vendors)


def admit(
    obj: dict[str, Any],
    rules: MutationRules = RULES,
    quota: QuotaCache | None = None,
    namespace: str = "default",
) -> tuple[Decision, dict[str, Any]]:
    """The decision and the pod the API server would store (patch applied with jsonpatch)."""
    before = copy.deepcopy(obj)
    decision = admit_pod(obj, namespace=namespace, rules=rules, quota=quota)
    assert obj == before, "the request object must not be modified"
    result = jsonpatch.apply_patch(obj, list(decision.patch))
    if decision.outcome == "mutated":
        assert decision.patch
        assert result == decision.pod
    else:
        assert decision.patch == ()
    return decision, result


def limits_of(result: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return result["spec"]["containers"][index]["resources"]["limits"]


def env_of(result: dict[str, Any], index: int = 0) -> list[dict[str, Any]] | None:
    return result["spec"]["containers"][index].get("env")


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "rules", "outcome", "code", "message"),
    [
        pytest.param(
            {"metadata": {"name": "p"}, "spec": {"containers": []}},
            RULES,
            "denied",
            403,
            "pod has no containers",
            id="no containers",
        ),
        pytest.param(
            {"metadata": {"name": "p"}},
            RULES,
            "denied",
            403,
            "pod has no containers",
            id="no spec",
        ),
        pytest.param(
            pod(container(limits=gpu()), nodeName="node-1"),
            RULES,
            "denied",
            403,
            "pod has node assigned",
            id="node assigned",
        ),
        pytest.param(
            pod(container("gpu-ctr", limits=gpu(), privileged=True)),
            RULES,
            "denied",
            403,
            "container gpu-ctr is privileged",
            id="privileged container with gpu",
        ),
        pytest.param(
            pod(container("app", limits=gpu()), container("monitor", privileged=True)),
            RULES,
            "denied",
            403,
            "container monitor is privileged",
            id="privileged sidecar in a gpu pod",
        ),
        pytest.param(
            pod(
                container("debug", privileged=True),
                container("trainer", limits=gpu(), privileged=True),
            ),
            RULES,
            "denied",
            403,
            "container trainer is privileged",
            id="the privileged container asking for devices is named",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpumem-percentage": "150"})),
            RULES,
            "error",
            500,
            "invalid nvidia.com/gpumem-percentage value 150 in container main: "
            "must be an integer between 0 and 100",
            id="percentage above 100",
        ),
        pytest.param(
            pod(container(limits=gpu(pct=-1))),
            RULES,
            "error",
            500,
            "invalid nvidia.com/gpumem-percentage value -1 in container main: "
            "must be an integer between 0 and 100",
            id="negative percentage",
        ),
        pytest.param(
            pod(container("side", limits={"nvidia.com/gpumem-percentage": "101"}, privileged=True)),
            RULES,
            "error",
            500,
            "invalid nvidia.com/gpumem-percentage value 101 in container side: "
            "must be an integer between 0 and 100",
            id="percentage checked in privileged containers too",
        ),
    ],
)
def test_refusals(
    obj: dict[str, Any], rules: MutationRules, outcome: str, code: int, message: str
) -> None:
    decision, _ = admit(obj, rules)
    assert (decision.outcome, decision.code, decision.message) == (outcome, code, message)
    assert not decision.allowed


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        pytest.param("not a pod", "not a JSON object", id="object is a string"),
        pytest.param({"spec": []}, "spec is not a JSON object", id="spec is a list"),
        pytest.param({"spec": {"containers": {}}}, "spec.containers", id="containers not a list"),
        pytest.param({"spec": {"containers": ["x"]}}, "container", id="container not an object"),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "lots"})), "nvidia.com/gpu", id="bad quantity"
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "1", "nvidia.com/priority": [1]})),
            "nvidia.com/priority",
            id="bad priority",
        ),
        pytest.param(
            {"spec": {"containers": [{"name": "c", "resources": {"limits": "x"}}]}},
            "limits",
            id="limits not an object",
        ),
    ],
)
def test_undecodable_pods_are_errors_with_code_400(obj: Any, fragment: str) -> None:
    decision = admit_pod(obj, namespace="default", rules=RULES)
    assert (decision.outcome, decision.code, decision.reason) == ("error", 400, "BadRequest")
    assert decision.message.startswith("cannot decode pod: ")
    assert fragment in decision.message


# -- scheduler name --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current", "rules", "expected"),
    [
        pytest.param(None, RULES, "hami-scheduler", id="unset -> ours"),
        pytest.param("default-scheduler", RULES, "hami-scheduler", id="default is overwritten"),
        pytest.param(
            "default-scheduler",
            MutationRules(force_overwrite_default_scheduler=False),
            "default-scheduler",
            id="default kept when forcing is off",
        ),
        pytest.param("volcano", RULES, "volcano", id="other scheduler kept"),
        pytest.param("hami-scheduler", RULES, "hami-scheduler", id="ours stays"),
        pytest.param(None, MutationRules(scheduler_name=""), None, id="no scheduler configured"),
        pytest.param(
            "default-scheduler",
            MutationRules(scheduler_name=""),
            "default-scheduler",
            id="no scheduler configured keeps default",
        ),
    ],
)
def test_scheduler_name(current: str | None, rules: MutationRules, expected: str | None) -> None:
    spec = {} if current is None else {"schedulerName": current}
    _, result = admit(pod(container(limits=gpu()), **spec), rules)
    assert result["spec"].get("schedulerName") == expected


def test_rdma_only_pod_goes_to_our_scheduler_without_gpu_defaults() -> None:
    """NICs are placed by our scheduler (joint GPU + NIC allocation), so it must get the pod."""
    _, result = admit(pod(container(limits={"koordinator.sh/rdma": "1"})))
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert limits_of(result) == {"koordinator.sh/rdma": "1"}


def test_a_placed_pods_record_copied_into_a_new_pod_is_removed() -> None:
    # A manifest copied from a placed pod (kubectl get -o yaml, renamed): its device lists,
    # node and bind state are another pod's; the pod's own annotations stay.
    copied = {
        "hami.io/vgpu-node": "n1",
        "hami.io/vgpu-time": "1700000000",
        "hami.io/bind-phase": "success",
        "hami.io/bind-time": "1700000000",
        "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;",
        "hami.io/vgpu-devices-to-allocate": ";",
        "hami.io/dcu-devices-allocated": "DCU-a,DCU,1000,10:;",
        "hami.io/rdma-devices-allocated": "0000_1a_00.1,RDMA,1,0:;",
        "hami.io/vgpu-mig-allocations": "[]",
        "team.example.com/owner": "ml",
        "hami.io/node-scheduler-policy": "spread",
    }
    decision, result = admit(pod(container(limits=gpu()), annotations=copied))
    assert decision.outcome == "mutated"
    assert result["metadata"]["annotations"] == {
        "team.example.com/owner": "ml",
        "hami.io/node-scheduler-policy": "spread",
    }


def test_other_scheduler_is_allowed_untouched_even_with_a_node() -> None:
    obj = pod(container(limits=gpu()), schedulerName="volcano", nodeName="n1")
    decision, result = admit(obj)
    assert decision.outcome == "allowed"
    assert "volcano" in decision.message
    assert result == obj


def test_default_scheduler_not_forced_and_node_set_is_allowed() -> None:
    rules = MutationRules(force_overwrite_default_scheduler=False)
    obj = pod(container(limits=gpu()), schedulerName="default-scheduler", nodeName="n1")
    assert admit(obj, rules)[0].outcome == "allowed"


def test_no_scheduler_configured_skips_the_node_check_but_applies_defaults() -> None:
    decision, result = admit(
        pod(container(limits=gpu()), nodeName="n1"), MutationRules(scheduler_name="")
    )
    assert decision.outcome == "mutated"
    assert limits_of(result)[CORES] == "100"
    assert "schedulerName" not in result["spec"]


def test_node_assigned_without_devices_is_allowed() -> None:
    decision, _ = admit(pod(container(), nodeName="n1"))
    assert (decision.outcome, decision.patch) == ("allowed", ())


def test_ignore_label_leaves_the_pod_alone() -> None:
    obj = pod(container(limits=gpu()), labels={"hami.io/webhook": "ignore"})
    decision, result = admit(obj)
    assert decision.outcome == "allowed"
    assert result == obj


# -- NVIDIA defaults -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param(gpu(), {**gpu(), CORES: "100"}, id="bare gpu gets exclusive cores"),
        pytest.param(gpu(pct=100), {**gpu(pct=100), CORES: "100"}, id="100 percent is whole"),
        pytest.param(gpu(pct=50), gpu(pct=50), id="50 percent: no cores"),
        pytest.param(gpu(pct=0), gpu(pct=0), id="0 percent: no cores"),
        pytest.param(gpu(mem=8192), gpu(mem=8192), id="memory: no cores"),
        pytest.param(gpu(cores=30), gpu(cores=30), id="explicit cores kept"),
        pytest.param(gpu(2), {**gpu(2), CORES: "100"}, id="two whole gpus"),
        pytest.param(
            {"nvidia.com/gpumem": "3000"},
            {"nvidia.com/gpumem": "3000", "nvidia.com/gpu": "1"},
            id="memory only: default count",
        ),
        pytest.param(
            {CORES: "50"}, {CORES: "50", "nvidia.com/gpu": "1"}, id="cores only: default count"
        ),
        pytest.param(
            {"nvidia.com/gpumem-percentage": "100"},
            {"nvidia.com/gpumem-percentage": "100", "nvidia.com/gpu": "1", CORES: "100"},
            id="percentage only: count and cores",
        ),
    ],
)
def test_nvidia_resource_defaults(limits: dict[str, str], expected: dict[str, str]) -> None:
    decision, result = admit(pod(container(limits=limits)))
    assert limits_of(result) == expected
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert decision.outcome == "mutated"


def test_patch_is_minimal_for_a_bare_gpu_pod() -> None:
    decision, _ = admit(pod(container(limits=gpu())))
    assert list(decision.patch) == [
        {
            "op": "add",
            "path": "/spec/containers/0/resources/limits/nvidia.com~1gpucores",
            "value": "100",
        },
        {"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]


def test_default_gpu_count_from_config() -> None:
    _, result = admit(
        pod(container(limits={"nvidia.com/gpumem": "1000"})), rules_with(default_gpu_num=3)
    )
    assert limits_of(result)["nvidia.com/gpu"] == "3"


def test_default_gpu_zero_adds_no_count_and_no_scheduler() -> None:
    obj = pod(container(limits={"nvidia.com/gpumem": "1000"}))
    decision, result = admit(obj, rules_with(default_gpu_num=0))
    assert decision.outcome == "allowed"
    assert result == obj


def test_requests_only_gpu_counts_as_a_request() -> None:
    _, result = admit(pod(container(requests={"nvidia.com/gpu": "1"})))
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert limits_of(result) == {CORES: "100"}


def test_renamed_resources_from_config() -> None:
    rules = rules_with(
        resource_count_name="example.com/vgpu", resource_core_name="example.com/vcores"
    )
    _, result = admit(pod(container(limits={"example.com/vgpu": "1"})), rules)
    assert limits_of(result) == {"example.com/vgpu": "1", "example.com/vcores": "100"}
    plain = pod(container(limits=gpu()))
    assert admit(plain, rules)[0].outcome == "allowed"


def test_no_memory_resource_configured_makes_every_count_whole() -> None:
    rules = rules_with(resource_memory_name=None)
    _, result = admit(pod(container(limits=gpu())), rules)
    assert limits_of(result)[CORES] == "100"


def test_no_core_resource_configured_adds_no_cores() -> None:
    rules = rules_with(resource_core_name=None)
    decision, result = admit(pod(container(limits=gpu())), rules)
    assert limits_of(result) == gpu()
    assert decision.outcome == "mutated"  # the scheduler name still changes


def test_init_containers_are_mutated_too() -> None:
    obj = pod(container(), init=[container("setup", limits=gpu())])
    _, result = admit(obj)
    assert result["spec"]["initContainers"][0]["resources"]["limits"][CORES] == "100"
    assert result["spec"]["schedulerName"] == "hami-scheduler"


# -- env ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        pytest.param(gpu(priority=1), [{"name": "CUDA_TASK_PRIORITY", "value": "1"}], id="1"),
        pytest.param(gpu(priority=0), [{"name": "CUDA_TASK_PRIORITY", "value": "0"}], id="0"),
        pytest.param(
            gpu(priority="1500m"), [{"name": "CUDA_TASK_PRIORITY", "value": "2"}], id="rounded up"
        ),
    ],
)
def test_task_priority_env(limits: dict[str, str], expected: list[dict[str, str]]) -> None:
    _, result = admit(pod(container(limits=limits)))
    assert env_of(result) == expected


def test_priority_only_in_requests_is_ignored() -> None:
    _, result = admit(pod(container(limits=gpu(), requests={"nvidia.com/priority": "1"})))
    assert env_of(result) is None


def test_overwrite_env_hides_gpus_from_other_containers() -> None:
    obj = pod(
        container("app", limits=gpu()),
        container("side", env=[{"name": "A", "value": "1"}]),
        container("all", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]),
        container("done", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]),
    )
    decision, result = admit(obj, rules_with(overwrite_env=True))
    assert env_of(result, 0) is None
    assert env_of(result, 1) == [
        {"name": "A", "value": "1"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
    ]
    assert env_of(result, 2) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert env_of(result, 3) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    paths = [op["path"] for op in decision.patch]
    assert "/spec/containers/1/env/1" in paths
    assert "/spec/containers/2/env/0/value" in paths
    assert not any(path.startswith("/spec/containers/3") for path in paths)


def test_overwrite_env_applies_to_pods_without_devices() -> None:
    decision, result = admit(pod(container()), rules_with(overwrite_env=True))
    assert decision.outcome == "mutated"
    assert env_of(result) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert "schedulerName" not in result["spec"]


def test_privileged_containers_are_not_mutated() -> None:
    obj = pod(container("app"), container("debug", privileged=True))
    _, result = admit(obj, rules_with(overwrite_env=True))
    assert env_of(result, 0) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert env_of(result, 1) is None


def test_env_value_from_is_replaced() -> None:
    env = [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]
    _, result = admit(pod(container(env=env)), rules_with(overwrite_env=True))
    assert env_of(result) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]


@pytest.mark.parametrize("policy", ["force", "disable"])
def test_core_policy_env_for_gpu_containers(policy: str) -> None:
    obj = pod(container("app", limits=gpu()), container("side"))
    _, result = admit(obj, rules_with(gpu_core_policy=policy))
    assert env_of(result, 0) == [{"name": "GPU_CORE_UTILIZATION_POLICY", "value": policy}]
    assert env_of(result, 1) is None


def test_default_core_policy_adds_nothing() -> None:
    _, result = admit(pod(container(limits=gpu())), rules_with(gpu_core_policy="default"))
    assert env_of(result) is None


def test_env_order_priority_then_policy() -> None:
    _, result = admit(pod(container(limits=gpu(priority=1))), rules_with(gpu_core_policy="force"))
    assert [entry["name"] for entry in env_of(result) or []] == [
        "CUDA_TASK_PRIORITY",
        "GPU_CORE_UTILIZATION_POLICY",
    ]


# -- runtime class ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pod(container(limits=gpu())), "nvidia", id="set when absent"),
        pytest.param(pod(container(limits=gpu()), runtimeClassName="kata"), "kata", id="kept"),
        pytest.param(pod(container()), None, id="not for pods without gpus"),
        pytest.param(
            pod(container(limits={"cambricon.com/vmlu": "1"})), None, id="not for other vendors"
        ),
    ],
)
def test_runtime_class(obj: dict[str, Any], expected: str | None) -> None:
    _, result = admit(obj, rules_with(runtime_class_name="nvidia"))
    assert result["spec"].get("runtimeClassName") == expected


# -- other vendors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "limits",
    [
        {"cambricon.com/vmlu": "1"},
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000"},
        {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "8"},
        {"metax-tech.com/gpu": "1"},
        {"amd.com/gpu": "1"},
        {"birentech.com/gpu": "1"},
        {"vastaitech.com/va": "2"},
        {"kunlunxin.com/xpu": "4"},
        {"enflame.com/gcu": "1"},
    ],
)
def test_other_vendor_pods_are_routed_without_nvidia_defaults(limits: dict[str, str]) -> None:
    _, result = admit(pod(container(limits=limits)))
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert limits_of(result) == limits


def test_amd_reads_limits_only() -> None:
    obj = pod(container(requests={"amd.com/gpu": "1"}))
    assert admit(obj)[0].outcome == "allowed"


def test_other_vendor_container_gets_nvidia_hidden() -> None:
    _, result = admit(
        pod(container(limits={"cambricon.com/vmlu": "1"})), rules_with(overwrite_env=True)
    )
    assert env_of(result) == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]


# -- quota -----------------------------------------------------------------------------------------


def quota_cache(
    hard: dict[str, str], *, namespace: str = "default", name: str = "gpu-quota"
) -> QuotaCache:
    cache = QuotaCache(DEFAULT_VENDORS)
    cache.set_quota({"metadata": {"namespace": namespace, "name": name}, "spec": {"hard": hard}})
    return cache


def placed(namespace: str, name: str, allocated: str, init: int = 0) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "annotations": {"hami.io/vgpu-devices-allocated": allocated},
        },
        "spec": {"initContainers": [{"name": f"i{i}"} for i in range(init)], "containers": []},
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("hard", "limits", "allowed"),
    [
        # contract §8 item 31: limits 200 cores / 4000 MiB
        pytest.param(
            {"limits.nvidia.com/gpucores": "200", "limits.nvidia.com/gpumem": "4000"},
            gpu(2, cores=100, mem=2000),
            True,
            id="2x(100,2000) fits 200/4000",
        ),
        pytest.param(
            {"limits.nvidia.com/gpucores": "200", "limits.nvidia.com/gpumem": "4000"},
            gpu(2, cores=60, mem=3000),
            False,
            id="2x(60,3000) exceeds memory",
        ),
        pytest.param(
            {"limits.nvidia.com/gpucores": "100"}, gpu(), True, id="whole card 100 cores fits 100"
        ),
        pytest.param(
            {"limits.nvidia.com/gpucores": "99"},
            gpu(),
            False,
            id="defaulted 100 cores counted",
        ),
        pytest.param(
            {"limits.nvidia.com/gpumem": "0"}, gpu(mem=1), False, id="explicit zero blocks"
        ),
        pytest.param(
            {"limits.nvidia.com/gpumem": "1000"},
            gpu(pct=50, cores=10),
            True,
            id="percentage requests carry no memory",
        ),
        pytest.param(
            {"requests.nvidia.com/gpumem": "1"}, gpu(mem=5000), True, id="requests. prefix ignored"
        ),
        pytest.param(
            {"limits.nvidia.com/gpumem": "1.5"}, gpu(mem=5000), True, id="non-integer ignored"
        ),
    ],
)
def test_quota(hard: dict[str, str], limits: dict[str, str], allowed: bool) -> None:
    decision, _ = admit(pod(container(limits=limits)), quota=quota_cache(hard))
    assert decision.allowed is allowed
    if not allowed:
        assert decision.message.startswith(
            "exceeding resource quota: ResourceQuota default/gpu-quota"
        )


def test_quota_message_names_the_limit_and_usage() -> None:
    cache = quota_cache({"limits.nvidia.com/gpumem": "4000"})
    cache.set_pod(placed("default", "old", "GPU-a,NVIDIA,3000,0:;"))
    decision, _ = admit(pod(container(limits=gpu(mem=2000))), quota=cache)
    assert decision.message == (
        "exceeding resource quota: ResourceQuota default/gpu-quota "
        "limits.nvidia.com/gpumem=4000, used 3000, requested 2000"
    )
    assert decision.detail["quota"] == "gpu-quota"
    cache.remove_pod(placed("default", "old", ""))
    assert admit(pod(container(limits=gpu(mem=2000))), quota=cache)[0].allowed


def test_quota_of_another_namespace_does_not_apply() -> None:
    cache = quota_cache({"limits.nvidia.com/gpumem": "1"}, namespace="team-a")
    assert admit(pod(container(limits=gpu(mem=2000))), quota=cache)[0].allowed
    assert not admit(pod(container(limits=gpu(mem=2000))), quota=cache, namespace="team-a")[
        0
    ].allowed


def test_quota_init_containers_count_at_their_peak() -> None:
    # apps: 2x1000 = 2000; init: 3000 -> effective 3000
    cache = quota_cache({"limits.nvidia.com/gpumem": "2999"})
    obj = pod(
        container("a", limits=gpu(mem=1000)),
        container("b", limits=gpu(mem=1000)),
        init=[container("i", limits=gpu(mem=3000))],
    )
    assert not admit(obj, quota=cache)[0].allowed
    cache.set_quota(
        {
            "metadata": {"namespace": "default", "name": "gpu-quota"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "3000"}},
        }
    )
    assert admit(obj, quota=cache)[0].allowed


def test_quota_memory_factor_scales_the_limit() -> None:
    rules = rules_with(memory_factor=2)
    cache = QuotaCache(rules.vendors)
    cache.set_quota(
        {
            "metadata": {"namespace": "default", "name": "q"},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "1000"}},
        }
    )
    # gpumem 1000 x factor 2 = 2000 MiB requested; limit 1000 x 2 = 2000
    assert admit(pod(container(limits=gpu(mem=1000))), rules, cache)[0].allowed
    assert not admit(pod(container(limits=gpu(mem=1001))), rules, cache)[0].allowed


def test_quota_not_checked_for_pods_without_devices() -> None:
    cache = quota_cache({"limits.nvidia.com/gpumem": "0", "limits.nvidia.com/gpucores": "0"})
    assert admit(pod(container()), quota=cache)[0].outcome == "allowed"
