"""The parsed KubeSchedulerConfiguration: frozen dataclasses for its profiles (scheduler names,
``NodeResourcesFit`` ignored resources, ``DefaultPreemption`` and its args), extenders (verbs,
weight, TLS, timeout, managed resources) and the pod backoff bounds, with kube-scheduler's
defaults; plus kubesim's own :data:`PreemptionBehaviour` setting and the pod's scheduler name."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from hami_kube.objects import PodView
from hami_protocol.errors import ConfigError

DEFAULT_SCHEDULER_NAME = "default-scheduler"
DEFAULT_EXTENDER_TIMEOUT = 5.0

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
    http_timeout: float = DEFAULT_EXTENDER_TIMEOUT
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
