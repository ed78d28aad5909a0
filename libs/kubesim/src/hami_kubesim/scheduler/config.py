"""KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``): the parts the loop obeys.

Parses the same YAML file the chart ships to kube-scheduler into frozen dataclasses: profiles
(scheduler names, ``NodeResourcesFit`` ignored resources, ``DefaultPreemption``: on unless the
profile's ``plugins.postFilter.disabled`` names it or ``*``, and its ``minCandidateNodes*`` args),
extenders (verbs, weight, TLS, timeout, ``nodeCacheCapable``, ``managedResources``, ``ignorable``)
and the pod backoff bounds, with kube-scheduler's defaults and validation rules.

Which kube-scheduler release the loop behaves as is not in that file:
:attr:`SchedulerConfig.preemption_behaviour` (``"1.37"``, the default, or ``"1.38"``) is kubesim's
own setting, chosen by the cluster config or the whole-system spec.

Decoding is strict for the extender structures, as kube-scheduler's is, so a misspelt key
(``enableHttps``) is an error rather than silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from hami_kube.objects import PodView
from hami_protocol.durations import parse_go_duration
from hami_protocol.errors import ConfigError

__all__ = [
    "DEFAULT_SCHEDULER_NAME",
    "PREEMPTION_BEHAVIOURS",
    "ExtenderConfig",
    "ExtenderTLS",
    "ManagedResource",
    "PreemptionBehaviour",
    "Profile",
    "SchedulerConfig",
    "load_scheduler_config",
    "parse_duration",
    "parse_preemption_behaviour",
    "parse_scheduler_config",
    "scheduler_name_of",
]

DEFAULT_SCHEDULER_NAME = "default-scheduler"
_API_VERSIONS = frozenset(
    {
        "kubescheduler.config.k8s.io/v1",
        "kubescheduler.config.k8s.io/v1beta3",
        "kubescheduler.config.k8s.io/v1beta2",
    }
)
_DEFAULT_EXTENDER_TIMEOUT = 5.0
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
_EXTENDER_KEYS = frozenset(
    {
        "urlPrefix",
        "filterVerb",
        "preemptVerb",
        "prioritizeVerb",
        "weight",
        "bindVerb",
        "enableHTTPS",
        "tlsConfig",
        "httpTimeout",
        "nodeCacheCapable",
        "managedResources",
        "ignorable",
    }
)
_TLS_KEYS = frozenset(
    {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
)
_MANAGED_KEYS = frozenset({"name", "ignoredByScheduler"})
_DEFAULT_PREEMPTION = "DefaultPreemption"

PreemptionBehaviour = Literal["1.37", "1.38"]
"""kube-scheduler's preemption up to 1.37, or from 1.38 on (PR #135486): whether a node that fits
with no in-tree victim is handed to a preempt-capable extender (1.38) or is an error (1.37)."""
PREEMPTION_BEHAVIOURS: tuple[PreemptionBehaviour, ...] = get_args(PreemptionBehaviour)


@dataclass(frozen=True, slots=True)
class ManagedResource:
    """``managedResources`` entry: a resource name the extender accounts for."""

    name: str
    ignored_by_scheduler: bool = False


@dataclass(frozen=True, slots=True)
class ExtenderTLS:
    """``tlsConfig``; the ``*Data`` forms hold decoded PEM bytes and win over the file forms."""

    insecure: bool = False
    server_name: str = ""
    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    cert_data: bytes = b""
    key_data: bytes = b""
    ca_data: bytes = b""


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """One HTTP extender, defaults applied."""

    url_prefix: str
    filter_verb: str = ""
    prioritize_verb: str = ""
    preempt_verb: str = ""
    bind_verb: str = ""
    weight: int = 0
    enable_https: bool = False
    tls: ExtenderTLS | None = None
    http_timeout: float = _DEFAULT_EXTENDER_TIMEOUT
    node_cache_capable: bool = False
    managed_resources: tuple[ManagedResource, ...] = ()
    ignorable: bool = False

    def url_for(self, verb: str) -> str:
        """Where ``verb`` is POSTed: the prefix without trailing slashes, ``/``, the verb."""
        return self.url_prefix.rstrip("/") + "/" + verb

    def is_interested(self, pod: Mapping[str, Any]) -> bool:
        """kube-scheduler's ``IsInterested``: no managed resources, or the pod asks for one."""
        if not self.managed_resources:
            return True
        managed = {resource.name for resource in self.managed_resources}
        return any(
            managed.intersection(c.requests) or managed.intersection(c.limits)
            for c in PodView(pod).all_containers()
        )


