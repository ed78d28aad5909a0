"""The name formats of ``resource.k8s.io`` fields and the field errors about them, with the
messages ``apimachinery``'s ``IsDNS1123Label`` / ``IsDNS1123Subdomain`` / ``IsCIdentifier``
give (each problem its own cause, as ``field.Invalid`` per message)."""

from __future__ import annotations

import re
import uuid
from typing import Any, Final

from hami_kubesim.objects.validation import (
    LABEL_MSG,
    SUBDOMAIN_MSG,
    Cause,
    invalid,
    required,
    too_long,
)

_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
C_IDENTIFIER_MSG: Final = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used "
    "for validation is '[A-Za-z_][A-Za-z0-9_]*')"
)
DRIVER_NAME_MAX: Final = 63
POOL_NAME_MAX: Final = 253
DEVICE_MAX_ID_LENGTH: Final = 32
UID_MESSAGE: Final = (
    "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with "
    "lowercase hexadecimal characters"
)


def label_problems(value: str) -> list[str]:
    """``IsDNS1123Label``."""
    out = ["must be no more than 63 characters"] if len(value) > 63 else []
    if not _LABEL.match(value):
        out.append(LABEL_MSG)
    return out


def subdomain_problems(value: str) -> list[str]:
    """``IsDNS1123Subdomain``."""
    out = ["must be no more than 253 characters"] if len(value) > 253 else []
    if not _SUBDOMAIN.match(value):
        out.append(SUBDOMAIN_MSG)
    return out


def text(value: Any) -> str:
    """A name field as Go would have decoded it (anything not a string reads as empty)."""
    return value if isinstance(value, str) else ""


def dns_label(where: str, value: Any) -> list[Cause]:
    name = text(value)
    return [invalid(where, name, why) for why in label_problems(name)]


def dns_subdomain(where: str, value: Any) -> list[Cause]:
    name = text(value)
    return [invalid(where, name, why) for why in subdomain_problems(name)]


def required_subdomain(where: str, value: Any) -> list[Cause]:
    """A required DNS subdomain (device class names)."""
    return [required(where)] if not text(value) else dns_subdomain(where, value)


def driver_name(where: str, value: Any) -> list[Cause]:
    """``ValidateCSIDriverName``: required, at most 63 bytes, a DNS subdomain once lower-cased."""
    name = text(value)
    causes = [required(where)] if not name else []
    if len(name) > DRIVER_NAME_MAX:
        causes.append(too_long(where, DRIVER_NAME_MAX))
    causes.extend(invalid(where, name, why) for why in subdomain_problems(name.lower()))
    return causes


def pool_name(where: str, value: Any) -> list[Cause]:
    """``validatePoolName``: required, at most 253 bytes, ``/``-separated DNS subdomains."""
    name = text(value)
    if not name:
        return [required(where)]
    causes = [too_long(where, POOL_NAME_MAX)] if len(name) > POOL_NAME_MAX else []
    for part in name.split("/"):
        causes.extend(invalid(where, part, why) for why in subdomain_problems(part))
    return causes


def node_name(where: str, value: Any) -> list[Cause]:
    """``ValidateNodeName``: a DNS subdomain."""
    return dns_subdomain(where, value)


def _c_identifier(where: str, value: str) -> list[Cause]:
    causes = [too_long(where, DEVICE_MAX_ID_LENGTH)] if len(value) > DEVICE_MAX_ID_LENGTH else []
    if not _C_IDENTIFIER.match(value):
        causes.append(invalid(where, value, C_IDENTIFIER_MSG))
    return causes


def qualified_name(where: str, value: str) -> list[Cause]:
    """``validateQualifiedName``: a C identifier, optionally behind ``<driver-like domain>/``."""
    parts = value.split("/")
    if len(parts) == 1:
        return _c_identifier(where, parts[0])
    if len(parts) > 2:
        return [invalid(where, value, "must not contain more than one slash")]
    domain, name = parts
    causes = (
        [invalid(where, "", "the domain must not be empty")]
        if not domain
        else driver_name(where, domain)
    )
    if not name:
        causes.append(invalid(where, "", "the name must not be empty"))
    else:
        causes.extend(_c_identifier(where, name))
    return causes


def fully_qualified_name(where: str, value: Any) -> list[Cause]:
    """``validateFullyQualifiedName``: a qualified name that has a domain."""
    name = text(value)
    causes = qualified_name(where, name)
    if "/" not in name:
        causes.append(
            invalid(
                where,
                name,
                "a fully qualified name must be a domain and a name separated by a slash",
            )
        )
    return causes


def uid(where: str, value: Any) -> list[Cause]:
    """``validateUID`` (share IDs): an RFC 4122 UUID in lower-case normalized form."""
    given = text(value)
    if len(given) not in (32, 36, 38, 45):  # plain, dashed, {braced}, urn:uuid: (Go's uuid)
        return [invalid(where, given, f"error validating uid: invalid UUID length: {len(given)}")]
    try:
        uuid.UUID(given)
    except ValueError:
        return [invalid(where, given, "error validating uid: invalid UUID format")]
    if len(given) != 36 or given != given.lower():
        return [invalid(where, given, UID_MESSAGE)]
    return []
