"""kube-scheduler's in-tree filters, effective pod requests, FitError text and host choice."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kube.objects import NodeView, PodView
from hami_kubesim.scheduler.predicates import (
    RequestedOnNode,
    ResourceParseError,
    filter_node,
    matches_node_affinity,
    pod_requests,
    select_host,
    tolerates,
)
from hami_kubesim.scheduler.statuses import Code, NodeStatus, fit_error_message


def node(
    name: str = "n1",
    *,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {
            "allocatable": allocatable
            if allocatable is not None
            else {"cpu": "4", "memory": "8Gi", "pods": "110"}
        },
    }


def pod(
    requests: dict[str, str] | None = None,
    *,
    limits: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": resources}], **spec},
    }


def reasons(
    p: dict[str, Any], n: dict[str, Any], usage: RequestedOnNode | None = None, **kw: Any
) -> tuple[str, ...]:
    view = PodView(p)
    status = filter_node(view, pod_requests(view), NodeView(n), usage or RequestedOnNode(), **kw)
    return () if status is None else status.reasons


# -- requests ---------------------------------------------------------------------------------


def test_pod_requests_sum_containers_and_limit_fallback() -> None:
    p = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}},
                {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}},
            ]
        }
    }
    assert pod_requests(PodView(p)) == {"cpu": 1100, "memory": 2**30, "nvidia.com/gpu": 2}


def test_pod_requests_init_containers_take_the_max_and_sidecars_add() -> None:
    p = {
        "spec": {
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "2"}}},
                {
                    "name": "sidecar",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "500m"}},
                },
                {"name": "late-init", "resources": {"requests": {"cpu": "1"}}},
            ],
            "containers": [{"resources": {"requests": {"cpu": "1"}}}],
            "overhead": {"cpu": "100m"},
        }
    }
    # containers 1 + sidecar 0.5 = 1.5; init peak max(2, 0.5, 0.5 + 1) = 2 -> 2 + overhead 0.1
    assert pod_requests(PodView(p)) == {"cpu": 2100}


def test_pod_requests_rejects_bad_quantity() -> None:
    with pytest.raises(ResourceParseError) as info:
        pod_requests(PodView(pod({"cpu": "lots"})))
    assert info.value.value == "lots"
    assert "cpu" in info.value.where


# -- resources fit ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "usage", "expected"),
    [
        ({"cpu": "1"}, RequestedOnNode(), ()),
        ({"cpu": "5"}, RequestedOnNode(), ("Insufficient cpu",)),
        ({"cpu": "1", "memory": "9Gi"}, RequestedOnNode(), ("Insufficient memory",)),
        ({"cpu": "2"}, RequestedOnNode({"cpu": 3000}, 1), ("Insufficient cpu",)),
        (
            {"cpu": "5", "memory": "9Gi"},
            RequestedOnNode(),
            ("Insufficient cpu", "Insufficient memory"),
        ),
        ({"example.com/foo": "1"}, RequestedOnNode(), ("Insufficient example.com/foo",)),
        ({}, RequestedOnNode({}, 110), ("Too many pods",)),
    ],
)
def test_resources_fit(
    requests: dict[str, str], usage: RequestedOnNode, expected: tuple[str, ...]
) -> None:
    assert reasons(pod(requests), node(), usage) == expected


def test_ignored_resources_are_not_checked() -> None:
    p = pod(limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    assert reasons(p, node()) == ("Insufficient nvidia.com/gpu", "Insufficient nvidia.com/gpumem")
    assert (
        reasons(p, node(), ignored_resources=frozenset({"nvidia.com/gpu", "nvidia.com/gpumem"}))
        == ()
    )
    assert reasons(p, node(), ignored_resource_groups=frozenset({"nvidia.com"})) == ()


def test_native_resources_cannot_be_ignored() -> None:
    assert reasons(pod({"cpu": "8"}), node(), ignored_resources=frozenset({"cpu"})) == (
        "Insufficient cpu",
    )


def test_node_without_pods_allocatable_has_no_pod_limit() -> None:
    n = node(allocatable={"cpu": "1"})
    assert reasons(pod({"cpu": "1"}), n, RequestedOnNode({}, 500)) == ()


# -- unschedulable, taints, affinity ---------------------------------------------------------


def test_unschedulable_node() -> None:
    assert reasons(pod(), node(unschedulable=True)) == ("node(s) were unschedulable",)
    tolerating = pod(
        tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]
    )
    assert reasons(tolerating, node(unschedulable=True)) == ()


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (
            {"key": "k", "operator": "Equal", "value": "v"},
            {"key": "k", "value": "v", "effect": "NoSchedule"},
            True,
        ),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "other", "effect": "NoSchedule"}, False),
        (
            {"key": "k", "operator": "Exists"},
            {"key": "k", "value": "x", "effect": "NoExecute"},
            True,
        ),
        ({"operator": "Exists"}, {"key": "any", "value": "x", "effect": "NoSchedule"}, True),
        (
            {"key": "k", "operator": "Exists", "effect": "NoExecute"},
            {"key": "k", "effect": "NoSchedule"},
            False,
        ),
        (
            {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "k", "effect": "NoSchedule"},
            True,
        ),
        ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Bogus"}, {"key": "k", "effect": "NoSchedule"}, False),
    ],
)
def test_toleration_matching(
    toleration: dict[str, str], taint: dict[str, str], expected: bool
) -> None:
    assert tolerates([toleration], taint) is expected


def test_taints_filter_only_noschedule_and_noexecute() -> None:
    soft = node(taints=[{"key": "soft", "value": "1", "effect": "PreferNoSchedule"}])
    hard = node(taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    assert reasons(pod(), soft) == ()
    assert reasons(pod(), hard) == ("node(s) had untolerated taint {gpu: yes}",)
    tolerant = pod(tolerations=[{"key": "gpu", "operator": "Equal", "value": "yes"}])
    assert reasons(tolerant, hard) == ()


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def _expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodeSelector": {"gpu": "on"}}, True),
        ({"nodeSelector": {"gpu": "off"}}, False),
        ({"affinity": _affinity({"matchExpressions": [_expr("zone", "In", "a", "b")]})}, True),
        ({"affinity": _affinity({"matchExpressions": [_expr("zone", "In", "c")]})}, False),
        ({"affinity": _affinity({"matchExpressions": [_expr("zone", "NotIn", "c")]})}, True),
        ({"affinity": _affinity({"matchExpressions": [_expr("missing", "NotIn", "c")]})}, True),
        ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "Exists")]})}, True),
        ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "DoesNotExist")]})}, False),
        ({"affinity": _affinity({"matchExpressions": [_expr("cards", "Gt", "3")]})}, True),
        ({"affinity": _affinity({"matchExpressions": [_expr("cards", "Gt", "4")]})}, False),
        ({"affinity": _affinity({"matchExpressions": [_expr("cards", "Lt", "5")]})}, True),
        ({"affinity": _affinity({"matchExpressions": [_expr("zone", "Gt", "1")]})}, False),
        ({"affinity": _affinity({"matchFields": [_expr("metadata.name", "In", "n1")]})}, True),
        ({"affinity": _affinity({"matchFields": [_expr("metadata.name", "NotIn", "n1")]})}, False),
        # terms are ORed, expressions inside a term ANDed
        (
            {
                "affinity": _affinity(
                    {"matchExpressions": [_expr("zone", "In", "z")]},
                    {"matchExpressions": [_expr("zone", "In", "a"), _expr("gpu", "Exists")]},
                )
            },
            True,
        ),
        (
            {
                "affinity": _affinity(
                    {"matchExpressions": [_expr("zone", "In", "a"), _expr("gpu", "DoesNotExist")]}
                )
            },
            False,
        ),
        # a requirement kube-scheduler cannot parse makes its term select no node
        ({"affinity": _affinity({"matchExpressions": [_expr("zone", "Near", "a")]})}, False),
        ({"affinity": _affinity({"matchExpressions": [_expr("gpu", "NotIn")]})}, False),
        ({"affinity": _affinity({"matchExpressions": [_expr("-gpu", "DoesNotExist")]})}, False),
        ({"affinity": _affinity({})}, False),  # an empty term matches nothing
        ({"affinity": _affinity()}, False),  # no terms: nothing
        (
            {
                "nodeSelector": {"gpu": "off"},
                "affinity": _affinity({"matchExpressions": [_expr("zone", "In", "a")]}),
            },
            False,
        ),
    ],
)
def test_node_affinity(spec: dict[str, Any], expected: bool) -> None:
    n = node(labels={"gpu": "on", "zone": "a", "cards": "4"})
    p = pod(**spec)
    assert matches_node_affinity(PodView(p), NodeView(n)) is expected
    assert (reasons(p, n) == ()) is expected
    if not expected:
        assert reasons(p, n) == ("node(s) didn't match Pod's node affinity/selector",)


def test_filters_stop_at_the_first_rejection() -> None:
    n = node(unschedulable=True, taints=[{"key": "t", "effect": "NoSchedule"}])
    assert reasons(pod({"cpu": "99"}), n) == ("node(s) were unschedulable",)


# -- FitError and host selection -------------------------------------------------------------


def test_fit_error_message_matches_kube_scheduler() -> None:
    message = fit_error_message(
        3,
        {
            "a": ["CardInsufficientMemory"],
            "b": ["Insufficient cpu"],
            "c": ["Insufficient cpu"],
        },
    )
    assert message == "0/3 nodes are available: 1 CardInsufficientMemory, 2 Insufficient cpu."


def test_fit_error_counts_every_reason_of_a_node() -> None:
    message = fit_error_message(1, {"a": ["Insufficient cpu", "Insufficient memory"]})
    assert message == "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."
    assert fit_error_message(2, {}) == "0/2 nodes are available:"


def test_fit_error_with_absent_nodes_and_a_post_filter_message() -> None:
    # Preemption's own FitError: nodes without a dry-run status read "not helpful".
    inner = fit_error_message(
        3,
        {"a": NodeStatus(Code.UNRESOLVABLE, ("No preemption victims found for incoming pod",))},
        absent_reasons=("Preemption is not helpful for scheduling",),
    )
    assert inner == (
        "0/3 nodes are available: 1 No preemption victims found for incoming pod, "
        "2 Preemption is not helpful for scheduling."
    )
    outer = fit_error_message(1, {"a": ["Insufficient cpu"]}, post_filter="preemption: x")
    assert outer == "0/1 nodes are available: 1 Insufficient cpu. preemption: x."


def status_of(p: dict[str, Any], n: dict[str, Any], usage: RequestedOnNode) -> NodeStatus | None:
    view = PodView(p)
    return filter_node(view, pod_requests(view), NodeView(n), usage)


def test_filter_codes_tell_what_preemption_could_resolve() -> None:
    small = node(allocatable={"cpu": "4", "memory": "8Gi", "pods": "110"})
    busy = RequestedOnNode({"cpu": 3000}, 1)
    assert status_of(pod({"cpu": "2"}), small, busy) == NodeStatus(
        Code.UNSCHEDULABLE, ("Insufficient cpu",)
    )
    # more than the whole node: no victim can make room
    assert status_of(pod({"cpu": "2", "memory": "9Gi"}), small, busy) == NodeStatus(
        Code.UNRESOLVABLE, ("Insufficient cpu", "Insufficient memory")
    )
    assert status_of(pod({}), small, RequestedOnNode({}, 110)) == NodeStatus(
        Code.UNSCHEDULABLE, ("Too many pods",)
    )
    tainted = node(taints=[{"key": "t", "effect": "NoSchedule"}])
    status = status_of(pod({"cpu": "1"}), tainted, RequestedOnNode())
    assert status is not None
    assert status.code is Code.UNRESOLVABLE
    assert status_of(pod({"cpu": "1"}), node(unschedulable=True), RequestedOnNode()) == (
        NodeStatus(Code.UNRESOLVABLE, ("node(s) were unschedulable",))
    )


def test_select_host_highest_score_and_ties() -> None:
    assert select_host({"a": 1, "b": 5, "c": 3}) == "b"
    assert select_host({"b": 5, "a": 5, "c": 1}) == "a"
    picks = {select_host({"a": 5, "b": 5, "c": 1}, random.Random(seed)) for seed in range(40)}
    assert picks == {"a", "b"}
    with pytest.raises(ValueError, match="at least one"):
        select_host({})


@given(
    st.dictionaries(st.text("abcdef", min_size=1, max_size=3), st.integers(-100, 100), min_size=1),
    st.integers(0, 1000),
)
def test_select_host_always_returns_a_best_node(scores: dict[str, int], seed: int) -> None:
    host = select_host(scores, random.Random(seed))
    assert scores[host] == max(scores.values())
