"""Where the service proxy sends a request: ``ResourceLocation``'s rules (pure)."""

from __future__ import annotations

import random

import pytest

from hami_kubesim.apiserver.errors import StatusError
from hami_kubesim.apiserver.proxy import backend_path, locate, split_scheme_name_port
from hami_kubesim.objects.services import endpoint_slice, selectorless_service


@pytest.mark.parametrize(
    ("service_id", "split"),
    [
        ("svc", ("", "svc", "")),
        ("svc:gpumap", ("", "svc", "gpumap")),
        ("svc:9397", ("", "svc", "9397")),
        ("https:svc:gpumap", ("https", "svc", "gpumap")),
        ("http:svc:", ("http", "svc", "")),
        ("ftp:svc:1", None),
        (":1", None),
        ("a:b:c:d", None),
    ],
)
def test_split_scheme_name_port(service_id: str, split: tuple[str, str, str] | None) -> None:
    assert split_scheme_name_port(service_id) == split


@pytest.mark.parametrize(
    ("path", "sent"),
    [(None, "/"), ("", "/"), ("api/v1/map", "/api/v1/map"), ("a/", "/a/"),
     ("a//b/../c", "/a/c"), ("../../etc", "/etc")],
)  # fmt: skip
def test_backend_path(path: str | None, sent: str) -> None:
    assert backend_path(path) == sent


SERVICE = selectorless_service("ns", "svc", {"https": 443, "gpumap": 9397})


def test_every_ready_backend_is_chosen_sometimes() -> None:
    slices = [
        endpoint_slice("ns", "svc", f"svc-{i}", "127.0.0.1", {"gpumap": 1000 + i}) for i in range(3)
    ]
    rng = random.Random(7)
    seen = {locate("svc:gpumap", service=None, slices=slices, rng=rng).port for _ in range(60)}
    assert seen == {1000, 1001, 1002}
    secure = locate("https:svc:9397", service=SERVICE, slices=slices, rng=rng)
    assert (secure.scheme, secure.host) == ("https", "127.0.0.1")
    assert secure.port in seen


def test_an_unnamed_port_matches_the_bare_name() -> None:
    bare = endpoint_slice("ns", "svc", "svc-0", "::1", {"": 8080})
    location = locate("svc", service=None, slices=[bare])
    assert (location.scheme, location.authority, location.port) == ("http", "[::1]", 8080)
    with pytest.raises(StatusError) as info:
        locate("svc:gpumap", service=None, slices=[bare])
    assert info.value.message == 'no endpoints available for service "svc:gpumap"'
