"""Every vendor admission rule, table-driven (contract §1 "Webhook"); each patch is applied with
``jsonpatch`` to the original, so the pod checked is the one the API server would store."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import DeviceConfig, parse_device_config
from hami_protocol.vendor.table import vendors_from_config
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.decision import Decision
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.mutation.vendors.ascend import ascend_memory
from hami_webhook.mutation.vendors.kunlun import kunlun_vxpu_memory

from .helpers import container, pod

CONFIG = parse_device_config(DEFAULT_DEVICE_CONFIG_YAML)


def rules_for(config: DeviceConfig = CONFIG) -> MutationRules:
    vendors = vendors_from_config(config, enable_ascend=True, enable_iluvatar=True)
    return MutationRules(nvidia=config.nvidia, vendors=vendors, devices=config)


RULES = rules_for()


def with_chip(word: str, **changes: Any) -> MutationRules:
    chips = tuple(
        replace(chip, **changes) if chip.common_word == word else chip
        for chip in CONFIG.vnpus.configs
    )
    return rules_for(replace(CONFIG, vnpus=replace(CONFIG.vnpus, configs=chips)))


def admit(obj: dict[str, Any], rules: MutationRules = RULES) -> tuple[Decision, dict[str, Any]]:
    before = copy.deepcopy(obj)
    decision = admit_pod(obj, namespace="default", rules=rules)
    assert obj == before
    result = jsonpatch.apply_patch(obj, list(decision.patch))
    if decision.outcome == "mutated":
        assert result == decision.pod
        again = admit_pod(result, namespace="default", rules=rules)
        assert (again.outcome, again.patch) == ("allowed", ()), "not idempotent"
    return decision, result


def resources_of(result: dict[str, Any], index: int = 0) -> dict[str, Any]:
    resources: dict[str, Any] = result["spec"]["containers"][index].get("resources", {})
    return resources


def env_of(result: dict[str, Any], index: int = 0) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = result["spec"]["containers"][index].get("env", [])
    return env


def refused(obj: dict[str, Any], rules: MutationRules = RULES) -> str:
    decision, _ = admit(obj, rules)
    assert decision.outcome == "error", decision
    assert decision.code == 500
    return decision.message


# -- Ascend --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "asked", "rounded"),
    [
        ("Ascend910B3", "1000", "16384"),
        ("Ascend910B3", "16384", "16384"),
        ("Ascend910B3", "16385", "32768"),
        ("Ascend910B3", "40000", "65536"),  # above every template, within memoryCapacity
        ("Ascend910A", "3000", "4369"),
        ("Ascend310P", "13000", "21527"),  # memoryAllocatable, below memoryCapacity 24576
        ("Ascend310P", "24576", "21527"),
    ],
)
def test_ascend_template_rounding(word: str, asked: str, rounded: str) -> None:
    memory = f"huawei.com/{word}-memory"
    decision, result = admit(
        pod(container(limits={f"huawei.com/{word}": "1", memory: asked}, requests={memory: asked}))
    )
    assert decision.outcome == "mutated"
    resources = resources_of(result)
    assert resources["limits"][memory] == rounded
    assert resources["requests"][memory] == rounded
    assert result["spec"]["schedulerName"] == "hami-scheduler"


def test_ascend_without_memory_gets_the_whole_card() -> None:
    _, result = admit(pod(container(limits={"huawei.com/Ascend910B4": "1"})))
    resources = resources_of(result)
    assert resources["limits"]["huawei.com/Ascend910B4-memory"] == "32768"
    assert resources["requests"]["huawei.com/Ascend910B4-memory"] == "32768"


def test_ascend_memory_above_the_card_is_invalid() -> None:
    limits = {"huawei.com/Ascend310P": "1", "huawei.com/Ascend310P-memory": "24577"}
    assert refused(pod(container(limits=limits))) == "huawei.com/Ascend310P-memory 24577 is invalid"


@pytest.mark.parametrize("memory", ["16384", "32768"])
def test_ascend_several_npus_need_whole_cards(memory: str) -> None:
    limits = {"huawei.com/Ascend910B3": "2", "huawei.com/Ascend910B3-memory": memory}
    assert refused(pod(container(limits=limits))) == "vNPU not supported for multiple devices"


def test_ascend_several_whole_npus_are_fine() -> None:
    limits = {"huawei.com/Ascend910B3": "4", "huawei.com/Ascend910B3-memory": "65536"}
    decision, result = admit(pod(container(limits=limits)))
    assert decision.outcome == "mutated"
    assert resources_of(result)["requests"]["huawei.com/Ascend910B3-memory"] == "65536"


@pytest.mark.parametrize(
    ("count", "requests", "expected"),
    [("1", True, "2"), ("1", False, "2"), ("2", True, "2"), ("4", False, "4")],
)
def test_ascend_910c_superpod_modules(count: str, requests: bool, expected: str) -> None:
    obj = pod(
        container(
            limits={"huawei.com/Ascend910C": count},
            requests={"huawei.com/Ascend910C": count} if requests else None,
        )
    )
    _, result = admit(obj)
    resources = resources_of(result)
    assert resources["limits"]["huawei.com/Ascend910C"] == expected
    if requests:
        assert resources["requests"]["huawei.com/Ascend910C"] == expected
    else:
        assert "huawei.com/Ascend910C" not in resources.get("requests", {})


@pytest.mark.parametrize("count", ["3", "5"])
def test_ascend_910c_odd_counts_are_refused(count: str) -> None:
    message = refused(pod(container(limits={"huawei.com/Ascend910C": count})))
    assert message == f"Ascend910C device request must be 1 or 2*n, got {count}"


def test_ascend_910c_without_superpod_is_an_ordinary_chip() -> None:
    rules = with_chip("Ascend910C", super_pod=False)
    _, result = admit(pod(container(limits={"huawei.com/Ascend910C": "3"})), rules)
    assert resources_of(result)["limits"]["huawei.com/Ascend910C"] == "3"


def test_ascend_core_only_in_hami_core_mode() -> None:
    limits = {"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-core": "20"}
    message = refused(pod(container(limits=limits)))
    assert message.startswith("huawei.com/Ascend910B3-core is only supported in hami-core mode")
    decision, result = admit(
        pod(
            container(limits={**limits, "huawei.com/Ascend910B3-memory": "1000"}),
            annotations={"huawei.com/vnpu-mode": "hami-core"},
        )
    )
    # hami-core splits softly: no template rounding.
    assert resources_of(result)["limits"]["huawei.com/Ascend910B3-memory"] == "1000"
    assert decision.outcome == "mutated"


def test_ascend_overwrite_env_blanks_containers_without_npus() -> None:
    rules = with_chip("Ascend910B3", overwrite_env=True)
    obj = pod(
        container("cpu"),
        container("npu", limits={"huawei.com/Ascend910B3": "1"}),
        container("other-npu", limits={"huawei.com/Ascend910B4": "1"}),
    )
    _, result = admit(obj, rules)
    assert env_of(result, 0) == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]
    assert env_of(result, 1) == []
    assert env_of(result, 2) == []  # HAMi would blank this one too


def test_ascend_runtime_class() -> None:
    rules = with_chip("Ascend910B3", runtime_class_name="ascend")
    _, result = admit(pod(container(limits={"huawei.com/Ascend910B3": "1"})), rules)
    assert result["spec"]["runtimeClassName"] == "ascend"
    obj = pod(container(limits={"huawei.com/Ascend910B3": "1"}))
    obj["spec"]["runtimeClassName"] = "kata"
    assert admit(obj, rules)[1]["spec"]["runtimeClassName"] == "kata"
    _, cpu_only = admit(pod(container()), rules)
    assert "runtimeClassName" not in cpu_only["spec"]


def test_ascend_rules_only_when_enabled() -> None:
    config = CONFIG
    rules = MutationRules(nvidia=config.nvidia, vendors=vendors_from_config(config), devices=config)
    decision, _ = admit(pod(container(limits={"huawei.com/Ascend910C": "3"})), rules)
    assert decision.outcome == "allowed"


def test_ascend_memory_function() -> None:
    chip = next(c for c in CONFIG.vnpus.configs if c.common_word == "Ascend910B4")
    assert [ascend_memory(chip, m) for m in (1, 8192, 8193, 16384, 16385, 32768, 32769)] == [
        8192,
        8192,
        16384,
        16384,
        32768,
        32768,
        0,
    ]


# -- Iluvatar ------------------------------------------------------------------------------------


def test_iluvatar_cores_and_container_name() -> None:
    limits = {"iluvatar.ai/BI-V150-vgpu": "2", "iluvatar.ai/BI-V150.vCore": "30"}
    _, result = admit(pod(container("train", limits=limits)))
    assert resources_of(result)["limits"]["iluvatar.ai/BI-V150.vCore"] == "200"
    assert env_of(result) == [{"name": "SOL_CONTINER_NAME", "value": "train"}]


def test_iluvatar_single_card_keeps_its_cores_and_an_existing_env() -> None:
    limits = {"iluvatar.ai/MR-V100-vgpu": "1", "iluvatar.ai/MR-V100.vCore": "30"}
    env = [{"name": "SOL_CONTINER_NAME", "value": "mine"}]
    _, result = admit(pod(container("x", limits=limits, env=env)))
    assert resources_of(result)["limits"]["iluvatar.ai/MR-V100.vCore"] == "30"
    assert env_of(result) == env


# -- Moore Threads -------------------------------------------------------------------------------


def test_mthreads_several_cards() -> None:
    limits = {"mthreads.com/vgpu": "3", "mthreads.com/sgpu-memory": "8"}
    _, result = admit(pod(container(limits=limits)))
    assert resources_of(result)["limits"] == {
        "mthreads.com/vgpu": "3",
        "mthreads.com/sgpu-memory": "288",
        "mthreads.com/sgpu-core": "48",
    }
    assert result["metadata"]["annotations"]["mthreads.com/request-gpu-num"] == "3"


def test_mthreads_one_card_without_memory_is_a_whole_card() -> None:
    _, result = admit(pod(container(limits={"mthreads.com/vgpu": "1"})))
    assert resources_of(result)["limits"] == {
        "mthreads.com/vgpu": "1",
        "mthreads.com/sgpu-core": "16",
        "mthreads.com/sgpu-memory": "96",
    }
    assert "mthreads.com/request-gpu-num" not in result["metadata"].get("annotations", {})


@pytest.mark.parametrize("memory", ["2", "4", "8", "16", "32", "64", "96"])
def test_mthreads_legal_slices(memory: str) -> None:
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": memory}
    decision, result = admit(pod(container(limits=limits)))
    assert decision.outcome == "mutated"
    assert resources_of(result)["limits"] == limits


@pytest.mark.parametrize("memory", ["1", "3", "48", "97", "160"])
def test_mthreads_other_sizes_are_refused(memory: str) -> None:
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": memory}
    assert refused(pod(container(limits=limits))) == (
        "sGPU memory request value is invalid, valid values are [2, 4, 8, 16, 32, 64, 96]"
    )


def test_mthreads_card_size_from_memory_per_card() -> None:
    rules = rules_for(replace(CONFIG, mthreads=replace(CONFIG.mthreads, memory_per_card=(160,))))
    limits = {"mthreads.com/vgpu": "1", "mthreads.com/sgpu-memory": "160"}
    assert admit(pod(container(limits=limits)), rules)[0].outcome == "mutated"
    _, result = admit(pod(container(limits={"mthreads.com/vgpu": "2"})), rules)
    assert resources_of(result)["limits"]["mthreads.com/sgpu-memory"] == "320"


def test_mthreads_zero_cards_refused() -> None:
    assert refused(pod(container(limits={"mthreads.com/vgpu": "0"}))) == (
        "mthreads.com/vgpu must be greater than 0"
    )


# -- Kunlunxin vXPU ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("asked", "rounded"),
    [
        ("1", "24576"),
        ("24576", "24576"),
        ("24577", "49152"),
        ("60000", "98304"),
        ("200000", "98304"),
    ],
)
def test_kunlun_vxpu_memory_rounding(asked: str, rounded: str) -> None:
    limits = {"kunlunxin.com/vxpu": "1", "kunlunxin.com/vxpu-memory": asked}
    _, result = admit(pod(container(limits=limits)))
    resources = resources_of(result)
    assert resources["limits"]["kunlunxin.com/vxpu-memory"] == rounded
    assert resources["requests"]["kunlunxin.com/vxpu-memory"] == rounded
    assert kunlun_vxpu_memory(int(asked)) == int(rounded)


def test_kunlun_vxpu_without_memory_is_left_alone() -> None:
    decision, result = admit(pod(container(limits={"kunlunxin.com/vxpu": "1"})))
    assert resources_of(result) == {"limits": {"kunlunxin.com/vxpu": "1"}}
    assert decision.outcome == "mutated"  # routed to our scheduler


# -- MetaX sGPU ----------------------------------------------------------------------------------


def test_metax_default_qos() -> None:
    _, result = admit(pod(container(limits={"metax-tech.com/sgpu": "1"})))
    assert result["metadata"]["annotations"]["metax-tech.com/sgpu-qos-policy"] == "best-effort"


@pytest.mark.parametrize("qos", ["fixed-share", "burst-share", "best-effort"])
def test_metax_chosen_qos_is_kept(qos: str) -> None:
    obj = pod(
        container(limits={"metax-tech.com/sgpu": "1"}),
        annotations={"metax-tech.com/sgpu-qos-policy": qos},
    )
    assert admit(obj)[1]["metadata"]["annotations"]["metax-tech.com/sgpu-qos-policy"] == qos


def test_metax_online_pods_get_no_qos() -> None:
    obj = pod(
        container(limits={"metax-tech.com/sgpu": "1"}),
        annotations={"metax-tech.com/sgpu-app-class": "online"},
    )
    assert "metax-tech.com/sgpu-qos-policy" not in admit(obj)[1]["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("annotations", "count", "message"),
    [
        (
            {"metax-tech.com/sgpu-qos-policy": "gold"},
            "1",
            "metax-tech.com/sgpu-qos-policy must be set one of "
            "[best-effort, fixed-share, burst-share]",
        ),
        (
            {"metax-tech.com/sgpu-app-class": "batch"},
            "1",
            "metax-tech.com/sgpu-app-class must be set one of [online, offline]",
        ),
        (
            {"metax-tech.com/sgpu-app-class": "offline"},
            "2",
            "app-class pod must request single device",
        ),
    ],
)
def test_metax_refusals(annotations: dict[str, str], count: str, message: str) -> None:
    obj = pod(container(limits={"metax-tech.com/sgpu": count}), annotations=annotations)
    assert refused(obj) == message


def test_metax_whole_gpu_gets_no_qos() -> None:
    _, result = admit(pod(container(limits={"metax-tech.com/gpu": "1"})))
    assert "annotations" not in result["metadata"]


# -- AWS Neuron ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"aws.amazon.com/neuron": "0"}, "aws.amazon.com/neuron must be greater than 0"),
        ({"aws.amazon.com/neuron": "1500m"}, "aws.amazon.com/neuron must be an integer"),
        (
            {"aws.amazon.com/neuron": "3000000000"},
            "aws.amazon.com/neuron must not exceed 2147483647",
        ),
        ({"aws.amazon.com/neuroncore": "0"}, "aws.amazon.com/neuroncore must be greater than 0"),
        (
            {"aws.amazon.com/neuroncore": "3"},
            "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3",
        ),
    ],
)
def test_aws_neuron_refusals(limits: dict[str, str], message: str) -> None:
    assert refused(pod(container(limits=limits))) == message


@pytest.mark.parametrize(
    "limits",
    [
        {"aws.amazon.com/neuron": "2"},
        {"aws.amazon.com/neuroncore": "1"},
        {"aws.amazon.com/neuroncore": "4"},
    ],
)
def test_aws_neuron_requests_are_routed(limits: dict[str, str]) -> None:
    decision, result = admit(pod(container(limits=limits)))
    assert decision.outcome == "mutated"
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert resources_of(result)["limits"] == limits


# -- Enflame -------------------------------------------------------------------------------------


def test_enflame_drs_count_mirrored_into_requests() -> None:
    _, result = admit(pod(container(limits={"enflame.com/drs-gcu": "3"})))
    assert resources_of(result) == {
        "limits": {"enflame.com/drs-gcu": "3"},
        "requests": {"enflame.com/drs-gcu": "3"},
    }


def test_enflame_memory_and_core_mirrored() -> None:
    obj = pod(
        container(requests={"enflame.com/gcu-memory": "20"}, limits={"enflame.com/gcu-core": "50"})
    )
    _, result = admit(obj)
    assert resources_of(result) == {
        "limits": {"enflame.com/gcu-core": "50", "enflame.com/gcu-memory": "20"},
        "requests": {"enflame.com/gcu-memory": "20", "enflame.com/gcu-core": "50"},
    }
    assert result["spec"]["schedulerName"] == "hami-scheduler"


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"enflame.com/drs-gcu": "0"}, "enflame.com/drs-gcu must be greater than 0"),
        ({"enflame.com/gcu-memory": "0"}, "enflame.com/gcu-memory must be greater than 0"),
        ({"enflame.com/gcu-core": "0"}, "enflame.com/gcu-core must be in range (0,100]"),
        ({"enflame.com/gcu-core": "101"}, "enflame.com/gcu-core must be in range (0,100]"),
    ],
)
def test_enflame_refusals(limits: dict[str, str], message: str) -> None:
    assert refused(pod(container(limits=limits))) == message


# -- shared --------------------------------------------------------------------------------------


def test_privileged_vendor_container_is_denied_and_untouched() -> None:
    obj = pod(container(limits={"mthreads.com/vgpu": "2"}, privileged=True))
    decision, _ = admit(obj)
    assert (decision.outcome, decision.message) == ("denied", "container main is privileged")


def test_two_vendors_in_one_pod() -> None:
    obj = pod(
        container("a", limits={"nvidia.com/gpu": "1"}),
        container(
            "b", limits={"huawei.com/Ascend910B3": "1", "huawei.com/Ascend910B3-memory": "100"}
        ),
        container("c", limits={"metax-tech.com/sgpu": "1"}),
    )
    decision, result = admit(obj)
    assert decision.outcome == "mutated"
    assert resources_of(result, 0)["limits"]["nvidia.com/gpucores"] == "100"
    assert resources_of(result, 1)["limits"]["huawei.com/Ascend910B3-memory"] == "16384"
    assert result["metadata"]["annotations"]["metax-tech.com/sgpu-qos-policy"] == "best-effort"


def test_patch_is_minimal_for_an_added_annotation() -> None:
    obj = pod(container(limits={"metax-tech.com/sgpu": "1"}), annotations={"x/y": "z"})
    decision, _ = admit(obj)
    assert {
        "op": "add",
        "path": "/metadata/annotations/metax-tech.com~1sgpu-qos-policy",
        "value": "best-effort",
    } in decision.patch
