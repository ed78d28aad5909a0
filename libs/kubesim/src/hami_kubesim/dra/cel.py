"""CEL device selectors (contract §3.4), evaluated with cel-python.

A selector sees one variable, ``device``: ``driver`` (string), ``attributes[<domain>].<id>`` and
``capacity[<domain>].<id>`` (unqualified names are filed under the driver's domain; an unknown
domain is an empty map, an unknown id a runtime error) and ``allowMultipleAllocations``.
Capacities are Quantities, ``version`` attributes semvers (:mod:`.celtypes`).  ``cel.bind(var,
init, expr)`` is supported as upstream enables it.  The result must be a bool; anything else,
a compile error or a runtime error is a :class:`CelError`, which aborts the allocation.

Compiled programs are cached per expression (the allocator evaluates the same class and request
selectors against every device).  Not modelled: the cost limit and static type checking of the
expression (upstream rejects some expressions at compile time that cel-python only fails on when
evaluating).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, cast

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator

from hami_kubesim.dra.celtypes import FUNCTIONS, Quantity, parse_semver
from hami_kubesim.dra.model import Attribute, Device

__all__ = ["CelError", "device_variable", "selector_matches"]


class CelError(Exception):
    """A selector that does not compile, fails at runtime, or is not a bool."""


class _Domains(celtypes.MapType):
    """``device.attributes`` / ``device.capacity``: a missing domain is an empty map."""

    def __missing__(self, key: Any) -> celtypes.MapType:
        return celtypes.MapType({})


class _Evaluator(Evaluator):
    """cel-python's interpreter plus the ``cel.bind`` macro Kubernetes enables."""

    def member_dot_arg(self, tree: lark.Tree[Any]) -> Any:
        member, method = tree.children[0], tree.children[1]
        if (
            isinstance(method, lark.Token)
            and method.value == "bind"
            and _is_ident(member, "cel")
            and len(tree.children) == 3
        ):
            args = cast(lark.Tree[Any], tree.children[2]).children
            if len(args) == 3:
                name = _ident_of(cast(lark.Tree[Any], args[0]))
                value = self.visit(cast(lark.Tree[Any], args[1]))
                if isinstance(value, CELEvalError):
                    return value
                return self.sub_evaluator(cast(lark.Tree[Any], args[2])).evaluate({name: value})
        return super().member_dot_arg(tree)

    def sub_evaluator(self, ast: lark.Tree[Any]) -> Evaluator:
        return _Evaluator(ast, activation=self.activation)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


def _is_ident(tree: object, name: str) -> bool:
    if not isinstance(tree, lark.Tree) or tree.data != "member":
        return False
    primary = tree.children[0]
    return (
        isinstance(primary, lark.Tree)
        and primary.data == "primary"
        and isinstance(ident := primary.children[0], lark.Tree)
        and ident.data == "ident"
        and cast(lark.Token, ident.children[0]).value == name
    )


def _ident_of(expr: lark.Tree[Any]) -> str:
    idents = list(expr.find_data("ident"))
    if len(idents) != 1:
        raise CelError("cel.bind: the first argument must be a variable name")
    return str(cast(lark.Token, idents[0].children[0]).value)


_ENVIRONMENT = celpy.Environment(runner_class=_Runner)


@lru_cache(maxsize=4096)
def _program(expression: str) -> celpy.Runner:
    try:
        return _ENVIRONMENT.program(_ENVIRONMENT.compile(expression), functions=FUNCTIONS)
    except CELParseError as exc:
        raise CelError(f"compilation failed: {exc}".strip()) from exc


def device_variable(device: Device) -> celtypes.MapType:
    """The ``device`` variable for one device."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, attribute in device.attributes.items():
        domain, ident = name.rsplit("/", 1)
        attributes.setdefault(domain, {})[ident] = _attribute_value(attribute)
    capacity: dict[str, dict[str, Any]] = {}
    for key, amount in device.capacity.items():
        domain, ident = (key if "/" in key else f"{device.id.driver}/{key}").rsplit("/", 1)
        capacity.setdefault(domain, {})[ident] = Quantity(amount.exact)
    return celtypes.MapType(
        {
            celtypes.StringType("driver"): celtypes.StringType(device.id.driver),
            celtypes.StringType("attributes"): _domains(attributes),
            celtypes.StringType("capacity"): _domains(capacity),
            celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(device.multi),
        }
    )


def selector_matches(expression: str, variable: celtypes.MapType) -> bool:
    """Evaluate one selector against a ``device`` variable from :func:`device_variable`."""
    program = _program(expression)
    try:
        result = program.evaluate({"device": variable})
    except CELEvalError as exc:
        raise CelError(f"runtime error: {exc.args[0] if exc.args else exc}") from exc
    except (TypeError, ValueError, KeyError) as exc:  # cel-python leaks some as Python errors
        raise CelError(f"runtime error: {exc}") from exc
    if isinstance(result, CELEvalError):
        raise CelError(f"runtime error: {result.args[0] if result.args else result}")
    if not isinstance(result, celtypes.BoolType):
        raise CelError(f"expression must evaluate to a bool, got {type(result).__name__}")
    return bool(result)


def _domains(values: Mapping[str, Mapping[str, Any]]) -> _Domains:
    return _Domains(
        {
            celtypes.StringType(domain): celtypes.MapType(
                {celtypes.StringType(k): v for k, v in entries.items()}
            )
            for domain, entries in values.items()
        }
    )


def _attribute_value(attribute: Attribute) -> Any:
    value = attribute.value
    if attribute.kind == "bool":
        return celtypes.BoolType(bool(value))
    if attribute.kind == "int":
        return celtypes.IntType(cast(int, value))
    if attribute.kind == "version":
        version = parse_semver(str(value))
        return version if version is not None else celtypes.StringType(str(value))
    return celtypes.StringType(str(value))
