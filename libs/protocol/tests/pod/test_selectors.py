"""Label selectors: JSON and string forms, API-server validation, Kubernetes match semantics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.errors import DecodeError, ProtocolError, ValidationError
from hami_protocol.selectors import (
    EVERYTHING,
    LabelSelector,
    Operator,
    Requirement,
    format_selector,
    label_key_problem,
    label_value_problem,
    matches,
    parse_label_selector,
    parse_selector_string,
    requirement,
)

ANNOTATION = "scheduling.koordinator.sh/device-allocate-hint"


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


# --- match semantics -----------------------------------------------------------------------------
MATCH_TABLE: list[tuple[dict[str, Any], dict[str, str], bool]] = [
    ({}, {}, True),
    ({}, {"a": "b"}, True),
    ({"matchLabels": {}, "matchExpressions": []}, {"x": "y"}, True),
    ({"matchLabels": None, "matchExpressions": None}, {}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "b"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True),
    ({"matchLabels": {"a": "b"}}, {"a": "c"}, False),
    ({"matchLabels": {"a": "b"}}, {}, False),
    ({"matchLabels": {"a": ""}}, {"a": ""}, True),
    ({"matchLabels": {"a": ""}}, {}, False),
    ({"matchExpressions": [expr("a", "In", "x", "y")]}, {"a": "y"}, True),
    ({"matchExpressions": [expr("a", "In", "x", "y")]}, {"a": "z"}, False),
    ({"matchExpressions": [expr("a", "In", "x", "y")]}, {}, False),
    ({"matchExpressions": [expr("a", "NotIn", "x")]}, {"a": "x"}, False),
    ({"matchExpressions": [expr("a", "NotIn", "x")]}, {"a": "y"}, True),
    # NotIn holds when the key is missing (Kubernetes semantics).
    ({"matchExpressions": [expr("a", "NotIn", "x")]}, {}, True),
    ({"matchExpressions": [expr("a", "Exists")]}, {"a": ""}, True),
    ({"matchExpressions": [expr("a", "Exists")]}, {"b": "a"}, False),
    ({"matchExpressions": [expr("a", "DoesNotExist")]}, {"a": "x"}, False),
    ({"matchExpressions": [expr("a", "DoesNotExist")]}, {}, True),
    (
        {
            "matchExpressions": [
                expr(
                    "a",
                    "DoesNotExist",
                )
            ],
            "matchLabels": {"b": "c"},
        },
        {"b": "c"},
        True,
    ),
    # All requirements must hold.
    (
        {"matchLabels": {"type": "fakeW"}, "matchExpressions": [expr("zone", "In", "a")]},
        {"type": "fakeW", "zone": "b"},
        False,
    ),
    # A20: isGDR NotIn [false] matches a VF group without the isGDR label.
    (
        {"matchExpressions": [expr("type", "In", "vf_cpu"), expr("isGDR", "NotIn", "false")]},
        {"type": "vf_cpu"},
        True,
    ),
    (
        {"matchExpressions": [expr("type", "In", "vf_cpu"), expr("isGDR", "NotIn", "false")]},
        {"type": "vf_cpu", "isGDR": "false"},
        False,
    ),
    # Contradictory requirements select nothing.
    ({"matchLabels": {"a": "b"}, "matchExpressions": [expr("a", "In", "c")]}, {"a": "b"}, False),
]


@pytest.mark.parametrize(("doc", "labels", "expected"), MATCH_TABLE)
def test_json_selector_semantics(
    doc: dict[str, Any], labels: dict[str, str], expected: bool
) -> None:
    selector = parse_label_selector(doc, annotation=ANNOTATION)
    assert matches(selector, labels) is expected
    assert selector.matches(labels) is expected


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("", {"a": "b"}, True),
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a!=b", {"a": "b"}, False),
        ("a in (x,y)", {"a": "x"}, True),
        ("f notin (z)", {}, True),
        ("g", {"g": ""}, True),
        ("!h", {"h": "1"}, False),
        ("x>5", {"x": "6"}, True),
        ("x>5", {"x": "5"}, False),
        ("x>5", {"x": "six"}, False),
        ("x>5", {}, False),
        ("x<5", {"x": "-7"}, True),
        ("a=", {"a": ""}, True),
        ("a=", {}, False),
    ],
)
def test_string_selector_semantics(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse_selector_string(text).matches(labels) is expected


def test_empty_selector_is_everything() -> None:
    assert parse_label_selector({}) == EVERYTHING
    assert parse_selector_string("") == EVERYTHING
    assert parse_selector_string("  \t ") == EVERYTHING
    assert EVERYTHING.is_everything
    assert not parse_selector_string("a").is_everything


# --- the string form -----------------------------------------------------------------------------
def test_string_form_of_the_brief_example() -> None:
    selector = parse_selector_string("a=b,c!=d,e in (x,y),f notin (z),g,!h")
    assert selector.requirements == (
        Requirement("a", Operator.IN, ("b",)),
        Requirement("c", Operator.NOT_IN, ("d",)),
        Requirement("e", Operator.IN, ("x", "y")),
        Requirement("f", Operator.NOT_IN, ("z",)),
        Requirement("g", Operator.EXISTS),
        Requirement("h", Operator.DOES_NOT_EXIST),
    )
    assert format_selector(selector) == "a=b,c!=d,e in (x,y),f!=z,g,!h"


@pytest.mark.parametrize(
    ("text", "doc"),
    [
        ("type=fakeW", {"matchLabels": {"type": "fakeW"}}),
        (
            "type in (fakeG, general)",
            {"matchExpressions": [expr("type", "In", "general", "fakeG")]},
        ),
        ("b=1, a=2", {"matchLabels": {"a": "2", "b": "1"}}),
        ("a notin (x),a notin (x)", {"matchExpressions": [expr("a", "NotIn", "x")]}),
        ("!a,b", {"matchExpressions": [expr("b", "Exists"), expr("a", "DoesNotExist")]}),
        ("example.com/gpu-model=A100", {"matchLabels": {"example.com/gpu-model": "A100"}}),
        ("a in (,x,)", {"matchExpressions": [expr("a", "In", "", "x")]}),
        ("a in ()", {"matchLabels": {"a": ""}}),
        ("a=in", {"matchLabels": {"a": "in"}}),
    ],
)
def test_string_and_json_forms_agree(text: str, doc: dict[str, Any]) -> None:
    assert parse_selector_string(text) == parse_label_selector(doc)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("a,", DecodeError),
        (",a", DecodeError),
        ("a b", DecodeError),
        ("!a=b", DecodeError),
        ("!", DecodeError),
        ("a in x", DecodeError),
        ("a in (b c)", DecodeError),
        ("a in (b", DecodeError),
        ("a=b=c", DecodeError),
        ("a=(", DecodeError),
        ("in=b", DecodeError),
        ("a,,b", DecodeError),
        ("a>x", ValidationError),
        ("a<", ValidationError),
        ("a>1,a>2 3", DecodeError),
        ("-a", ValidationError),
        ("A.com/b=c", ValidationError),
        ("a/b/c", ValidationError),
        ("a=b c", DecodeError),
        ("a=-b", ValidationError),
        ("a=" + "x" * 64, ValidationError),
        ("a\x0b=b", ValidationError),
    ],
)
def test_string_form_errors(text: str, error: type[ProtocolError]) -> None:
    with pytest.raises(error) as info:
        parse_selector_string(text, annotation="--node-label-selector")
    assert info.value.key == "--node-label-selector"
    assert "--node-label-selector" in str(info.value)


# --- validation of the JSON form ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("doc", "error", "fragment"),
    [
        ({"matchExpressions": [expr("a", "In")]}, ValidationError, "needs values"),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]},
            ValidationError,
            "needs values",
        ),
        ({"matchExpressions": [expr("a", "Exists", "x")]}, ValidationError, "takes no values"),
        (
            {"matchExpressions": [expr("a", "DoesNotExist", "x")]},
            ValidationError,
            "takes no values",
        ),
        ({"matchExpressions": [expr("a", "in", "x")]}, ValidationError, "operator must be one of"),
        ({"matchExpressions": [expr("a", "Gt", "1")]}, ValidationError, "operator must be one of"),
        (
            {"matchExpressions": [expr("a", "Equals", "x")]},
            ValidationError,
            "operator must be one of",
        ),
        ({"matchLabels": {"-a": "b"}}, ValidationError, "invalid label key"),
        ({"matchLabels": {"a/b/c": "b"}}, ValidationError, "at most one '/'"),
        ({"matchLabels": {"/b": "b"}}, ValidationError, "prefix part must be non-empty"),
        ({"matchLabels": {"Example.com/b": "b"}}, ValidationError, "DNS subdomain"),
        ({"matchLabels": {"x" * 64: "b"}}, ValidationError, "at most 63"),
        ({"matchLabels": {"": "b"}}, ValidationError, "non-empty"),
        ({"matchLabels": {"a": "x" * 64}}, ValidationError, "label value"),
        ({"matchLabels": {"a": "b c"}}, ValidationError, "label value"),
        (
            {"matchLabels": {"a": "b"}, "matchlabels": {}},
            ValidationError,
            "did you mean 'matchLabels'",
        ),
        ({"labels": {}}, ValidationError, "unknown field 'labels'"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "value": ["x"]}]},
            ValidationError,
            "'value'",
        ),
        ({"matchLabels": {"a": 1}}, DecodeError, "must be a string"),
        ({"matchLabels": ["a"]}, DecodeError, "must be an object"),
        ({"matchExpressions": {"key": "a"}}, DecodeError, "must be a list"),
        ({"matchExpressions": ["a"]}, DecodeError, "must be an object"),
        ({"matchExpressions": [{"operator": "Exists"}]}, DecodeError, ".key must be a string"),
        ({"matchExpressions": [{"key": "a"}]}, DecodeError, ".operator must be a string"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            DecodeError,
            "list of strings",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]},
            DecodeError,
            "list of strings",
        ),
    ],
)
def test_json_form_validation(
    doc: dict[str, Any], error: type[ProtocolError], fragment: str
) -> None:
    with pytest.raises(error) as info:
        parse_label_selector(doc, annotation=ANNOTATION, path="rdma.selector")
    assert fragment in str(info.value)
    assert info.value.key == ANNOTATION


@pytest.mark.parametrize("doc", [None, [], "type=fakeW", 3])
def test_json_selector_must_be_an_object(doc: object) -> None:
    with pytest.raises(DecodeError, match=r"rdma\.vfSelector"):
        parse_label_selector(doc, annotation=ANNOTATION, path="rdma.vfSelector")


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("a", True),
        ("A_b.c-9", True),
        ("example.com/x", True),
        ("kubernetes.io/metadata.name", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("x" * 253 + "/a", True),
        ("x" * 254 + "/a", False),
        ("a_", False),
        ("_a", False),
        ("a..b/c", False),
        ("ex_ample.com/x", False),
        ("é", False),
    ],
)
def test_label_key_rules(key: str, ok: bool) -> None:
    assert (label_key_problem(key) is None) is ok


@pytest.mark.parametrize(
    ("value", "ok"), [("", True), ("a", True), ("a.b_c-d", True), ("-a", False), ("a b", False)]
)
def test_label_value_rules(value: str, ok: bool) -> None:
    assert (label_value_problem(value) is None) is ok


def test_requirement_builder_sorts_and_dedupes_values() -> None:
    assert requirement("a", Operator.IN, ["y", "x", "y"]).values == ("x", "y")


def test_selector_is_hashable_and_canonical() -> None:
    one = parse_selector_string("b=1,a in (y,x)")
    two = parse_selector_string("a in (x,y), b==1")
    assert one == two
    assert hash(one) == hash(two)


# --- properties ----------------------------------------------------------------------------------
_NAMES = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?", fullmatch=True)
_PREFIXES = st.from_regex(
    r"[a-z0-9]([-a-z0-9]{0,6}[a-z0-9])?(\.[a-z0-9]{1,4}){0,2}", fullmatch=True
)
_KEYS = st.builds(
    lambda prefix, name: f"{prefix}/{name}" if prefix else name,
    st.one_of(st.just(""), _PREFIXES),
    _NAMES,
).filter(lambda key: key not in ("in", "notin"))
_VALUES = st.one_of(st.just(""), _NAMES)

_REQUIREMENTS: st.SearchStrategy[tuple[str, Operator, list[str]]] = st.one_of(
    st.tuples(
        _KEYS,
        st.sampled_from([Operator.IN, Operator.NOT_IN]),
        st.lists(_VALUES, min_size=1, max_size=3),
    ),
    st.tuples(_KEYS, st.sampled_from([Operator.EXISTS, Operator.DOES_NOT_EXIST]), st.just([])),
)
_JSON_OP = {
    Operator.IN: "In",
    Operator.NOT_IN: "NotIn",
    Operator.EXISTS: "Exists",
    Operator.DOES_NOT_EXIST: "DoesNotExist",
}


def _spell(draw: st.DrawFn, key: str, op: Operator, values: list[str]) -> str:
    pad = draw(st.sampled_from(["", " ", "  "]))
    if op is Operator.EXISTS:
        return f"{pad}{key}{pad}"
    if op is Operator.DOES_NOT_EXIST:
        return f"!{pad}{key}"
    distinct = sorted(set(values))
    if len(distinct) == 1 and draw(st.booleans()):
        symbol = draw(st.sampled_from(["=", "=="])) if op is Operator.IN else "!="
        return f"{key}{pad}{symbol}{pad}{distinct[0]}"
    word = "in" if op is Operator.IN else "notin"
    return f"{key} {word}{pad}({pad}{f'{pad},{pad}'.join(values)}{pad})"


@st.composite
def _both_forms(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    reqs = draw(st.lists(_REQUIREMENTS, max_size=5))
    match_labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for key, op, values in reqs:
        single = op is Operator.IN and len(set(values)) == 1
        if single and key not in match_labels and draw(st.booleans()):
            match_labels[key] = values[0]
        else:
            expressions.append({"key": key, "operator": _JSON_OP[op], "values": values})
    doc: dict[str, Any] = {}
    keep_empty_labels: bool = draw(st.booleans())
    keep_empty_expressions: bool = draw(st.booleans())
    if match_labels or keep_empty_labels:
        doc["matchLabels"] = match_labels
    if expressions or keep_empty_expressions:
        doc["matchExpressions"] = expressions
    text = ",".join(_spell(draw, key, op, values) for key, op, values in reqs)
    return text, doc


@given(_both_forms(), st.dictionaries(_KEYS, _VALUES, max_size=4))
def test_string_and_json_forms_agree_on_generated_selectors(
    forms: tuple[str, dict[str, Any]], labels: dict[str, str]
) -> None:
    text, doc = forms
    from_text = parse_selector_string(text)
    from_json = parse_label_selector(doc)
    assert from_text == from_json
    assert from_text.matches(labels) == from_json.matches(labels)
    assert parse_selector_string(format_selector(from_text)) == from_text


@given(st.dictionaries(_KEYS, _VALUES, max_size=5))
def test_match_labels_select_their_own_labels(labels: dict[str, str]) -> None:
    selector = parse_label_selector({"matchLabels": labels})
    assert selector.matches(labels)
    assert selector.matches({**labels, "zz-extra": "1"})
    assert EVERYTHING.matches(labels)
    if labels:
        key = next(iter(labels))
        assert not selector.matches({k: v for k, v in labels.items() if k != key})


@given(st.text(max_size=60))
def test_any_text_gives_a_selector_or_a_protocol_error(text: str) -> None:
    try:
        selector = parse_selector_string(text)
    except ProtocolError:
        return
    assert isinstance(selector, LabelSelector)
    assert parse_selector_string(format_selector(selector)) == selector


@given(st.text(alphabet="ab=!(),<> in\tnot5-_./", max_size=40))
def test_selector_syntax_soup_gives_a_selector_or_a_protocol_error(text: str) -> None:
    try:
        selector = parse_selector_string(text)
    except ProtocolError:
        return
    assert parse_selector_string(format_selector(selector)) == selector


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_SELECTORISH = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(st.one_of(_KEYS, st.text(max_size=5)), _JSON, max_size=2),
        "matchExpressions": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "key": st.one_of(_KEYS, _JSON),
                    "operator": st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "in", 1]),
                    "values": st.one_of(st.lists(_VALUES, max_size=2), _JSON),
                },
            ),
            max_size=2,
        ),
    },
)


@given(st.one_of(_JSON, _SELECTORISH))
def test_any_json_gives_a_selector_or_a_protocol_error(doc: object) -> None:
    error_key = None
    try:
        selector = parse_label_selector(json.loads(json.dumps(doc)), annotation=ANNOTATION)
    except ProtocolError as exc:
        error_key = exc.key
    if error_key is not None:
        assert error_key == ANNOTATION
        return
    assert isinstance(selector, LabelSelector)
