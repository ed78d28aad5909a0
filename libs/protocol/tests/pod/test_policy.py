"""Pod policy annotations: policies, scoring weights, selectors, numa-bind, vgpu-mode, cordon."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.errors import ValidationError
from hami_protocol.pod.policy import (
    SPREAD,
    GpuPolicy,
    PodPolicy,
    ScoringWeights,
    SelectorKeys,
    mode_allowed,
    parse_device_cordon,
    parse_gpu_policy,
    parse_list,
    parse_pod_policy,
    parse_scoring_weights,
    type_allowed,
    uuid_allowed,
)


def test_no_annotations_gives_defaults() -> None:
    assert parse_pod_policy({}) == PodPolicy()
    policy = parse_pod_policy(
        {}, default_node_policy="spread", default_gpu_policy=GpuPolicy(("binpack",))
    )
    assert (policy.node_policy, policy.gpu_policy.text) == ("spread", "binpack")


@pytest.mark.parametrize(
    ("value", "expected", "warned"),
    [
        ("spread", "spread", False),
        (" spread ", "spread", False),
        ("binpack", "binpack", False),
        ("Spread", "binpack", True),
        ("foo", "binpack", True),
        ("", "binpack", True),
    ],
)
def test_node_policy(value: str, expected: str, warned: bool) -> None:
    policy = parse_pod_policy({keys.NODE_SCHEDULER_POLICY: value})
    assert policy.node_policy == expected
    assert bool(policy.warnings) is warned


@pytest.mark.parametrize(
    ("value", "entries", "sort_keys", "mutex", "topology"),
    [
        ("binpack", ("binpack",), ("binpack",), False, False),
        ("binpack, numa", ("binpack", "numa"), ("binpack", "numa"), False, False),
        (" spread ,  mutex ", ("spread", "mutex"), ("spread",), True, False),
        ("topology-aware", ("topology-aware",), (), False, True),
        ("mutex,topology-aware", ("mutex", "topology-aware"), (), True, True),
        ("numa", ("numa",), ("numa",), False, False),
    ],
)
def test_gpu_policy_chains(
    value: str,
    entries: tuple[str, ...],
    sort_keys: tuple[str, ...],
    mutex: bool,
    topology: bool,
) -> None:
    policy = parse_pod_policy({keys.GPU_SCHEDULER_POLICY: value}).gpu_policy
    assert policy.entries == entries
    assert policy.sort_keys == sort_keys
    assert (policy.mutex, policy.topology_aware) == (mutex, topology)
    assert policy.text == ",".join(entries)


@pytest.mark.parametrize("value", ["binpakc", "", "   ", "Binpack", "binpack,nmua", "binpack,"])
def test_unrecognised_gpu_policy_keeps_the_default_with_a_warning(value: str) -> None:
    default = GpuPolicy(("binpack", "numa"))
    policy = parse_pod_policy({keys.GPU_SCHEDULER_POLICY: value}, default_gpu_policy=default)
    assert policy.gpu_policy == default
    assert len(policy.warnings) == 1
    assert keys.GPU_SCHEDULER_POLICY in policy.warnings[0]
    with pytest.raises(ValidationError):
        parse_gpu_policy(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("slot=1,core=1,memory=3", ScoringWeights(1, 1, 3)),
        (" memory = 0 , core=2, slot=0", ScoringWeights(0, 2, 0)),
        ("core=0,slot=+5,memory=0", ScoringWeights(5, 0, 0)),
    ],
)
def test_scoring_weights_valid(value: str, expected: ScoringWeights) -> None:
    assert parse_scoring_weights(value) == expected
    assert parse_pod_policy({keys.DEVICE_SCORING_WEIGHTS: value}).scoring_weights == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("slot=1,core=1", "expected slot, core and memory"),
        ("slot=1,core=1,memory=1,slot=1", "expected slot, core and memory"),
        ("", "expected slot, core and memory"),
        ("slot=1,slot=2,memory=1", "duplicate 'slot'"),
        ("slot=a,core=1,memory=1", "'slot' weight must be an integer"),
        ("slot=1.5,core=1,memory=1", "'slot' weight must be an integer"),
        ("slot=-1,core=1,memory=1", "must not be negative"),
        ("gpu=1,core=1,memory=1", "unknown weight 'gpu'"),
        ("slot=0,core=0,memory=0", "at least one weight must be positive"),
        ("slot1,core=1,memory=1", "key=value"),
    ],
)
def test_scoring_weights_invalid_fail_the_pod(value: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason) as caught:
        parse_pod_policy({keys.DEVICE_SCORING_WEIGHTS: value})
    assert keys.DEVICE_SCORING_WEIGHTS in str(caught.value)


@pytest.mark.parametrize(
    ("model", "use", "nouse", "allowed"),
    [
        ("NVIDIA-Tesla V100-PCIE-32GB", "v100", "", True),
        ("NVIDIA-Tesla V100-PCIE-32GB", "A30, V100", None, True),
        ("NVIDIA A30", "V100", None, False),
        ("NVIDIA A30", None, "a30", False),
        ("NVIDIA A30", "", "", True),
        ("NVIDIA A30", " , ", " ,", True),
        ("NVIDIA A30", "NVIDIA", "A3", False),
    ],
)
def test_type_selectors(model: str, use: str | None, nouse: str | None, allowed: bool) -> None:
    annotations = {
        k: v
        for k, v in ((keys.NVIDIA_USE_GPUTYPE, use), (keys.NVIDIA_NOUSE_GPUTYPE, nouse))
        if v is not None
    }
    policy = parse_pod_policy(annotations)
    assert policy.type_allowed(model) is allowed
    assert type_allowed(model, use=parse_list(use), nouse=parse_list(nouse)) is allowed


@pytest.mark.parametrize(
    ("uuid", "use", "nouse", "allowed"),
    [
        ("dev-0", "dev-0", None, True),
        ("dev-1", "dev-0", None, False),
        ("dev-0", None, "dev-0", False),
        ("dev-0", " dev-1 , dev-0 ", None, True),
        ("dev-0", "dev", None, False),
        ("dev-0", "", "", True),
    ],
)
def test_uuid_selectors(uuid: str, use: str | None, nouse: str | None, allowed: bool) -> None:
    annotations = {
        k: v
        for k, v in ((keys.NVIDIA_USE_GPUUUID, use), (keys.NVIDIA_NOUSE_GPUUUID, nouse))
        if v is not None
    }
    assert parse_pod_policy(annotations).uuid_allowed(uuid) is allowed
    assert uuid_allowed(uuid, use=parse_list(use), nouse=parse_list(nouse)) is allowed


@pytest.mark.parametrize(
    ("value", "expected", "warned"),
    [
        ("true", True, False),
        ("1", True, False),
        ("T", True, False),
        (" True ", True, False),
        ("false", False, False),
        ("yes", False, True),
    ],
)
def test_numa_bind(value: str, expected: bool, warned: bool) -> None:
    policy = parse_pod_policy({keys.NVIDIA_NUMA_BIND: value})
    assert policy.numa_bind is expected
    assert bool(policy.warnings) is warned


@pytest.mark.parametrize(
    ("annotation", "mode", "allowed"),
    [
        (None, "mig", True),
        ("hami-core,mig", "mig", True),
        ("hami-core", "mig", False),
        ("mig", "", True),
        ("", "hami-core", False),
    ],
)
def test_vgpu_mode(annotation: str | None, mode: str, allowed: bool) -> None:
    annotations = {} if annotation is None else {keys.NVIDIA_VGPU_MODE: annotation}
    assert parse_pod_policy(annotations).mode_allowed(mode) is allowed
    assert mode_allowed(mode, annotation) is allowed


def test_other_vendor_selector_keys() -> None:
    amd = SelectorKeys(
        use_type="amd.com/use-gputype",
        nouse_type="amd.com/nouse-gputype",
        use_uuid="amd.com/use-gpu-uuid",
        nouse_uuid="amd.com/nouse-gpu-uuid",
    )
    annotations = {"amd.com/use-gpu-uuid": "GPU-1", keys.NVIDIA_USE_GPUUUID: "GPU-2"}
    policy = parse_pod_policy(annotations, selector_keys=amd)
    assert policy.use_uuids == ("GPU-1",)
    assert policy.vgpu_mode is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("dev-1, ", frozenset({"dev-1"})),
        (" GPU-a ,GPU-b,,", frozenset({"GPU-a", "GPU-b"})),
        ("", frozenset()),
        (None, frozenset()),
    ],
)
def test_device_cordon(value: str | None, expected: frozenset[str]) -> None:
    assert parse_device_cordon(value) == expected


def test_spread_constant() -> None:
    assert SPREAD.sort_keys == ("spread",)


# --- properties -----------------------------------------------------------------------------------

POLICY_KEYS = [
    keys.NODE_SCHEDULER_POLICY,
    keys.GPU_SCHEDULER_POLICY,
    keys.NVIDIA_USE_GPUTYPE,
    keys.NVIDIA_NOUSE_GPUTYPE,
    keys.NVIDIA_USE_GPUUUID,
    keys.NVIDIA_NOUSE_GPUUUID,
    keys.NVIDIA_NUMA_BIND,
    keys.NVIDIA_VGPU_MODE,
]


@given(st.dictionaries(st.sampled_from(POLICY_KEYS), st.text(max_size=30)))
def test_arbitrary_non_weight_annotations_never_raise(annotations: dict[str, str]) -> None:
    policy = parse_pod_policy(annotations)
    assert set(policy.gpu_policy.entries) <= {
        "binpack",
        "spread",
        "topology-aware",
        "mutex",
        "numa",
    }
    assert all(item == item.strip() and item for item in policy.use_types + policy.nouse_uuids)


@given(st.text(max_size=40))
def test_arbitrary_weights_raise_only_validation_errors(value: str) -> None:
    try:
        weights = parse_scoring_weights(value)
    except ValidationError:
        return
    assert min(weights.slot, weights.core, weights.memory) >= 0
    assert max(weights.slot, weights.core, weights.memory) > 0


@given(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6)).filter(any),
    st.permutations(["slot", "core", "memory"]),
)
def test_weights_round_trip_in_any_order(numbers: tuple[int, int, int], order: list[str]) -> None:
    weights = ScoringWeights(*numbers)
    value = ",".join(f"{name}={getattr(weights, name)}" for name in order)
    assert parse_scoring_weights(value) == weights


@given(
    st.lists(st.sampled_from(["binpack", "spread", "topology-aware", "mutex", "numa"]), min_size=1)
)
def test_gpu_policy_text_round_trip(entries: list[str]) -> None:
    policy = parse_gpu_policy(" , ".join(entries))
    assert policy.entries == tuple(entries)
    assert parse_gpu_policy(policy.text) == policy
