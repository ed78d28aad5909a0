"""The extender JSON: case-insensitive in, Go names out, ``null`` handling; bad bodies over
HTTP."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_scheduler.wire import (
    BadArgsError,
    BindingArgs,
    decode_binding_args,
    decode_extender_args,
    encode_binding_result,
    encode_filter_result,
    encode_priorities,
)

from ..service_helpers import harness


def test_keys_match_whatever_their_case() -> None:
    body = b'{"pod": {"metadata": {"name": "p"}}, "NODENAMES": ["a", "b"], "nodes": null}'
    args = decode_extender_args(body)
    assert args.pod == {"metadata": {"name": "p"}}
    assert args.node_names == ["a", "b"]
    assert args.nodes is None
    binding = decode_binding_args(
        b'{"podname": "p", "PODNAMESPACE": "ns", "PodUid": "u", "node": "n", "Extra": 1}'
    )
    assert binding == BindingArgs("p", "ns", "u", "n")


def test_the_last_spelling_of_a_key_wins_and_unknown_keys_are_ignored() -> None:
    args = decode_extender_args(b'{"NodeNames": ["a"], "nodenames": ["b"], "Other": 5}')
    assert args.node_names == ["b"]
    assert args.pod is None


def test_nulls_mean_not_set() -> None:
    args = decode_extender_args(b'{"Pod": null, "Nodes": null, "NodeNames": null}')
    assert (args.pod, args.nodes, args.node_names) == (None, None, None)
    assert decode_binding_args(b'{"PodName": null}') == BindingArgs()
    nodes = decode_extender_args(b'{"Nodes": {"metadata": {}, "Items": [{"metadata": {}}]}}')
    assert nodes.nodes == [{"metadata": {}}]
    empty = decode_extender_args(b'{"Nodes": {"metadata": {}, "items": null}}')
    assert empty.nodes == []


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'"text"',
        b'{"Pod": "text"}',
        b'{"NodeNames": "a"}',
        b'{"NodeNames": [1, 2]}',
        b'{"Nodes": []}',
        b'{"Nodes": {"items": [1]}}',
        b"[" * 100_000,
    ],
)
def test_undecodable_extender_args(body: bytes) -> None:
    with pytest.raises(BadArgsError):
        decode_extender_args(body)


@pytest.mark.parametrize("body", [b"{", b'{"PodName": 3}', b'{"Node": ["n"]}', b"null"])
def test_undecodable_binding_args(body: bytes) -> None:
    with pytest.raises(BadArgsError):
        decode_binding_args(body)


@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_garbage_raises_only_bad_args(body: bytes) -> None:
    for decode in (decode_extender_args, decode_binding_args):
        with contextlib.suppress(BadArgsError):
            decode(body)


def test_replies_use_go_names_with_every_field_present() -> None:
    assert json.loads(encode_filter_result(node_names=["a"], failed={"b": "why"})) == {
        "Nodes": None,
        "NodeNames": ["a"],
        "FailedNodes": {"b": "why"},
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    assert json.loads(encode_filter_result(error="boom")) == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "boom",
    }
    nodes = json.loads(encode_filter_result(nodes=[{"metadata": {"name": "a"}}], failed={}))
    assert nodes["Nodes"] == {"metadata": {}, "items": [{"metadata": {"name": "a"}}]}
    assert nodes["FailedNodes"] == {}
    assert json.loads(encode_priorities([("a", 3)])) == [{"Host": "a", "Score": 3}]
    assert json.loads(encode_priorities([])) == []
    assert json.loads(encode_binding_result()) == {"Error": ""}


async def test_bad_bodies_over_http() -> None:
    async with harness() as h:
        for verb in ("filter", "prioritize", "bind"):
            status, reply = await h.post(verb, None, raw=b"{garbage")
            assert status == 400
            assert reply["Error"].startswith("request body is not JSON")
        status, reply = await h.post("filter", None, raw=b'{"NodeNames": 7}')
        assert (status, reply) == (400, {"Error": "NodeNames must be an array of strings or null"})
        too_big = json.dumps({"Pod": None, "NodeNames": ["x" * 1000] * 1100}).encode()
        status, reply = await h.post("filter", None, raw=too_big)
        assert status == 413
        assert "too large" in reply["Error"]
        # The service keeps serving.
        status, reply = await h.post("filter", {"Pod": None})
        assert (status, reply["Error"]) == (200, "extender args missing pod")
        status, scores = await h.post("prioritize", {"Pod": None, "NodeNames": ["a"]})
        assert (status, scores) == (200, [{"Host": "a", "Score": 0}])
        async with h.http.get(f"{h.scheduler.url()}/readyz") as response:
            assert response.status == 200


def _grouped(mapping: dict[str, str] | None) -> dict[str, str] | None:
    """``mapping`` with its entries grouped by text, the texts in sorted order (up to 8 texts;
    with more, as it is)."""
    if mapping is None or len(set(mapping.values())) > 8:
        return mapping
    texts = sorted(set(mapping.values()))
    return {name: text for text in texts for name, value in mapping.items() if value == text}


_NAMES = st.text(max_size=8) | st.from_regex(r"node-[a-z0-9.-]{0,6}", fullmatch=True)
_TEXTS = st.text(max_size=20) | st.sampled_from(["NodeInsufficientDevice", "node unregistered"])


@given(
    names=st.none() | st.lists(st.text(max_size=8), max_size=5),
    failed=st.none() | st.dictionaries(_NAMES, _TEXTS, max_size=14),
    unresolvable=st.none() | st.dictionaries(_NAMES, _TEXTS, max_size=3),
    error=st.text(max_size=10),
)
def test_the_filter_result_is_what_json_writes_with_failures_grouped_by_reason(
    names: list[str] | None,
    failed: dict[str, str] | None,
    unresolvable: dict[str, str] | None,
    error: str,
) -> None:
    # FailedNodes is written by hand (no tuple, no string per node): json's text, but with the
    # names sharing a reason side by side (up to 8 reasons) — kube-scheduler reads a map.
    document = {
        "Nodes": None,
        "NodeNames": names,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": error,
    }
    written = encode_filter_result(
        node_names=names, failed=failed, failed_unresolvable=unresolvable, error=error
    )
    assert json.loads(written) == document
    expected = {
        **document,
        "FailedNodes": _grouped(failed),
        "FailedAndUnresolvableNodes": _grouped(unresolvable),
    }
    assert written == json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_reply_refusing_thousands_of_nodes_for_a_few_reasons() -> None:
    failed = {
        f"node-{i:05d}": ("NodeInsufficientDevice" if i % 5 else "1/8 CardNotHealth")
        for i in range(5000)
    }
    failed['odd "name"\n'] = "node unregistered"
    written = encode_filter_result(node_names=["node-00001"], failed=failed)
    assert json.loads(written)["FailedNodes"] == failed
    assert written.count(b'"NodeInsufficientDevice"') == 4000
