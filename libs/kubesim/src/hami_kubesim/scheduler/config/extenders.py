"""The ``extenders`` list of a KubeSchedulerConfiguration: each extender (verbs, weight, TLS,
timeout, ``nodeCacheCapable``, ``managedResources``, ``ignorable``) decoded strictly, as
kube-scheduler decodes it (a misspelt key such as ``enableHttps`` is an error), and the rules
across them (one binder, no managed resource twice)."""

from __future__ import annotations

from collections.abc import Mapping

from hami_kubesim.scheduler.config.fields import (
    b64_field,
    bool_field,
    check_keys,
    parse_duration,
    string_field,
)
from hami_kubesim.scheduler.config.model import (
    DEFAULT_EXTENDER_TIMEOUT,
    ExtenderConfig,
    ExtenderTLS,
    ManagedResource,
)
from hami_protocol.errors import ConfigError

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


def parse_extenders(raw: object) -> tuple[ExtenderConfig, ...]:
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
    check_keys(raw, _EXTENDER_KEYS, field)
    url = raw.get("urlPrefix")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"{field}.urlPrefix", url, "required: an http:// or https:// URL")
    verbs = {
        key: string_field(raw.get(key), f"{field}.{key}")
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
        enable_https=bool_field(raw.get("enableHTTPS"), f"{field}.enableHTTPS"),
        tls=_parse_tls(raw.get("tlsConfig"), f"{field}.tlsConfig"),
        http_timeout=seconds if seconds > 0 else DEFAULT_EXTENDER_TIMEOUT,
        node_cache_capable=bool_field(raw.get("nodeCacheCapable"), f"{field}.nodeCacheCapable"),
        managed_resources=_parse_managed(raw.get("managedResources"), f"{field}.managedResources"),
        ignorable=bool_field(raw.get("ignorable"), f"{field}.ignorable"),
    )


def _parse_tls(raw: object, field: str) -> ExtenderTLS | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "must be a mapping")
    check_keys(raw, _TLS_KEYS, field)
    return ExtenderTLS(
        insecure=bool_field(raw.get("insecure"), f"{field}.insecure"),
        server_name=string_field(raw.get("serverName"), f"{field}.serverName"),
        cert_file=string_field(raw.get("certFile"), f"{field}.certFile"),
        key_file=string_field(raw.get("keyFile"), f"{field}.keyFile"),
        ca_file=string_field(raw.get("caFile"), f"{field}.caFile"),
        cert_data=b64_field(raw.get("certData"), f"{field}.certData"),
        key_data=b64_field(raw.get("keyData"), f"{field}.keyData"),
        ca_data=b64_field(raw.get("caData"), f"{field}.caData"),
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
        check_keys(item, _MANAGED_KEYS, where)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name", name, "required")
        resources.append(
            ManagedResource(
                name=name,
                ignored_by_scheduler=bool_field(
                    item.get("ignoredByScheduler"), f"{where}.ignoredByScheduler"
                ),
            )
        )
    return tuple(resources)