@dataclass(frozen=True, slots=True)
class Profile:
    """One scheduling profile: the pods it takes and the resources its fit check ignores."""

    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    ignored_resources: frozenset[str] = frozenset()
    ignored_resource_groups: frozenset[str] = frozenset()
    preemption: bool = True
    """The ``DefaultPreemption`` PostFilter plugin runs (kube-scheduler's default)."""
    min_candidate_nodes_percentage: int = 10
    min_candidate_nodes_absolute: int = 100


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """The parsed configuration."""

    profiles: tuple[Profile, ...] = (Profile(),)
    extenders: tuple[ExtenderConfig, ...] = ()
    pod_initial_backoff: float = 1.0
    pod_max_backoff: float = 10.0
    preemption_behaviour: PreemptionBehaviour = "1.37"
    """Which kube-scheduler release's preemption to play (see :data:`PreemptionBehaviour`)."""
    dynamic_resources: bool = True
    """Run the DynamicResources plugin (DRA, GA and on since 1.34): follow ResourceSlices,
    DeviceClasses and ResourceClaims and allocate the claims of pods that reference some."""

    @property
    def scheduler_names(self) -> frozenset[str]:
        return frozenset(profile.scheduler_name for profile in self.profiles)

    def profile_for(self, scheduler_name: str) -> Profile | None:
        for profile in self.profiles:
            if profile.scheduler_name == scheduler_name:
                return profile
        return None

    def ordered_extenders(self) -> tuple[ExtenderConfig, ...]:
        """Configuration order, with every ``ignorable`` extender moved to the end."""
        return tuple(e for e in self.extenders if not e.ignorable) + tuple(
            e for e in self.extenders if e.ignorable
        )

    def with_default_profile(self) -> SchedulerConfig:
        """A copy that also takes the pods naming no scheduler (``default-scheduler``), with the
        first profile's settings: the cluster's own kube-scheduler beside a second scheduler's
        profile (DRA pods name none: kube-scheduler itself allocates their claims)."""
        if DEFAULT_SCHEDULER_NAME in self.scheduler_names:
            return self
        profile = dataclasses.replace(self.profiles[0], scheduler_name=DEFAULT_SCHEDULER_NAME)
        return dataclasses.replace(self, profiles=(*self.profiles, profile))

    def with_extender_url(self, url_prefix: str, *, index: int = 0) -> SchedulerConfig:
        """A copy whose extender ``index`` calls ``url_prefix`` (extenders on random ports)."""
        if not 0 <= index < len(self.extenders):
            raise IndexError(f"no extender #{index}; the configuration has {len(self.extenders)}")
        extenders = list(self.extenders)
        extenders[index] = dataclasses.replace(extenders[index], url_prefix=url_prefix)
        return dataclasses.replace(self, extenders=tuple(extenders))


def scheduler_name_of(pod: PodView) -> str:
    """``spec.schedulerName``, defaulted as the API server defaults it."""
    return pod.scheduler_name or DEFAULT_SCHEDULER_NAME


def parse_preemption_behaviour(
    value: object, field: str = "preemptionBehaviour"
) -> PreemptionBehaviour:
    """``"1.37"`` or ``"1.38"``; any other ``1.<minor>`` release picks the side it falls on.  A
    string only: YAML reads an unquoted ``1.40`` as the number 1.4."""
    if not isinstance(value, str):
        raise ConfigError(field, value, 'must be a quoted Kubernetes release such as "1.38"')
    major, _, rest = value.strip().removeprefix("v").partition(".")
    minor = rest.split(".")[0]
    if major == "1" and minor.isdigit():
        return "1.38" if int(minor) >= 38 else "1.37"
    raise ConfigError(field, value, f"must be a Kubernetes release such as {PREEMPTION_BEHAVIOURS}")


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
    _strict(document, _TOP_LEVEL_KEYS, "")
    extenders = _parse_extenders(document.get("extenders"))
    ignored = frozenset(
        r.name for e in extenders for r in e.managed_resources if r.ignored_by_scheduler
    )
    profiles = _parse_profiles(document.get("profiles"), ignored)
    initial = _positive_number(
        document.get("podInitialBackoffSeconds", 1), "podInitialBackoffSeconds"
    )
    maximum = _positive_number(document.get("podMaxBackoffSeconds", 10), "podMaxBackoffSeconds")
    if maximum < initial:
        raise ConfigError(
            "podMaxBackoffSeconds",
            maximum,
            "must be greater than or equal to podInitialBackoffSeconds",
        )
    return SchedulerConfig(
        profiles=profiles, extenders=extenders, pod_initial_backoff=initial, pod_max_backoff=maximum
    )


