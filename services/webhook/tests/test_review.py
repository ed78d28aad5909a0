"""AdmissionReview decoding/encoding and the answer to every kind of body, good or bad."""

from __future__ import annotations

import base64
import json
from typing import Any

import jsonpatch
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hami_webhook.admission.http import WebhookState, answer_review
from hami_webhook.admission.review import BadReviewError, decode_review
from hami_webhook.metrics import WebhookMetrics
from hami_webhook.mutation.rules import MutationRules

from .helpers import container, gpu, pod, review

STATE = WebhookState(rules=MutationRules(), metrics=WebhookMetrics())


def answer(body: Any) -> tuple[int, dict[str, Any]]:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    result = answer_review(raw, STATE)
    return result.status, json.loads(result.body)


@pytest.mark.parametrize("version", ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"])
def test_mutated_reply_echoes_version_kind_uid_and_carries_a_base64_patch(version: str) -> None:
    obj = pod(container(limits=gpu()))
    status, reply = answer(review(obj, version=version, uid="uid-1"))
    assert status == 200
    assert (reply["apiVersion"], reply["kind"]) == (version, "AdmissionReview")
    response = reply["response"]
    assert (response["uid"], response["allowed"], response["patchType"]) == (
        "uid-1",
        True,
        "JSONPatch",
    )
    ops = json.loads(base64.b64decode(response["patch"], validate=True))
    patched = jsonpatch.apply_patch(obj, ops)
    assert patched["spec"]["schedulerName"] == "hami-scheduler"
    assert set(response) == {"uid", "allowed", "patchType", "patch"}


def test_untouched_pod_gets_allowed_and_no_patch() -> None:
    status, reply = answer(review(pod(container()), uid="u"))
    assert status == 200
    assert reply["response"] == {"uid": "u", "allowed": True}


def test_denial_carries_a_status_with_the_reason() -> None:
    obj = pod(container(limits=gpu()), nodeName="n1")
    _, reply = answer(review(obj, uid="u"))
    assert reply["response"] == {
        "uid": "u",
        "allowed": False,
        "status": {
            "status": "Failure",
            "code": 403,
            "reason": "Forbidden",
            "message": "pod has node assigned",
        },
    }


@pytest.mark.parametrize(
    ("obj", "code", "fragment"),
    [
        (None, 400, "cannot decode pod"),
        ("text", 400, "cannot decode pod"),
        ({"spec": {"containers": 5}}, 400, "spec.containers"),
        (pod(container(limits={"nvidia.com/gpu": "a lot"})), 400, "nvidia.com/gpu"),
        (pod(container(limits=gpu(pct=200))), 500, "invalid nvidia.com/gpumem-percentage"),
    ],
)
def test_bad_pods_get_an_error_reply(obj: Any, code: int, fragment: str) -> None:
    status, reply = answer(review(obj, uid="u"))
    assert status == 200
    response = reply["response"]
    assert (response["uid"], response["allowed"], response["status"]["code"]) == ("u", False, code)
    assert fragment in response["status"]["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"",
        b"[]",
        b'"review"',
        {"apiVersion": "admission.k8s.io/v2", "kind": "AdmissionReview", "request": {"uid": "u"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u"}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}},
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 7}},
    ],
)
def test_unanswerable_bodies_get_http_400_with_a_status(body: Any) -> None:
    status, reply = answer(body)
    assert status == 400
    assert reply["kind"] == "Status"
    assert reply["code"] == 400
    assert reply["message"]


def test_non_pod_objects_are_allowed_with_a_warning() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    kind = {"group": "apps", "version": "v1", "kind": "Deployment"}
    _, reply = answer(review(deployment, uid="u", kind=kind))
    response = reply["response"]
    assert response["allowed"] is True
    assert "patch" not in response
    assert response["warnings"] == [
        "hami-webhook ignores apps/v1 Deployment: only pods are mutated"
    ]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_create_is_mutated(operation: str) -> None:
    _, reply = answer(review(pod(container(limits=gpu())), uid="u", operation=operation))
    assert reply["response"] == {"uid": "u", "allowed": True}


def test_subresource_requests_are_not_mutated() -> None:
    body = review(pod(container(limits=gpu())), uid="u")
    body["request"]["subResource"] = "ephemeralcontainers"
    _, reply = answer(body)
    assert reply["response"] == {"uid": "u", "allowed": True}


def test_namespace_falls_back_to_the_object() -> None:
    body = review(pod(container()), uid="u", namespace="")
    request = decode_review(json.dumps(body))
    assert request.namespace == ""
    assert request.display_name == "p"
    assert answer(body)[1]["response"]["allowed"] is True


def test_decode_review_fields() -> None:
    body = review(pod(container()), uid="abc", namespace="ns")
    request = decode_review(json.dumps(body).encode())
    assert (request.uid, request.namespace, request.name, request.operation) == (
        "abc",
        "ns",
        "p",
        "CREATE",
    )
    assert request.is_pod
    assert request.kind_name == "v1 Pod"


def test_bad_review_error_message_quotes_the_value() -> None:
    with pytest.raises(BadReviewError, match="unsupported apiVersion 'x'"):
        decode_review(b'{"apiVersion": "x"}')


@given(st.binary(max_size=200))
def test_garbage_bodies_never_raise(body: bytes) -> None:
    result = answer_review(body, STATE)
    assert result.status in (200, 400)
    json.loads(result.body)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    ["spec", "containers", "resources", "limits", "name", "nvidia.com/gpu"]
                ),
                children,
                max_size=3,
            )
        ),
        max_leaves=10,
    )
)
@example({"spec": {"containers": [None]}})  # once an AttributeError in the mutation
def test_garbage_objects_always_get_a_reply(obj: Any) -> None:
    status, reply = answer(review(obj, uid="u"))
    assert status == 200
    assert reply["response"]["uid"] == "u"
    if not reply["response"]["allowed"]:
        message = reply["response"]["status"]["message"]
        assert message
        assert not message.startswith("internal error"), message
