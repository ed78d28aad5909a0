"""Extender JSON: PascalCase out, case-insensitive in, filter/priority/bind interpretation."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.scheduler.config import ExtenderConfig, ManagedResource
from hami_kubesim.scheduler.extender_wire import (
    ExtenderError,
    binding_args,
    extender_args,
    parse_binding_result,
    parse_filter_result,
    parse_host_priorities,
    parse_preemption_result,
    preemption_args,
)

URL = "http://ext/scheduler"
POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1"}, "spec": {"containers": []}}
NODES = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}, {"metadata": {"name": "c"}}]


def test_args_node_cache_capable_sends_names_only() -> None:
    args = extender_args(POD, NODES, node_cache_capable=True)
    assert json.loads(json.dumps(args)) == {"Pod": POD, "Nodes": None, "NodeNames": ["a", "b", "c"]}


def test_args_not_cache_capable_sends_a_node_list() -> None:
    args = extender_args(POD, NODES, node_cache_capable=False)
    assert args == {"Pod": POD, "Nodes": {"metadata": {}, "items": NODES}, "NodeNames": None}


def test_binding_args() -> None:
    assert binding_args(POD, "a") == {
        "PodName": "p",
        "PodNamespace": "ns",
        "PodUID": "u-1",
        "Node": "a",
    }


@pytest.mark.parametrize("case", [str, str.lower, str.upper])
def test_filter_reply_keys_are_case_insensitive(case: Any) -> None:
    reply = {
        case("NodeNames"): ["b"],
        case("FailedNodes"): {"a": "CardInsufficientMemory"},
        case("FailedAndUnresolvableNodes"): {"c": "NodeUnfitPod"},
        case("Error"): "",
    }
    outcome = parse_filter_result(reply, sent=["a", "b", "c"], node_cache_capable=True, url=URL)
    assert outcome.survivors == ("b",)
    assert outcome.reason_for("a") == "CardInsufficientMemory"
    assert outcome.reason_for("c") == "NodeUnfitPod"
    assert outcome.reason_for("b") is None


def test_filter_reply_nodes_list_form() -> None:
    reply = {"Nodes": {"metadata": {}, "items": [{"metadata": {"name": "c"}}]}, "NodeNames": None}
    outcome = parse_filter_result(reply, sent=["a", "b", "c"], node_cache_capable=False, url=URL)
    assert outcome.survivors == ("c",)
    # a cache-capable extender may still answer with Nodes
    outcome = parse_filter_result(reply, sent=["a", "c"], node_cache_capable=True, url=URL)
    assert outcome.survivors == ("c",)


def test_filter_reply_with_neither_list_keeps_no_node() -> None:
    outcome = parse_filter_result(
        {"Nodes": None, "NodeNames": None}, sent=["a"], node_cache_capable=True, url=URL
    )
    assert outcome.survivors == ()


def test_unresolvable_reason_wins() -> None:
    reply = {
        "NodeNames": [],
        "FailedNodes": {"a": "soft"},
        "FailedAndUnresolvableNodes": {"a": "hard"},
    }
    outcome = parse_filter_result(reply, sent=["a"], node_cache_capable=True, url=URL)
    assert outcome.reason_for("a") == "hard"


def test_filter_error_field_fails_the_call() -> None:
    with pytest.raises(ExtenderError, match="no GPU today"):
        parse_filter_result({"Error": "no GPU today"}, sent=["a"], node_cache_capable=True, url=URL)


def test_filter_reply_naming_an_unsent_node_is_an_error() -> None:
    with pytest.raises(ExtenderError) as info:
        parse_filter_result({"NodeNames": ["zzz"]}, sent=["a"], node_cache_capable=True, url=URL)
    assert str(info.value) == (
        f'extender "{URL}" claims a filtered node "zzz" which is not found in the input node list'
    )


@pytest.mark.parametrize(
    "reply",
    [
        [],
        "x",
        {"NodeNames": "a"},
        {"NodeNames": [1]},
        {"Nodes": []},
        {"Nodes": {"items": [{}]}},
        {"FailedNodes": []},
    ],
)
def test_malformed_filter_replies(reply: Any) -> None:
    with pytest.raises(ExtenderError):
        parse_filter_result(reply, sent=["a"], node_cache_capable=True, url=URL)


def test_host_priorities() -> None:
    assert parse_host_priorities([{"Host": "a", "Score": 7}, {"host": "b", "score": 0}], URL) == {
        "a": 7,
        "b": 0,
    }
    assert parse_host_priorities(None, URL) == {}
    for bad in (
        {"Host": "a"},
        [{"Host": "a", "Score": "7"}],
        [{"Score": 1}],
        [{"Host": "a", "Score": True}],
    ):
        with pytest.raises(ExtenderError):
            parse_host_priorities(bad, URL)


def test_binding_result() -> None:
    parse_binding_result({"Error": ""}, URL)
    parse_binding_result({}, URL)
    with pytest.raises(ExtenderError, match="node lock"):
        parse_binding_result({"error": "node lock held"}, URL)


def test_is_interested() -> None:
    plain = ExtenderConfig(url_prefix=URL)
    managed = ExtenderConfig(url_prefix=URL, managed_resources=(ManagedResource("nvidia.com/gpu"),))
    gpu_pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    init_gpu_pod = {
        "spec": {
            "containers": [{}],
            "initContainers": [{"resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        }
    }
    cpu_pod = {"spec": {"containers": [{"resources": {"limits": {"cpu": "1"}}}]}}
    assert plain.is_interested(cpu_pod)
    assert managed.is_interested(gpu_pod)
    assert managed.is_interested(init_gpu_pod)
    assert not managed.is_interested(cpu_pod)
    assert not managed.is_interested({})


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=10,
    )
)
def test_garbage_replies_raise_only_extender_error(reply: Any) -> None:
    for parse in (
        lambda: parse_filter_result(reply, sent=["a"], node_cache_capable=True, url=URL),
        lambda: parse_filter_result(reply, sent=["a"], node_cache_capable=False, url=URL),
        lambda: parse_host_priorities(reply, URL),
        lambda: parse_binding_result(reply, URL),
    ):
        with contextlib.suppress(ExtenderError):
            parse()


# -- the preempt verb ------------------------------------------------------------------------

VICTIM = {"metadata": {"name": "v", "namespace": "ns", "uid": "u-v"}, "spec": {}}


def test_preemption_args_meta_form_when_node_cache_capable() -> None:
    args = preemption_args(POD, {"a": ([VICTIM], 1), "b": ([], 0)}, node_cache_capable=True)
    assert json.loads(json.dumps(args)) == {
        "Pod": POD,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            "a": {"Pods": [{"UID": "u-v"}], "NumPDBViolations": 1},
            "b": {"Pods": [], "NumPDBViolations": 0},
        },
    }


def test_preemption_args_full_pods_otherwise() -> None:
    args = preemption_args(POD, {"a": ([VICTIM], 0), "b": ([], 0)}, node_cache_capable=False)
    assert args["NodeNameToMetaVictims"] is None
    assert args["NodeNameToVictims"] == {
        "a": {"Pods": [VICTIM], "NumPDBViolations": 0},
        "b": {"Pods": None, "NumPDBViolations": 0},  # a nil slice, as Go marshals it
    }


def test_preemption_result_is_read_case_insensitively() -> None:
    body = {"nodeNameToMetaVictims": {"a": {"pods": [{"uid": "u-v"}], "numPDBViolations": 2}}}
    ((node, meta),) = parse_preemption_result(body, URL).items()
    assert (node, meta.uids, meta.num_pdb_violations) == ("a", ("u-v",), 2)
    assert parse_preemption_result({"NodeNameToMetaVictims": None}, URL) == {}
    assert parse_preemption_result(None, URL) == {}
    assert parse_preemption_result({"NodeNameToMetaVictims": {"a": None}}, URL)["a"].uids == ()


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"NodeNameToMetaVictims": []},
        {"NodeNameToMetaVictims": {"a": {"Pods": [{"Name": "x"}]}}},
        {"NodeNameToMetaVictims": {"a": {"Pods": {}, "NumPDBViolations": 0}}},
        {"NodeNameToMetaVictims": {"a": {"Pods": [], "NumPDBViolations": "1"}}},
    ],
)
def test_malformed_preemption_results_are_errors(body: Any) -> None:
    with pytest.raises(ExtenderError):
        parse_preemption_result(body, URL)
