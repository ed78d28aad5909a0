"""The DRA conversion (``/webhook/dra``): NVIDIA limits → a claim from a shared template.

Pure: :func:`admit_pod` with ``dra_claims=True`` and :func:`convert_pod`; the selectors are
evaluated with the emulator's CEL (cel-python) against devices as the node agent publishes them.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from hami_kubesim import dra_objects
from hami_kubesim.dra.cel import device_variable, selector_matches
from hami_kubesim.dra.model import parse_device
from hami_protocol.config.device import NvidiaConfig
from hami_protocol.vendor.table import DEFAULT_VENDORS, nvidia_vendor
from hami_webhook.dra.claims import (
    GpuShape,
    cel_string,
    convert_pod,
    pod_selectors,
    template_for,
)
from hami_webhook.mutation.admit import admit_pod
from hami_webhook.mutation.decision import Decision
from hami_webhook.mutation.rules import MutationRules

from .helpers import container, gpu, pod

RULES = MutationRules()
NVIDIA = nvidia_vendor(NvidiaConfig())


def admit(
    obj: dict[str, Any], rules: MutationRules = RULES, namespace: str = "team"
) -> tuple[Decision, dict[str, Any]]:
    before = copy.deepcopy(obj)
    decision = admit_pod(obj, namespace=namespace, rules=rules, dra_claims=True)
    assert obj == before, "the request object must not be modified"
    return decision, jsonpatch.apply_patch(obj, list(decision.patch))


def claim_spec(decision: Decision, index: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = decision.templates[index].body["spec"]["spec"]
    return spec


def exactly(decision: Decision, index: int = 0) -> dict[str, Any]:
    request: dict[str, Any] = claim_spec(decision, index)["devices"]["requests"][0]
    assert request["name"] == "gpu"
    return dict(request["exactly"])


# -- the conversion ------------------------------------------------------------------------------


def test_memory_and_cores_become_capacity_requests_and_the_limits_go() -> None:
    decision, result = admit(
        pod(container(limits={**gpu(2, mem=4096, cores=30), "cpu": "1"}), name="train")
    )
    assert decision.outcome == "mutated"
    ctr = result["spec"]["containers"][0]
    assert ctr["resources"]["limits"] == {"cpu": "1"}
    assert ctr["resources"]["claims"] == [{"name": "gpu-main"}]
    (template,) = decision.templates
    assert result["spec"]["resourceClaims"] == [
        {"name": "gpu-main", "resourceClaimTemplateName": template.name}
    ]
    assert template.namespace == "team"
    assert template.name.startswith("hami-gpu-")
    assert len(template.name) == len("hami-gpu-") + 16
    assert exactly(decision) == {
        "deviceClassName": "gpu.hami.io",
        "count": 2,
        "capacity": {"requests": {"memory": "4Gi", "cores": "30"}},
    }
    body = template.body
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert body["kind"] == "ResourceClaimTemplate"
    assert body["metadata"]["namespace"] == "team"
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "hami-webhook"}
    assert body["metadata"]["annotations"] == {"gpu.hami.io/request": "count=2 memory=4Gi cores=30"}
    # Claims are allocated by kube-scheduler (or whichever scheduler the pod names).
    assert "schedulerName" not in result["spec"]


def test_a_whole_card_asks_no_memory_and_every_core() -> None:
    # The NVIDIA rule adds gpucores 100 to a whole-card request; no memory request lets the
    # device's policy charge its whole memory.
    decision, result = admit(pod(container(limits=gpu(1))))
    assert exactly(decision) == {
        "deviceClassName": "gpu.hami.io",
        "count": 1,
        "capacity": {"requests": {"cores": "100"}},
    }
    assert "limits" not in result["spec"]["containers"][0]["resources"]


def test_percentage_100_is_a_whole_card_and_memory_only_reserves_no_cores() -> None:
    whole, _ = admit(pod(container(limits=gpu(1, pct=100, cores=50))))
    assert exactly(whole)["capacity"] == {"requests": {"cores": "50"}}
    memory_only, _ = admit(pod(container(limits=gpu(1, mem=3000))))
    assert exactly(memory_only)["capacity"] == {"requests": {"memory": "3000Mi"}}


def test_memory_factor_and_default_memory_apply() -> None:
    config = replace(NvidiaConfig(), memory_factor=2, default_memory=2048)
    rules = MutationRules(nvidia=config, vendors=(nvidia_vendor(config), *DEFAULT_VENDORS[1:]))
    scaled, _ = admit(pod(container(limits=gpu(1, mem=1000))), rules)
    assert exactly(scaled)["capacity"]["requests"]["memory"] == "2000Mi"
    defaulted, _ = admit(pod(container(limits=gpu(1))), rules)
    assert exactly(defaulted)["capacity"]["requests"]["memory"] == "2Gi"


def test_one_template_per_shape_one_claim_per_container() -> None:
    decision, result = admit(
        pod(
            container("a", limits=gpu(1, mem=2048)),
            container("b", limits=gpu(1, mem=2048)),
            container("c", limits=gpu(1, mem=1024)),
            container("plain"),
            init=[container("setup", limits=gpu(1, mem=2048))],
        )
    )
    assert len(decision.templates) == 2
    claims = result["spec"]["resourceClaims"]
    assert [c["name"] for c in claims] == ["gpu-setup", "gpu-a", "gpu-b", "gpu-c"]
    same = {c["resourceClaimTemplateName"] for c in claims[:3]}
    assert len(same) == 1
    assert claims[3]["resourceClaimTemplateName"] != same.pop()
    assert result["spec"]["initContainers"][0]["resources"]["claims"] == [{"name": "gpu-setup"}]
    assert "claims" not in result["spec"]["containers"][3].get("resources", {})


def test_template_names_depend_on_the_shape_only() -> None:
    shape = GpuShape(count=1, memory_mib=4096, cores=25)
    assert template_for(shape, "a").name == template_for(shape, "b").name
    assert template_for(shape, "a").name != template_for(replace(shape, cores=26), "a").name
    numa = replace(shape, same_numa=True)
    # One GPU is on one NUMA node anyway: no constraint, the same template.
    assert template_for(numa, "a").name == template_for(shape, "a").name
    two = replace(numa, count=2)
    assert template_for(two, "a").body["spec"]["spec"]["devices"]["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.hami.io/numa"}
    ]


def test_existing_claims_and_their_names_are_kept() -> None:
    user = {"name": "gpu-main", "resourceClaimName": "shared"}
    obj = pod(
        container(limits=gpu(1, mem=1024)),
        container("side", limits={"cpu": "1"}),
        resourceClaims=[user],
    )
    obj["spec"]["containers"][1]["resources"]["claims"] = [{"name": "gpu-main"}]
    _decision, result = admit(obj)
    claims = result["spec"]["resourceClaims"]
    assert claims[0] == user
    assert claims[1]["name"] == "gpu-main-2"
    assert result["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu-main-2"}]
    assert result["spec"]["containers"][1]["resources"]["claims"] == [{"name": "gpu-main"}]


def test_long_container_names_give_dns_label_claim_names() -> None:
    name = "c" * 63
    _, result = admit(pod(container(name, limits=gpu(1))))
    claim = result["spec"]["resourceClaims"][0]["name"]
    assert len(claim) <= 63
    assert claim.startswith("gpu-ccc")


def test_priority_becomes_env_and_leaves_the_limits() -> None:
    _, result = admit(pod(container(limits=gpu(1, mem=1024, priority=1))))
    ctr = result["spec"]["containers"][0]
    assert "nvidia.com/priority" not in ctr["resources"].get("limits", {})
    assert {"name": "CUDA_TASK_PRIORITY", "value": "1"} in ctr["env"]


def test_requests_section_is_read_and_cleaned_too() -> None:
    decision, result = admit(
        pod(container(requests={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "512", "cpu": "1"}))
    )
    assert exactly(decision)["capacity"]["requests"]["memory"] == "512Mi"
    assert result["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}


def test_without_the_flag_nothing_changes() -> None:
    obj = pod(container(limits=gpu(1, mem=1024)))
    decision = admit_pod(obj, namespace="team", rules=RULES)
    assert decision.templates == ()
    result = jsonpatch.apply_patch(obj, list(decision.patch))
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert "resourceClaims" not in result["spec"]


# -- what stays with our scheduler, and refusals ---------------------------------------------------


def test_other_devices_keep_the_pod_on_our_scheduler() -> None:
    decision, result = admit(
        pod(container(limits={**gpu(1, mem=1024), "koordinator.sh/rdma": "1"}))
    )
    assert decision.templates
    assert result["spec"]["schedulerName"] == "hami-scheduler"


def test_a_pod_bound_by_name_is_still_refused() -> None:
    decision, _ = admit(pod(container(limits=gpu(1)), nodeName="n1"))
    assert decision.outcome == "denied"
    assert decision.message == "pod has node assigned"


@pytest.mark.parametrize(
    ("limits", "words"),
    [
        pytest.param(
            gpu(1, pct=50),
            "nvidia.com/gpumem-percentage=50 cannot be converted to a DRA claim",
            id="percentage",
        ),
        pytest.param(gpu(1, cores=150), "nvidia.com/gpucores=150 is more than 100", id="cores"),
        pytest.param(
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16Gi"},
            "its NVIDIA request cannot be read as a DRA claim",
            id="gpumem in bytes",
        ),
    ],
)
def test_requests_a_claim_cannot_express_are_refused(limits: dict[str, Any], words: str) -> None:
    decision, _ = admit(pod(container(limits=limits)))
    assert decision.outcome == "error"
    assert decision.code == 500
    assert decision.message.startswith("container main: ")
    assert words in decision.message
    assert decision.templates == ()


def test_pods_without_nvidia_requests_are_untouched() -> None:
    obj = pod(
        container(limits={"cpu": "1"}), resourceClaims=[{"name": "x", "resourceClaimName": "y"}]
    )
    decision, result = admit(obj)
    assert decision.outcome == "allowed"
    assert result == obj


# -- selectors --------------------------------------------------------------------------------


def device(index: int, *, model: str = "NVIDIA-A100-SXM4-80GB", uuid: str | None = None) -> Any:
    raw = dra_objects.gpu_device(index, model=model, uuid=uuid or f"GPU-{index}")
    parsed = parse_device(raw, driver="gpu.hami.io", pool="n1", node_local=True, node_selector=None)
    return device_variable(parsed)


def selected(selectors: tuple[str, ...], dev: Any) -> bool:
    return all(selector_matches(expr, dev) for expr in selectors)


def test_type_selectors_match_case_insensitive_substrings_as_hami() -> None:
    a100, h100, t4 = device(0), device(1, model="NVIDIA-H100-80GB"), device(2, model="NVIDIA-T4")
    use, _, _ = pod_selectors({"nvidia.com/use-gputype": "a100, H100"})
    assert [selected(use, d) for d in (a100, h100, t4)] == [True, True, False]
    nouse, _, _ = pod_selectors({"nvidia.com/nouse-gputype": "t4"})
    assert [selected(nouse, d) for d in (a100, h100, t4)] == [True, True, False]


def test_type_selectors_take_regex_characters_literally() -> None:
    odd = device(0, model="NVIDIA-A100.(x)+")
    plain = device(1, model="NVIDIA-A100-x")
    sel, _, _ = pod_selectors({"nvidia.com/use-gputype": "A100.(x)+"})
    assert selected(sel, odd)
    assert not selected(sel, plain)


def test_uuid_selectors_match_exactly() -> None:
    devs = [device(i, uuid=f"GPU-{i}") for i in range(3)]
    use, _, _ = pod_selectors({"nvidia.com/use-gpuuuid": "GPU-0,GPU-2"})
    assert [selected(use, d) for d in devs] == [True, False, True]
    nouse, _, _ = pod_selectors({"nvidia.com/nouse-gpuuuid": "GPU-0"})
    assert [selected(nouse, d) for d in devs] == [False, True, True]


def test_selectors_land_in_the_claim_and_numa_bind_in_a_constraint() -> None:
    annotations = {"nvidia.com/use-gputype": "A100", "nvidia.com/numa-bind": "true"}
    decision, _ = admit(pod(container(limits=gpu(2, mem=1024)), annotations=annotations))
    spec = claim_spec(decision)
    selectors = spec["devices"]["requests"][0]["exactly"]["selectors"]
    assert [s["cel"]["expression"] for s in selectors] == [
        'device.attributes["gpu.hami.io"].model.matches("(?i)(?:A100)")'
    ]
    assert spec["devices"]["constraints"] == [
        {"requests": ["gpu"], "matchAttribute": "gpu.hami.io/numa"}
    ]


def test_placement_annotations_are_warned_about() -> None:
    annotations = {
        "hami.io/gpu-scheduler-policy": "binpack",
        "hami.io/node-scheduler-policy": "spread",
        "hami.io/device-scoring-weights": "nonsense",
        "nvidia.com/numa-bind": "maybe",
    }
    decision, _ = admit(pod(container(limits=gpu(1)), annotations=annotations))
    assert decision.outcome == "mutated"
    text = "\n".join(decision.warnings)
    for key in (*list(annotations)[:3], "nvidia.com/numa-bind='maybe'"):
        assert key in text
    assert len(decision.warnings) == 4


def test_cel_strings_escape_quotes_and_backslashes() -> None:
    assert cel_string('a"b\\c') == '"a\\"b\\\\c"'
    assert cel_string("x\ny") == '"x\\x0ay"'


def test_convert_pod_reports_the_converted_containers() -> None:
    spec = pod(container("a", limits=gpu(1)), container("b"))["spec"]
    conversion = convert_pod(spec, namespace="ns", annotations={}, vendor=NVIDIA)
    assert conversion.containers == ("a",)
    assert conversion.templates[0].namespace == "ns"


def test_overwrite_env_spares_containers_using_claims() -> None:
    # HAMi's overwriteEnv hides GPUs from containers that ask none; a container listing a claim
    # gets its GPUs (and NVIDIA_VISIBLE_DEVICES) from the DRA driver's CDI spec instead.
    config = replace(NvidiaConfig(), overwrite_env=True)
    rules = MutationRules(nvidia=config, vendors=(nvidia_vendor(config), *DEFAULT_VENDORS[1:]))
    claimed = container("claimed")
    claimed["resources"] = {"claims": [{"name": "gpu"}]}
    obj = pod(
        claimed, container("plain"), resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}]
    )
    decision = admit_pod(obj, namespace="team", rules=rules)
    result = jsonpatch.apply_patch(obj, list(decision.patch))
    assert "env" not in result["spec"]["containers"][0]
    assert result["spec"]["containers"][1]["env"] == [
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
    ]
