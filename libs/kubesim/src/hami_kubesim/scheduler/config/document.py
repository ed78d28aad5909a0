"""A KubeSchedulerConfiguration document, loaded and parsed: the top-level fields (API version,
kind, pod backoff bounds), the profiles (scheduler name, ``NodeResourcesFit`` args, the
``DefaultPreemption`` PostFilter and its ``minCandidateNodes*`` args) and, through
:mod:`.extenders`, the extenders, with kube-scheduler's defaults and validation rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from hami_kubesim.scheduler.config.extenders import parse_extenders
from hami_kubesim.scheduler.config.fields import check_keys, positive_seconds, str_list_field
from hami_kubesim.scheduler.config.model import DEFAULT_SCHEDULER_NAME, Profile, SchedulerConfig
from hami_protocol.errors import ConfigError

_API_VERSIONS = frozenset(
    {
        "kubescheduler.config.k8s.io/v1",
        "kubescheduler.config.k8s.io/v1beta3",
        "kubescheduler.config.k8s.io/v1beta2",
    }
)
_TOP_LEVEL_KEYS = frozenset(
    {
        "apiVersion",
        "kind",
        "parallelism",
        "leaderElection",
        "clientConnection",
        "healthzBindAddress",
        "metricsBindAddress",
        "enableProfiling",
        "enableContentionProfiling",
        "percentageOfNodesToScore",
        "podInitialBackoffSeconds",
        "podMaxBackoffSeconds",
        "profiles",
        "extenders",
        "delayCacheUntilActive",
    }
)
_PROFILE_KEYS = frozenset({"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"})
_DEFAULT_PREEMPTION = "DefaultPreemption"


def load_scheduler_config(path: str | Path) -> SchedulerConfig:
    """Read and parse a KubeSchedulerConfiguration YAML file."""
    return parse_scheduler_config(Path(path).read_text(encoding="utf-8"))


def parse_scheduler_config(text: str) -> SchedulerConfig:
    """Parse a KubeSchedulerConfiguration document."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", text[:200], f"not valid YAML: {exc}") from exc
    if not isinstance(document, Mapping):
        raise ConfigError("", document, "a KubeSchedulerConfiguration must be a mapping")
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if api_version not in _API_VERSIONS:
        raise ConfigError("apiVersion", api_version, f"must be one of {sorted(_API_VERSIONS)}")
    if kind != "KubeSchedulerConfiguration":
        raise ConfigError("kind", kind, "must be KubeSchedulerConfiguration")
    check_keys(document, _TOP_LEVEL_KEYS, "")
    extenders = parse_extenders(document.get("extenders"))
    ignored = frozenset(
        r.name for e in extenders for r in e.managed_resources if r.ignored_by_scheduler
    )
    profiles = _parse_profiles(document.get("profiles"), ignored)
    initial = positive_seconds(
        document.get("podInitialBackoffSeconds", 1), "podInitialBackoffSeconds"
    )
    maximum = positive_seconds(document.get("podMaxBackoffSeconds", 10), "podMaxBackoffSeconds")
    if maximum < initial:
        raise ConfigError(
            "podMaxBackoffSeconds",
            maximum,
            "must be greater than or equal to podInitialBackoffSeconds",
        )
    return SchedulerConfig(
        profiles=profiles, extenders=extenders, pod_initial_backoff=initial, pod_max_backoff=maximum
    )


def _parse_profiles(raw: object, extender_ignored: frozenset[str]) -> tuple[Profile, ...]:
    if raw is None or raw == []:
        return (Profile(ignored_resources=extender_ignored),)
    if not isinstance(raw, list):
        raise ConfigError("profiles", raw, "must be a list")
    profiles: list[Profile] = []
    for index, item in enumerate(raw):
        field = f"profiles[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigError(field, item, "must be a mapping")
        check_keys(item, _PROFILE_KEYS, field)
        name = item.get("schedulerName") or DEFAULT_SCHEDULER_NAME
        if not isinstance(name, str):
            raise ConfigError(f"{field}.schedulerName", name, "must be a string")
        if any(p.scheduler_name == name for p in profiles):
            raise ConfigError(f"{field}.schedulerName", name, "duplicate profile")
        resources, groups = _fit_args(item.get("pluginConfig"), field)
        percentage, absolute = _preemption_args(item.get("pluginConfig"), field)
        profiles.append(
            Profile(
                scheduler_name=name,
                ignored_resources=resources | extender_ignored,
                ignored_resource_groups=groups,
                preemption=not _post_filter_disabled(item.get("plugins"), field),
                min_candidate_nodes_percentage=percentage,
                min_candidate_nodes_absolute=absolute,
            )
        )
    return tuple(profiles)


def _fit_args(raw: object, field: str) -> tuple[frozenset[str], frozenset[str]]:
    """``NodeResourcesFit`` args: ``ignoredResources`` and ``ignoredResourceGroups``."""
    if not isinstance(raw, list):
        return frozenset(), frozenset()
    for item in raw:
        if isinstance(item, Mapping) and item.get("name") == "NodeResourcesFit":
            args = item.get("args") or {}
            if not isinstance(args, Mapping):
                raise ConfigError(f"{field}.pluginConfig.NodeResourcesFit.args", args, "mapping")
            return (
                frozenset(
                    str_list_field(args.get("ignoredResources"), f"{field}.ignoredResources")
                ),
                frozenset(
                    str_list_field(
                        args.get("ignoredResourceGroups"), f"{field}.ignoredResourceGroups"
                    )
                ),
            )
    return frozenset(), frozenset()


def _post_filter_disabled(raw: object, field: str) -> bool:
    """``plugins.postFilter.disabled`` names ``DefaultPreemption`` (or ``*``: every default)."""
    if not isinstance(raw, Mapping):
        return False
    post_filter = raw.get("postFilter") or {}
    if not isinstance(post_filter, Mapping):
        raise ConfigError(f"{field}.plugins.postFilter", post_filter, "must be a mapping")
    disabled = post_filter.get("disabled") or []
    if not isinstance(disabled, list):
        raise ConfigError(f"{field}.plugins.postFilter.disabled", disabled, "must be a list")
    names = {item.get("name") for item in disabled if isinstance(item, Mapping)}
    return bool(names & {_DEFAULT_PREEMPTION, "*"})


def _preemption_args(raw: object, field: str) -> tuple[int, int]:
    """``DefaultPreemptionArgs``: ``minCandidateNodesPercentage`` (0-100, default 10) and
    ``minCandidateNodesAbsolute`` (>= 0, default 100), not both 0."""
    args: object = {}
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, Mapping) and item.get("name") == _DEFAULT_PREEMPTION:
            args = item.get("args") or {}
    where = f"{field}.pluginConfig.DefaultPreemption.args"
    if not isinstance(args, Mapping):
        raise ConfigError(where, args, "must be a mapping")
    percentage = args.get("minCandidateNodesPercentage", 10)
    absolute = args.get("minCandidateNodesAbsolute", 100)
    for key, value, top in (
        ("minCandidateNodesPercentage", percentage, 100),
        ("minCandidateNodesAbsolute", absolute, None),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{where}.{key}", value, "must be a non-negative integer")
        if top is not None and value > top:
            raise ConfigError(f"{where}.{key}", value, "not in valid range [0, 100]")
    if percentage == 0 and absolute == 0:
        raise ConfigError(
            where, args, "cannot be zero at the same time as minCandidateNodesPercentage"
        )
    return percentage, absolute
