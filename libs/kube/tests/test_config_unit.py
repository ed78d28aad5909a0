"""Client configuration sources and the watch-line decoder."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hami_kube.config import (
    ConfigSource,
    KubeSettings,
    config_source,
    create_api_client,
    load_configuration,
)
from hami_kube.errors import KubeError, TransportError
from hami_kube.rest import parse_watch_line


@pytest.mark.parametrize(
    ("settings", "environ", "expected"),
    [
        (KubeSettings(kube_url="http://127.0.0.1:1"), {}, ConfigSource.URL),
        (
            KubeSettings(kube_url="http://x", kubeconfig="/k"),
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1"},
            ConfigSource.URL,
        ),
        (KubeSettings(kubeconfig="/k"), {"KUBERNETES_SERVICE_HOST": "h"}, ConfigSource.KUBECONFIG),
        (KubeSettings(), {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, ConfigSource.IN_CLUSTER),
        (KubeSettings(), {}, ConfigSource.DEFAULT_KUBECONFIG),
    ],
)
def test_config_source(
    settings: KubeSettings, environ: dict[str, str], expected: ConfigSource
) -> None:
    assert config_source(settings, environ) == expected


async def test_plain_url_has_no_auth() -> None:
    configuration = await load_configuration(
        KubeSettings(kube_url="http://127.0.0.1:8080/", max_connections=7), {}
    )
    assert configuration.host == "http://127.0.0.1:8080"
    assert configuration.api_key == {}
    assert configuration.connection_pool_maxsize == 7


async def test_kubeconfig_file(tmp_path: Path) -> None:
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://10.1.2.3:6443"}}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "ctx",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    configuration = await load_configuration(KubeSettings(kubeconfig=str(path)), {})
    assert configuration.host == "https://10.1.2.3:6443"
    assert await configuration.get_api_key_with_prefix("BearerToken") == "Bearer secret-token"


async def test_missing_kubeconfig_is_a_kube_error(tmp_path: Path) -> None:
    with pytest.raises(KubeError, match="configuration"):
        await load_configuration(KubeSettings(kubeconfig=str(tmp_path / "absent")), {})


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="request_timeout_s"):
        KubeSettings(request_timeout_s=0)
    with pytest.raises(ValueError, match="burst"):
        KubeSettings(qps=5, burst=0)


def test_parse_watch_line() -> None:
    event = parse_watch_line(b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\n')
    assert event is not None
    assert event.type == "ADDED"
    assert event.object == {"metadata": {"name": "a"}}
    assert parse_watch_line(b"  \n") is None


@pytest.mark.parametrize(
    "line",
    [b"{", b"[]", b'{"type":"NOPE","object":{}}', b'{"type":"ADDED","object":[]}', b'{"type":1}'],
)
def test_parse_watch_line_rejects_garbage(line: bytes) -> None:
    with pytest.raises(TransportError, match="watch stream line"):
        parse_watch_line(line)


async def test_create_api_client_is_an_async_context_manager() -> None:
    settings = KubeSettings(kube_url="https://10.0.0.1:6443", insecure_skip_tls_verify=True)
    async with await create_api_client(settings, {}) as api:
        assert api.configuration.host == "https://10.0.0.1:6443"
        assert api.configuration.verify_ssl is False
        assert api.user_agent == "hami"
