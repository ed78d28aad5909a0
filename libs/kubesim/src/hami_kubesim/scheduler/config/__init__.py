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

Here: :mod:`.model` (the dataclasses and kubesim's own setting), :mod:`.document` (loading,
top-level fields and profiles), :mod:`.extenders` (the extender list) and :mod:`.fields` (the
scalar checks they share); the public names are re-exported from this package.
"""

from __future__ import annotations

from hami_kubesim.scheduler.config.document import load_scheduler_config, parse_scheduler_config
from hami_kubesim.scheduler.config.fields import parse_duration
from hami_kubesim.scheduler.config.model import (
    DEFAULT_SCHEDULER_NAME,
    PREEMPTION_BEHAVIOURS,
    ExtenderConfig,
    ExtenderTLS,
    ManagedResource,
    PreemptionBehaviour,
    Profile,
    SchedulerConfig,
    parse_preemption_behaviour,
    scheduler_name_of,
)

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
