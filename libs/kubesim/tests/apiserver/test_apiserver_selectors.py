"""Label and field selectors: parsing tables from the API conventions, and garbage in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.apiserver.errors import BadRequestError, StatusError
from hami_kubesim.apiserver.selectors import (
    field_value,
    label_selector_from_query,
    parse_field_selector,
)
from hami_kubesim.objects.resources import NODES, PODS

LABELS = {"app": "web", "tier": "gpu", "n": "5"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app=web", True),
        ("app==web", True),
        ("app!=web", False),
        ("missing!=x", True),
        ("app in (web, api)", True),
        ("app in (api)", False),
        ("app notin (api,db)", True),
        ("missing notin (x)", True),
        ("app", True),
        ("!app", False),
        ("!missing", True),
        ("app=web,tier=gpu", True),
        ("app=web,tier=cpu", False),
        (" app = web , tier in (gpu) ", True),
        ("n>3", True),
        ("n<3", False),
        ("app=", False),
        ("example.com/key", False),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert label_selector_from_query(selector).matches(LABELS) is matches


@pytest.mark.parametrize(
    "selector", ["app in web", "app in (web", "=web", "app=web,", "a b", "app=(x)", "n>x", "app@=1"]
)
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(BadRequestError):
        label_selector_from_query(selector)


def test_label_selector_error_messages() -> None:
    with pytest.raises(BadRequestError, match=r"^unable to parse requirement: .*'app in web'\)$"):
        label_selector_from_query("app in web")
    with pytest.raises(BadRequestError, match=r"invalid label key.*: 'app@'"):
        label_selector_from_query("app@=1")


POD: dict[str, Any] = {
    "metadata": {"name": "p", "namespace": "ns"},
    "spec": {"nodeName": "n1", "hostNetwork": True},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("spec.nodeName=n1", True),
        ("spec.nodeName==n1", True),
        ("spec.nodeName!=n1", False),
        ("spec.nodeName=", False),
        ("metadata.name=p,metadata.namespace=ns", True),
        ("status.phase!=Succeeded,status.phase!=Failed", True),
        ("status.phase=Pending", False),
        ("spec.hostNetwork=true", True),
        ("status.nominatedNodeName=", True),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert parse_field_selector(selector, PODS.field_labels).matches(POD) is matches


def test_field_selector_escapes_and_exact() -> None:
    sel = parse_field_selector(r"metadata.name=a\,b\=c", NODES.field_labels)
    assert sel.matches({"metadata": {"name": "a,b=c"}})
    assert (
        parse_field_selector("spec.nodeName=n1,status.phase!=x", PODS.field_labels).exact(
            "spec.nodeName"
        )
        == "n1"
    )
    assert (
        parse_field_selector("spec.nodeName!=n1", PODS.field_labels).exact("spec.nodeName") is None
    )


def test_unsupported_field_label() -> None:
    with pytest.raises(BadRequestError, match=r"field label not supported: spec\.foo"):
        parse_field_selector("spec.foo=1", PODS.field_labels)


def test_field_value_absent_is_empty() -> None:
    assert field_value({"spec": {}}, "spec.nodeName") == ""
    assert field_value({"spec": {"unschedulable": False}}, "spec.unschedulable") == "false"


def error_code(call: Callable[[], object]) -> int | None:
    """The API error code ``call`` raises, or ``None``; any other exception escapes."""
    try:
        call()
    except StatusError as err:
        return err.code
    return None


@given(st.text(max_size=40))
def test_garbage_label_selectors_only_raise_api_errors(text: str) -> None:
    assert error_code(lambda: label_selector_from_query(text).matches(LABELS)) in (None, 400)


@given(st.text(max_size=40))
def test_garbage_field_selectors_only_raise_api_errors(text: str) -> None:
    code = error_code(lambda: parse_field_selector(text, PODS.field_labels).matches(POD))
    assert code in (None, 400)


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", ""]), max_size=3)
)
def test_equality_selector_agrees_with_dict_semantics(labels: dict[str, str]) -> None:
    assert label_selector_from_query("a=x").matches(labels) == (labels.get("a") == "x")
    assert label_selector_from_query("a!=x").matches(labels) == (labels.get("a") != "x")
    assert label_selector_from_query("!b").matches(labels) == ("b" not in labels)
