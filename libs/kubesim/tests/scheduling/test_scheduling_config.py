"""KubeSchedulerConfiguration parsing: defaults, validation, the shipped file, overrides."""

from __future__ import annotations

import base64
import contextlib
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_kubesim.scheduler.config import (
    DEFAULT_SCHEDULER_NAME,
    ExtenderConfig,
    ManagedResource,
    load_scheduler_config,
    parse_duration,
    parse_preemption_behaviour,
    parse_scheduler_config,
)
from hami_protocol.config.defaults import DEFAULT_DEVICE_CONFIG_YAML
from hami_protocol.config.device import parse_device_config
from hami_protocol.errors import ConfigError
from hami_protocol.vendor.table import vendors_from_config

SHIPPED = (
    Path(__file__).resolve().parents[4]
    / "deploy/charts/hami/charts/scheduler/files/kube-scheduler-config.yaml"
)
_VENDORS = vendors_from_config(
    parse_device_config(DEFAULT_DEVICE_CONFIG_YAML), enable_ascend=True, enable_iluvatar=True
)
HAMI_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
    # every other vendor's resources, as HAMi's chart lists its devices' customresources
    *(name for vendor in _VENDORS[1:] for name in vendor.managed_resources),
    "koordinator.sh/rdma",
)


def doc(body: str) -> str:
    header = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
    return header + textwrap.dedent(body)


def test_shipped_file_has_hamis_shape() -> None:
    config = load_scheduler_config(SHIPPED)
    assert [p.scheduler_name for p in config.profiles] == ["hami-scheduler"]
    (extender,) = config.extenders
    assert extender.url_prefix == "https://127.0.0.1:443"
    assert (extender.filter_verb, extender.bind_verb, extender.prioritize_verb) == (
        "filter",
        "bind",
        "",
    )
    assert extender.node_cache_capable is True
    assert extender.weight == 1
    assert extender.http_timeout == 30.0
    assert extender.enable_https is True
    assert extender.tls is not None
    assert extender.tls.insecure is True
    assert extender.managed_resources == tuple(
        ManagedResource(name, ignored_by_scheduler=True) for name in HAMI_RESOURCES
    )
    assert config.profiles[0].ignored_resources == frozenset(HAMI_RESOURCES)
    assert (config.pod_initial_backoff, config.pod_max_backoff) == (1.0, 10.0)


def test_defaults_for_a_minimal_document() -> None:
    config = parse_scheduler_config(doc("extenders:\n- urlPrefix: http://x/\n"))
    assert [p.scheduler_name for p in config.profiles] == [DEFAULT_SCHEDULER_NAME]
    (extender,) = config.extenders
    assert extender == ExtenderConfig(url_prefix="http://x/")
    assert extender.http_timeout == 5.0
    assert extender.url_for("filter") == "http://x/filter"


def test_url_for_trims_trailing_slashes() -> None:
    assert ExtenderConfig(url_prefix="http://h:8888/scheduler//").url_for("bind") == (
        "http://h:8888/scheduler/bind"
    )


def test_with_extender_url_overrides_only_the_url() -> None:
    config = load_scheduler_config(SHIPPED)
    moved = config.with_extender_url("http://127.0.0.1:4321")
    assert moved.extenders[0].url_prefix == "http://127.0.0.1:4321"
    assert moved.extenders[0].managed_resources == config.extenders[0].managed_resources
    with pytest.raises(IndexError):
        config.with_extender_url("http://x", index=3)


def test_ignorable_extenders_go_last() -> None:
    config = parse_scheduler_config(
        doc(
            """
            extenders:
            - {urlPrefix: "http://a", ignorable: true}
            - {urlPrefix: "http://b"}
            - {urlPrefix: "http://c"}
            """
        )
    )
    assert [e.url_prefix for e in config.ordered_extenders()] == [
        "http://b",
        "http://c",
        "http://a",
    ]


def test_profiles_and_fit_args() -> None:
    config = parse_scheduler_config(
        doc(
            """
            podInitialBackoffSeconds: 2
            podMaxBackoffSeconds: 20
            profiles:
            - schedulerName: one
              pluginConfig:
              - name: NodeResourcesFit
                args:
                  ignoredResources: [example.com/foo]
                  ignoredResourceGroups: [example.org]
            - schedulerName: two
            extenders:
            - urlPrefix: http://x
              managedResources:
              - {name: example.com/bar, ignoredByScheduler: true}
              - {name: example.com/baz}
            """
        )
    )
    one, two = config.profiles
    assert one.ignored_resources == {"example.com/foo", "example.com/bar"}
    assert one.ignored_resource_groups == {"example.org"}
    assert two.ignored_resources == {"example.com/bar"}
    assert config.scheduler_names == {"one", "two"}
    assert config.profile_for("two") is two
    assert config.profile_for("three") is None
    assert (config.pod_initial_backoff, config.pod_max_backoff) == (2.0, 20.0)


