"""The library's one error hierarchy.

Every decoder, parser and validator in ``hami_protocol`` raises only these types, so a caller can
catch ``ProtocolError`` and be sure nothing else escapes.  Messages name the annotation key or
config field and quote the offending value, truncated so garbage cannot flood a log line.
"""

from __future__ import annotations

__all__ = [
    "MAX_QUOTED",
    "ConfigError",
    "DecodeError",
    "ProtocolError",
    "RequestError",
    "ValidationError",
    "quote_value",
]

MAX_QUOTED = 120


def quote_value(value: object, limit: int = MAX_QUOTED) -> str:
    """Render ``value`` for an error message: repr-quoted, cut to ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) > limit:
        text = text[:limit] + f"...(+{len(text) - limit} chars)"
    return repr(text)


class ProtocolError(ValueError):
    """Base of every error raised by ``hami_protocol``.

    ``key`` is the annotation key, resource name or config field the bad value came from (may be
    empty when a codec is called without one); ``value`` is the offending input.
    """

    def __init__(self, key: str, value: object, reason: str) -> None:
        self.key = key
        self.value = value
        self.reason = reason
        where = f"{key}: " if key else ""
        super().__init__(f"{where}{reason} (value {quote_value(value)})")


class DecodeError(ProtocolError):
    """A wire value (annotation, label, JSON document) could not be decoded."""


class ValidationError(ProtocolError):
    """A value decoded but breaks a rule of the protocol (range, enum, combination)."""


class RequestError(ProtocolError):
    """A container's resource request is malformed (quantity syntax, negative count, ...)."""


class ConfigError(ProtocolError):
    """A configuration document (device-config.yaml, node config.json) is invalid."""