def parse_duration(value: object, field: str = "") -> float:
    """A Go duration string (``30s``, ``1m30s``, ``500ms``) in seconds."""
    if not isinstance(value, str):
        raise ConfigError(field, value, "a duration must be a string such as '30s'")
    if not value.strip():
        return 0.0
    try:
        return parse_go_duration(value, bare_seconds=False)
    except ValueError:
        raise ConfigError(field, value, "invalid duration (expected e.g. '30s', '1m30s')") from None


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
        _strict(item, _PROFILE_KEYS, field)
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
                frozenset(_str_list(args.get("ignoredResources"), f"{field}.ignoredResources")),
                frozenset(
                    _str_list(args.get("ignoredResourceGroups"), f"{field}.ignoredResourceGroups")
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


def _parse_extenders(raw: object) -> tuple[ExtenderConfig, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("extenders", raw, "must be a list")
    extenders = tuple(_parse_extender(item, f"extenders[{i}]") for i, item in enumerate(raw))
    binders = [e.url_prefix for e in extenders if e.bind_verb]
    if len(binders) > 1:
        raise ConfigError("extenders", binders, "only one extender can implement bind")
    seen: set[str] = set()
    for extender in extenders:
        for resource in extender.managed_resources:
            if resource.name in seen:
                raise ConfigError(
                    "extenders.managedResources", resource.name, "duplicate managed resource name"
                )
            seen.add(resource.name)
    return extenders


def _parse_extender(raw: object, field: str) -> ExtenderConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "must be a mapping")
    _strict(raw, _EXTENDER_KEYS, field)
    url = raw.get("urlPrefix")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{field}.urlPrefix", url, "required: an http:// or https:// URL")
    verbs = {
        key: _string(raw.get(key), f"{field}.{key}")
        for key in ("filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb")
    }
    weight = raw.get("weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int):
        raise ConfigError(f"{field}.weight", weight, "must be an integer")
    if verbs["prioritizeVerb"] and weight <= 0:
        raise ConfigError(
            f"{field}.weight", weight, "must have a positive weight applied to it (prioritizeVerb)"
        )
    timeout = raw.get("httpTimeout")
    seconds = 0.0 if timeout is None else parse_duration(timeout, f"{field}.httpTimeout")
    return ExtenderConfig(
        url_prefix=url,
        filter_verb=verbs["filterVerb"],
        prioritize_verb=verbs["prioritizeVerb"],
        preempt_verb=verbs["preemptVerb"],
        bind_verb=verbs["bindVerb"],
        weight=weight,
        enable_https=_bool(raw.get("enableHTTPS"), f"{field}.enableHTTPS"),
        tls=_parse_tls(raw.get("tlsConfig"), f"{field}.tlsConfig"),
        http_timeout=seconds if seconds > 0 else _DEFAULT_EXTENDER_TIMEOUT,
        node_cache_capable=_bool(raw.get("nodeCacheCapable"), f"{field}.nodeCacheCapable"),
        managed_resources=_parse_managed(raw.get("managedResources"), f"{field}.managedResources"),
        ignorable=_bool(raw.get("ignorable"), f"{field}.ignorable"),
    )


def _parse_tls(raw: object, field: str) -> ExtenderTLS | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "must be a mapping")
    _strict(raw, _TLS_KEYS, field)
    return ExtenderTLS(
        insecure=_bool(raw.get("insecure"), f"{field}.insecure"),
        server_name=_string(raw.get("serverName"), f"{field}.serverName"),
        cert_file=_string(raw.get("certFile"), f"{field}.certFile"),
        key_file=_string(raw.get("keyFile"), f"{field}.keyFile"),
        ca_file=_string(raw.get("caFile"), f"{field}.caFile"),
        cert_data=_b64(raw.get("certData"), f"{field}.certData"),
        key_data=_b64(raw.get("keyData"), f"{field}.keyData"),
        ca_data=_b64(raw.get("caData"), f"{field}.caData"),
    )


def _parse_managed(raw: object, field: str) -> tuple[ManagedResource, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(field, raw, "must be a list")
    resources: list[ManagedResource] = []
    for index, item in enumerate(raw):
        where = f"{field}[{index}]"
        if not isinstance(item, Mapping):
            raise ConfigError(where, item, "must be a mapping")
        _strict(item, _MANAGED_KEYS, where)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name", name, "required")
        resources.append(
            ManagedResource(
                name=name,
                ignored_by_scheduler=_bool(
                    item.get("ignoredByScheduler"), f"{where}.ignoredByScheduler"
                ),
            )
        )
    return tuple(resources)


def _strict(raw: Mapping[str, Any], allowed: frozenset[str], field: str) -> None:
    unknown = sorted(str(key) for key in raw if key not in allowed)
    if unknown:
        raise ConfigError(field or "(top level)", unknown, "unknown field(s)")


def _string(raw: object, field: str) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise ConfigError(field, raw, "must be a string")
    return raw


def _bool(raw: object, field: str) -> bool:
    if raw is None:
        return False
    if not isinstance(raw, bool):
        raise ConfigError(field, raw, "must be true or false")
    return raw


def _b64(raw: object, field: str) -> bytes:
    if raw is None or raw == "":
        return b""
    if not isinstance(raw, str):
        raise ConfigError(field, raw, "must be base64 text")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(field, raw, f"invalid base64: {exc}") from exc


def _str_list(raw: object, field: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ConfigError(field, raw, "must be a list of strings")
    return list(raw)


def _positive_number(raw: object, field: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
        raise ConfigError(field, raw, "must be a positive number of seconds")
    return float(raw)