def test_tls_data_is_base64_decoded() -> None:
    pem = b"-----BEGIN CERTIFICATE-----\nabc\n-----END CERTIFICATE-----\n"
    config = parse_scheduler_config(
        doc(
            f"""
            extenders:
            - urlPrefix: https://x
              tlsConfig: {{caData: {base64.b64encode(pem).decode()}, serverName: ext.svc}}
            """
        )
    )
    tls = config.extenders[0].tls
    assert tls is not None
    assert tls.ca_data == pem
    assert tls.server_name == "ext.svc"


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        ("extenders:\n- urlPrefix: http://x\n  enableHttps: true\n", "extenders[0]", "unknown"),
        ("extenders:\n- filterVerb: filter\n", "extenders[0].urlPrefix", "required"),
        (
            "extenders:\n- {urlPrefix: http://x, prioritizeVerb: p}\n",
            "extenders[0].weight",
            "positive weight",
        ),
        (
            "extenders:\n- {urlPrefix: http://a, bindVerb: b}\n"
            "- {urlPrefix: http://b, bindVerb: b}\n",
            "extenders",
            "only one extender",
        ),
        (
            "extenders:\n- urlPrefix: http://a\n  managedResources: [{name: x.io/a}]\n"
            "- urlPrefix: http://b\n  managedResources: [{name: x.io/a}]\n",
            "extenders.managedResources",
            "duplicate",
        ),
        (
            "extenders:\n- {urlPrefix: http://x, httpTimeout: 30}\n",
            "extenders[0].httpTimeout",
            "string",
        ),
        (
            "extenders:\n- {urlPrefix: http://x, httpTimeout: soon}\n",
            "extenders[0].httpTimeout",
            "invalid",
        ),
        (
            "extenders:\n- {urlPrefix: http://x, nodeCacheCapable: 'yes'}\n",
            "extenders[0].nodeCacheCapable",
            "true or false",
        ),
        (
            "profiles:\n- schedulerName: a\n- schedulerName: a\n",
            "profiles[1].schedulerName",
            "duplicate",
        ),
        (
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n",
            "podMaxBackoffSeconds",
            "greater",
        ),
        ("bogus: 1\n", "(top level)", "unknown"),
    ],
)
def test_invalid_documents_name_the_field(body: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scheduler_config(doc(body))
    assert info.value.key == key
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[]",
        "apiVersion: v1\nkind: Pod\n",
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: X\n",
        "{",
    ],
)
def test_not_a_scheduler_configuration(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_scheduler_config(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("1.5s", 1.5), ("0", 0.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@given(st.text(max_size=20))
def test_garbage_documents_raise_only_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_scheduler_config(text)


@given(st.text(max_size=12))
def test_garbage_durations_raise_only_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        assert parse_duration(text) >= 0 or text.strip().startswith("-")


# -- DefaultPreemption -----------------------------------------------------------------------

HEAD = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"


def test_preemption_is_on_with_upstream_defaults() -> None:
    config = parse_scheduler_config(HEAD)
    (profile,) = config.profiles
    assert profile.preemption
    assert (profile.min_candidate_nodes_percentage, profile.min_candidate_nodes_absolute) == (
        10,
        100,
    )
    assert config.preemption_behaviour == "1.37"


def test_preemption_args_and_disabling() -> None:
    config = parse_scheduler_config(
        HEAD
        + textwrap.dedent(
            """\
            profiles:
            - schedulerName: a
              pluginConfig:
              - name: DefaultPreemption
                args: {minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 3}
            - schedulerName: b
              plugins: {postFilter: {disabled: [{name: DefaultPreemption}]}}
            - schedulerName: c
              plugins: {postFilter: {disabled: [{name: "*"}]}}
            """
        )
    )
    a, b, c = config.profiles
    assert (a.preemption, a.min_candidate_nodes_percentage, a.min_candidate_nodes_absolute) == (
        True,
        0,
        3,
    )
    assert not b.preemption
    assert not c.preemption


@pytest.mark.parametrize(
    "args",
    [
        "{minCandidateNodesPercentage: 0, minCandidateNodesAbsolute: 0}",
        "{minCandidateNodesPercentage: 101}",
        "{minCandidateNodesAbsolute: -1}",
        "{minCandidateNodesAbsolute: x}",
    ],
)
def test_invalid_preemption_args(args: str) -> None:
    text = HEAD + (
        "profiles:\n- pluginConfig:\n  - name: DefaultPreemption\n" + f"    args: {args}\n"
    )
    with pytest.raises(ConfigError):
        parse_scheduler_config(text)


@pytest.mark.parametrize(
    ("given", "behaviour"),
    [("1.37", "1.37"), ("1.38", "1.38"), ("v1.30.2", "1.37"), ("1.40", "1.38")],
)
def test_preemption_behaviour_follows_the_release(given: object, behaviour: str) -> None:
    assert parse_preemption_behaviour(given) == behaviour


@pytest.mark.parametrize("given", ["latest", "2.0", "", None, "1.x", 1.38])
def test_preemption_behaviour_needs_a_release(given: object) -> None:
    with pytest.raises(ConfigError):
        parse_preemption_behaviour(given)
