"""Which mutating webhooks a request must be sent to.

Holds the parsed form of ``admissionregistration.k8s.io/v1`` MutatingWebhookConfiguration objects
(frozen dataclasses, defaults applied as the API server's defaulting would) and the pure matching
rules the API server applies before calling a webhook: ``rules`` (operations, API groups and
versions, resources with subresource wildcards, scope), ``namespaceSelector`` and
``objectSelector`` (label selectors, compiled by :mod:`hami_protocol.selectors`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hami_kube.objects import ObjectView
from hami_protocol.errors import ConfigError, ProtocolError
from hami_protocol.selectors import EVERYTHING, LabelSelector, parse_label_selector

__all__ = [
    "ClientConfig",
    "MutatingWebhook",
    "RequestAttributes",
    "Rule",
    "ServiceReference",
    "parse_configuration",
    "webhooks_in_order",
]

FailurePolicy = Literal["Fail", "Ignore"]
ReinvocationPolicy = Literal["Never", "IfNeeded"]

_OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT", "*"})
_SCOPES = frozenset({"Cluster", "Namespaced", "*"})
_SIDE_EFFECTS = frozenset({"None", "NoneOnDryRun", "Some", "Unknown"})
_DEFAULT_TIMEOUT_SECONDS = 10
_MAX_TIMEOUT_SECONDS = 30


@dataclass(frozen=True, slots=True)
class RequestAttributes:
    """What is being admitted: the facts the ``rules`` of a webhook are matched against."""

    operation: str
    group: str
    version: str
    resource: str
    subresource: str = ""
    namespaced: bool = True


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``RuleWithOperations`` entry."""

    operations: frozenset[str]
    api_groups: frozenset[str]
    api_versions: frozenset[str]
    resources: tuple[str, ...]
    scope: str = "*"

    def matches(self, attrs: RequestAttributes) -> bool:
        return (
            _wild_in(attrs.operation, self.operations)
            and _wild_in(attrs.group, self.api_groups)
            and _wild_in(attrs.version, self.api_versions)
            and self._resource_matches(attrs)
            and self._scope_matches(attrs)
        )

    def _resource_matches(self, attrs: RequestAttributes) -> bool:
        # Same split as the API server: "pods" -> ("pods", ""), "*/*" and "pods/*" carry a
        # subresource wildcard, which also matches the main resource (empty subresource).
        for entry in self.resources:
            resource, _, subresource = entry.partition("/")
            resource_ok = resource in {"*", attrs.resource}
            subresource_ok = subresource in {"*", attrs.subresource}
            if resource_ok and subresource_ok:
                return True
        return False

    def _scope_matches(self, attrs: RequestAttributes) -> bool:
        if self.scope == "Cluster":
            return not attrs.namespaced
        if self.scope == "Namespaced":
            return attrs.namespaced
        return True


@dataclass(frozen=True, slots=True)
class ServiceReference:
    """``clientConfig.service``: where the API server would reach the webhook in-cluster."""

    namespace: str
    name: str
    path: str = ""
    port: int = 443


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """``clientConfig``: exactly one of ``url`` and ``service``, plus an optional CA bundle."""

    url: str | None
    service: ServiceReference | None
    ca_bundle: bytes | None


