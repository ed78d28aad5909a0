"""MutatingWebhookConfiguration parsing and the API server's matching rules."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.admission.match import (
    RequestAttributes,
    parse_configuration,
    webhooks_in_order,
)
from hami_protocol.errors import ConfigError

POD_CREATE = RequestAttributes(operation="CREATE", group="", version="v1", resource="pods")


def webhook(**overrides: Any) -> dict[str, Any]:
    hook: dict[str, Any] = {
        "name": "vgpu.example.com",
        "clientConfig": {"url": "https://127.0.0.1:9443/webhook"},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
            }
        ],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    hook.update(overrides)
    return hook


def config(name: str, *hooks: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "webhooks": list(hooks)}


def test_defaults() -> None:
    (hook,), errors = parse_configuration(config("c", webhook()))
    assert errors == []
    assert hook.failure_policy == "Fail"
    assert hook.timeout_seconds == 10
    assert hook.reinvocation_policy == "Never"
    assert hook.review_versions == ("v1",)
    assert hook.uid == "c/vgpu.example.com/0"
    assert hook.namespace_selector.matches({"anything": "x"})


def test_service_reference_and_ca_bundle() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\n"
    raw = webhook(
        clientConfig={
            "service": {"namespace": "kube-system", "name": "hami-scheduler", "path": "/webhook"},
            "caBundle": base64.b64encode(pem).decode(),
        }
    )
    (hook,), _ = parse_configuration(config("c", raw))
    assert hook.client_config.url is None
    assert hook.client_config.service is not None
    assert hook.client_config.service.port == 443
    assert hook.client_config.service.path == "/webhook"
    assert hook.client_config.ca_bundle == pem


@pytest.mark.parametrize(
    ("rule", "attrs", "expected"),
    [
        ({}, POD_CREATE, True),
        ({"operations": ["*"]}, POD_CREATE, True),
        ({"operations": ["UPDATE"]}, POD_CREATE, False),
        ({"apiGroups": ["*"]}, POD_CREATE, True),
        ({"apiGroups": ["apps"]}, POD_CREATE, False),
        ({"apiVersions": ["v2"]}, POD_CREATE, False),
        ({"resources": ["*"]}, POD_CREATE, True),
        ({"resources": ["*/*"]}, POD_CREATE, True),
        ({"resources": ["pods/*"]}, POD_CREATE, True),
        ({"resources": ["pods/status"]}, POD_CREATE, False),
        ({"resources": ["deployments", "pods"]}, POD_CREATE, True),
        ({"resources": ["*"]}, RequestAttributes("CREATE", "", "v1", "pods", "binding"), False),
        ({"resources": ["pods/*"]}, RequestAttributes("CREATE", "", "v1", "pods", "binding"), True),
        ({"scope": "Namespaced"}, POD_CREATE, True),
        ({"scope": "Cluster"}, POD_CREATE, False),
        ({"scope": "*"}, POD_CREATE, True),
    ],
)
def test_rules(rule: dict[str, Any], attrs: RequestAttributes, expected: bool) -> None:
    base = webhook()["rules"][0]
    (hook,), errors = parse_configuration(config("c", webhook(rules=[{**base, **rule}])))
    assert errors == []
    assert hook.matches_rules(attrs) is expected


def test_no_rules_never_match() -> None:
    (hook,), _ = parse_configuration(config("c", webhook(rules=[])))
    assert not hook.matches_rules(POD_CREATE)


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {}, True),
        ({}, {"a": "b"}, True),
        ({"matchLabels": {"a": "b"}}, {"a": "b", "c": "d"}, True),
        ({"matchLabels": {"a": "b"}}, {"a": "x"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["b", "c"]}]},
            {"a": "c"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}, {}, False),
        (
            {
                "matchExpressions": [
                    {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
                ]
            },
            {},
            True,
        ),
        (
            {
                "matchExpressions": [
                    {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
                ]
            },
            {"hami.io/webhook": "ignore"},
            False,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_label_selectors(selector: Any, labels: dict[str, str], expected: bool) -> None:
    (hook,), errors = parse_configuration(config("c", webhook(objectSelector=selector)))
    assert errors == []
    assert hook.matches_object({"metadata": {"labels": labels}}, None) is expected


def test_object_selector_matches_new_or_old() -> None:
    raw = webhook(objectSelector={"matchLabels": {"gpu": "yes"}})
    (hook,), _ = parse_configuration(config("c", raw))
    yes = {"metadata": {"labels": {"gpu": "yes"}}}
    no: dict[str, Any] = {"metadata": {}}
    assert hook.matches_object(yes, None)
    assert not hook.matches_object(no, None)
    assert hook.matches_object(no, yes)


def test_order_is_by_configuration_name_then_position() -> None:
    hooks, errors = webhooks_in_order(
        [
            config("zeta", webhook(name="z1.example.com")),
            config("alpha", webhook(name="a1.example.com"), webhook(name="a2.example.com")),
        ]
    )
    assert errors == []
    assert [h.name for h in hooks] == ["a1.example.com", "a2.example.com", "z1.example.com"]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"failurePolicy": "Sometimes"}, "failurePolicy"),
        ({"reinvocationPolicy": "Always"}, "reinvocationPolicy"),
        ({"timeoutSeconds": 31}, "timeoutSeconds"),
        ({"timeoutSeconds": 0}, "timeoutSeconds"),
        ({"admissionReviewVersions": []}, "admissionReviewVersions"),
        ({"clientConfig": {}}, "clientConfig"),
        ({"clientConfig": {"url": "ftp://x"}}, "clientConfig.url"),
        ({"clientConfig": {"url": "https://x", "caBundle": "%%%"}}, "clientConfig.caBundle"),
        ({"clientConfig": {"service": {"name": "s"}}}, "clientConfig.service.namespace"),
        ({"rules": [{"operations": ["PATCH"]}]}, "rules[0].operations"),
        ({"rules": [{"operations": ["CREATE"], "scope": "Galaxy"}]}, "rules[0].scope"),
        (
            {"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
            "namespaceSelector",
        ),
        (
            {"objectSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}},
            "objectSelector",
        ),
        ({"objectSelector": {"matchLabels": {"a": "not valid"}}}, "objectSelector"),
        ({"namespaceSelector": {"matchLabels": {"-a": "b"}}}, "namespaceSelector"),
        ({"sideEffects": "Maybe"}, "sideEffects"),
    ],
)
def test_malformed_webhooks_are_reported_and_skipped(overrides: dict[str, Any], field: str) -> None:
    good = webhook(name="good.example.com")
    bad = webhook(name="bad.example.com", **overrides)
    hooks, errors = parse_configuration(config("c", bad, good))
    assert [h.name for h in hooks] == ["good.example.com"]
    (error,) = errors
    assert isinstance(error, ConfigError)
    assert field in error.key


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=6),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4),
        max_leaves=12,
    )
)
def test_garbage_webhooks_never_raise(raw: Any) -> None:
    hooks, errors = parse_configuration({"metadata": {"name": "c"}, "webhooks": [raw]})
    assert len(hooks) + len(errors) == 1