@dataclass(frozen=True, slots=True)
class MutatingWebhook:
    """One webhook of a configuration, defaults applied."""

    configuration: str
    index: int
    name: str
    client_config: ClientConfig
    rules: tuple[Rule, ...]
    failure_policy: FailurePolicy = "Fail"
    namespace_selector: LabelSelector = EVERYTHING
    object_selector: LabelSelector = EVERYTHING
    side_effects: str = "None"
    timeout_seconds: int = _DEFAULT_TIMEOUT_SECONDS
    review_versions: tuple[str, ...] = ("v1",)
    reinvocation_policy: ReinvocationPolicy = "Never"
    match_conditions: tuple[str, ...] = ()

    @property
    def uid(self) -> str:
        """Identity across one dispatch: configuration, webhook name and position."""
        return f"{self.configuration}/{self.name}/{self.index}"

    def matches_rules(self, attrs: RequestAttributes) -> bool:
        return any(rule.matches(attrs) for rule in self.rules)

    def matches_object(self, obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> bool:
        """``objectSelector`` matches if either the new or the old object matches."""
        return any(
            self.object_selector.matches(ObjectView(candidate).labels)
            for candidate in (obj, old)
            if candidate is not None
        )


def webhooks_in_order(
    configurations: Iterable[Mapping[str, Any]],
) -> tuple[list[MutatingWebhook], list[ConfigError]]:
    """All webhooks of ``configurations`` in the order the API server calls them.

    Configurations are ordered by name, webhooks by their position inside it.  A malformed webhook
    is left out and its error returned, so one bad entry does not disable the others.
    """
    webhooks: list[MutatingWebhook] = []
    errors: list[ConfigError] = []
    for configuration in sorted(configurations, key=lambda c: ObjectView(c).name):
        parsed, bad = parse_configuration(configuration)
        webhooks.extend(parsed)
        errors.extend(bad)
    return webhooks, errors


def parse_configuration(
    configuration: Mapping[str, Any],
) -> tuple[list[MutatingWebhook], list[ConfigError]]:
    """Parse one MutatingWebhookConfiguration object; return its good webhooks and the errors."""
    name = ObjectView(configuration).name
    raw_webhooks = configuration.get("webhooks") or []
    if not isinstance(raw_webhooks, list):
        return [], [ConfigError(f"{name}.webhooks", raw_webhooks, "must be a list")]
    webhooks: list[MutatingWebhook] = []
    errors: list[ConfigError] = []
    for index, raw in enumerate(raw_webhooks):
        try:
            webhooks.append(_parse_webhook(name, index, raw))
        except ConfigError as exc:
            errors.append(exc)
    return webhooks, errors


def _label_selector(raw: object, field: str) -> LabelSelector:
    """A ``metav1.LabelSelector``; ``None`` (absent) is the empty selector, matching everything."""
    if raw is None:
        return EVERYTHING
    try:
        return parse_label_selector(raw, annotation=field, path=field)
    except ProtocolError as exc:
        raise ConfigError(field, exc.value, exc.reason) from exc


def _parse_webhook(configuration: str, index: int, raw: object) -> MutatingWebhook:
    field = f"{configuration}.webhooks[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "a webhook must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{field}.name", name, "must be a non-empty string")
    field = f"{configuration}.webhooks[{name}]"
    failure_policy: FailurePolicy
    match raw.get("failurePolicy") or "Fail":
        case "Fail":
            failure_policy = "Fail"
        case "Ignore":
            failure_policy = "Ignore"
        case other:
            raise ConfigError(f"{field}.failurePolicy", other, "must be Fail or Ignore")
    reinvocation: ReinvocationPolicy
    match raw.get("reinvocationPolicy") or "Never":
        case "Never":
            reinvocation = "Never"
        case "IfNeeded":
            reinvocation = "IfNeeded"
        case other:
            raise ConfigError(f"{field}.reinvocationPolicy", other, "must be Never or IfNeeded")
    side_effects = raw.get("sideEffects") or "Unknown"
    if side_effects not in _SIDE_EFFECTS:
        raise ConfigError(f"{field}.sideEffects", side_effects, "unknown side-effect class")
    return MutatingWebhook(
        configuration=configuration,
        index=index,
        name=name,
        client_config=_parse_client_config(raw.get("clientConfig"), f"{field}.clientConfig"),
        rules=_parse_rules(raw.get("rules"), f"{field}.rules"),
        failure_policy=failure_policy,
        namespace_selector=_label_selector(
            raw.get("namespaceSelector"), f"{field}.namespaceSelector"
        ),
        object_selector=_label_selector(raw.get("objectSelector"), f"{field}.objectSelector"),
        side_effects=side_effects,
        timeout_seconds=_parse_timeout(raw.get("timeoutSeconds"), f"{field}.timeoutSeconds"),
        review_versions=_parse_review_versions(
            raw.get("admissionReviewVersions"), f"{field}.admissionReviewVersions"
        ),
        reinvocation_policy=reinvocation,
        match_conditions=_parse_match_conditions(raw.get("matchConditions")),
    )


def _parse_client_config(raw: object, field: str) -> ClientConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "required object")
    url = raw.get("url")
    service_raw = raw.get("service")
    if (url is None) == (service_raw is None):
        raise ConfigError(field, dict(raw), "exactly one of url and service must be set")
    if url is not None and (
        not isinstance(url, str) or not url.startswith(("https://", "http://"))
    ):
        raise ConfigError(f"{field}.url", url, "must be an https:// (or, here, http://) URL")
    service = None if service_raw is None else _parse_service(service_raw, f"{field}.service")
    return ClientConfig(
        url=url, service=service, ca_bundle=_parse_ca_bundle(raw.get("caBundle"), field)
    )


def _parse_service(raw: object, field: str) -> ServiceReference:
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "must be an object")
    namespace, name = raw.get("namespace"), raw.get("name")
    if not isinstance(namespace, str) or not namespace:
        raise ConfigError(f"{field}.namespace", namespace, "required")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{field}.name", name, "required")
    path = raw.get("path") or ""
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise ConfigError(f"{field}.path", path, "must start with '/'")
    port = raw.get("port", 443)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ConfigError(f"{field}.port", port, "must be a port number 1..65535")
    return ServiceReference(namespace=namespace, name=name, path=path, port=port)


def _parse_ca_bundle(raw: object, field: str) -> bytes | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        raise ConfigError(f"{field}.caBundle", raw, "must be base64 text")
    try:
        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConfigError(f"{field}.caBundle", raw, f"invalid base64: {exc}") from exc


def _parse_rules(raw: object, field: str) -> tuple[Rule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(field, raw, "must be a list")
    return tuple(_parse_rule(item, f"{field}[{i}]") for i, item in enumerate(raw))


def _parse_rule(raw: object, field: str) -> Rule:
    if not isinstance(raw, Mapping):
        raise ConfigError(field, raw, "must be an object")
    operations = _string_list(raw.get("operations"), f"{field}.operations")
    unknown = set(operations) - _OPERATIONS
    if unknown:
        raise ConfigError(
            f"{field}.operations", operations, f"unknown operation(s) {sorted(unknown)}"
        )
    scope = raw.get("scope") or "*"
    if scope not in _SCOPES:
        raise ConfigError(f"{field}.scope", scope, "must be Cluster, Namespaced or *")
    return Rule(
        operations=frozenset(operations),
        api_groups=frozenset(_string_list(raw.get("apiGroups"), f"{field}.apiGroups")),
        api_versions=frozenset(_string_list(raw.get("apiVersions"), f"{field}.apiVersions")),
        resources=tuple(_string_list(raw.get("resources"), f"{field}.resources")),
        scope=scope,
    )


def _parse_timeout(raw: object, field: str) -> int:
    if raw is None:
        return _DEFAULT_TIMEOUT_SECONDS
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= _MAX_TIMEOUT_SECONDS:
        raise ConfigError(field, raw, f"must be an integer 1..{_MAX_TIMEOUT_SECONDS}")
    return raw


def _parse_review_versions(raw: object, field: str) -> tuple[str, ...]:
    versions = _string_list(raw, field)
    if not versions:
        raise ConfigError(field, raw, "required: a non-empty list such as ['v1']")
    return tuple(versions)


def _parse_match_conditions(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    return tuple(str(item.get("name", "")) for item in raw if isinstance(item, Mapping))


def _string_list(raw: object, field: str) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
        raise ConfigError(field, raw, "must be a list of strings")
    return list(raw)


def _wild_in(value: str, allowed: frozenset[str] | Sequence[str]) -> bool:
    return "*" in allowed or value in allowed
