"""Where vendors differ: one :class:`VendorStrategy` per vendor word, found by :func:`strategy_for`.

Most vendors walk HAMi's standard fit loop (:func:`~hami_scheduler.core.fit.fit_request`) and
add nothing to the node score, so the default strategy is exactly that and costs NVIDIA nothing
but one dictionary lookup per request.  A vendor with its own rules gets a row in
:data:`FIT_MODULES`: the module ``hami_scheduler.core.vendors.<module>``, the name of its
``fit``, and — when it scores nodes — the name of its ``score`` and the *shape* of that
function's arguments (:data:`SCORE_SHAPES`).  Every row is loaded when this module is imported:
a row naming a module or function that does not exist, or a score shape nobody knows, raises
:class:`StrategyError` then, so a typo can never silently turn a vendor into a standard one.

Contract of a vendor ``fit``: the same arguments and result as :func:`fit_request` — devices of
that vendor already sorted by the GPU policy (walk them from the end, as HAMi does), the
container's request of that vendor, the :class:`~hami_scheduler.core.fit.FitContext` (whose
``vendor`` carries the pod and node facts of :mod:`.vendors.context`).

Each vendor module's ``score`` keeps its own signature; the registry adapts it to one
:data:`NodeScore` over :class:`ScoreArgs` (the vendor word, the node before the pod, the pod's
devices of that vendor per container, the node policy and the vendor context):

* ``devices`` — ``score(node_devices, pod_devices)`` with every device of the node (Kunlun,
  Vastai);
* ``ascend`` — ``score(vendor, node_devices, pod_devices)``, the chip's common word first;
* ``metax-gpu`` — ``score(node_policy, requested, losses, scores)``: the GPUs the pod asks in
  all and the node's ``metax-tech.com/gpu.topology.losses``/``.scores`` maps
  (:attr:`NodeVendorFacts.metax_losses <.vendors.context.NodeVendorFacts.metax_losses>`);
* ``metax-sgpu`` — ``score(node_policy, node_devices, pod_devices, vendor_ctx)`` with the node's
  devices of that vendor.

The value is added to the node's usage score (HAMi adds every device vendor's ``ScoreNode``).
Ascend's common words are per chip (``Ascend910B3``...), so a word is looked up exactly first and
then by its family prefix (:data:`FAMILY_PREFIXES`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Final, cast

from hami_protocol.pod.devices import ContainerDevices
from hami_protocol.pod.policy import NodePolicy
from hami_protocol.request.containers import ContainerDeviceRequest
from hami_scheduler.core.fit import FitContext, FitResult, fit_request
from hami_scheduler.core.usage.device import DeviceUsage
from hami_scheduler.core.usage.node import NodeUsage
from hami_scheduler.core.vendors.context import NO_VENDOR_CONTEXT, VendorContext

__all__ = [
    "FAMILY_PREFIXES",
    "FIT_MODULES",
    "SCORE_SHAPES",
    "STANDARD",
    "STRATEGIES",
    "Fit",
    "FitModule",
    "NodeScore",
    "ScoreArgs",
    "StrategyError",
    "VendorStrategy",
    "family_of",
    "load_strategy",
    "strategy_for",
]

Fit = Callable[[Sequence[DeviceUsage], ContainerDeviceRequest, FitContext], FitResult]

VENDORS_PACKAGE: Final = "hami_scheduler.core.vendors"


class StrategyError(Exception):
    """A :data:`FIT_MODULES` row names something that does not exist."""


@dataclass(frozen=True, slots=True)
class ScoreArgs:
    """What a vendor's node score may read."""

    word: str
    node: NodeUsage
    """The node before the pod."""
    pod_devices: Sequence[ContainerDevices]
    """The pod's devices of :attr:`word`, one entry per container (init first)."""
    node_policy: NodePolicy = "binpack"
    vendor: VendorContext = NO_VENDOR_CONTEXT


NodeScore = Callable[[ScoreArgs], float]


@dataclass(frozen=True, slots=True)
class VendorStrategy:
    """How the scheduler core treats one vendor's devices."""

    family: str
    fit: Fit = fit_request
    score: NodeScore | None = None
    """``None``: the vendor adds nothing to the node score."""

    @property
    def standard(self) -> bool:
        return self.fit is fit_request and self.score is None


STANDARD: Final = VendorStrategy("standard")


@dataclass(frozen=True, slots=True)
class FitModule:
    """A vendor's own rules: ``hami_scheduler.core.vendors.<module>.<fit>`` (and ``<score>``,
    called as its :attr:`score_shape` says)."""

    module: str
    fit: str = "fit"
    score: str | None = None
    score_shape: str = "devices"


def _requested(args: ScoreArgs) -> int:
    return sum(len(container) for container in args.pod_devices)


def _shape_devices(score: Callable[..., float]) -> NodeScore:
    return lambda args: score(args.node.devices, args.pod_devices)


def _shape_ascend(score: Callable[..., float]) -> NodeScore:
    return lambda args: score(args.word, args.node.devices, args.pod_devices)


def _shape_metax_gpu(score: Callable[..., float]) -> NodeScore:
    def adapted(args: ScoreArgs) -> float:
        facts = args.node.layout.vendor
        return score(args.node_policy, _requested(args), facts.metax_losses, facts.metax_scores)

    return adapted


def _shape_metax_sgpu(score: Callable[..., float]) -> NodeScore:
    return lambda args: score(
        args.node_policy, args.node.vendor_devices(args.word), args.pod_devices, args.vendor
    )


SCORE_SHAPES: Final[Mapping[str, Callable[[Callable[..., float]], NodeScore]]] = MappingProxyType(
    {
        "devices": _shape_devices,
        "ascend": _shape_ascend,
        "metax-gpu": _shape_metax_gpu,
        "metax-sgpu": _shape_metax_sgpu,
    }
)
"""Score shape word → the adapter from the module's signature to :data:`NodeScore`."""


FIT_MODULES: Final[Mapping[str, FitModule]] = MappingProxyType(
    {
        "AMD": FitModule("amd"),
        "Ascend": FitModule("ascend", score="score", score_shape="ascend"),
        "AWSNeuron": FitModule("awsneuron"),
        "Biren": FitModule("biren"),
        "Enflame": FitModule("enflame"),
        "GCU": FitModule("enflame", fit="fit_gcu"),
        "kunlun": FitModule("kunlun", score="score"),
        "XPU": FitModule("kunlun", fit="fit_vxpu"),
        "Metax-GPU": FitModule("metax_gpu", score="score", score_shape="metax-gpu"),
        "Metax-SGPU": FitModule("metax_sgpu", score="score", score_shape="metax-sgpu"),
        "Mthreads": FitModule("mthreads"),
        "Vastai": FitModule("vastai", score="score"),
    }
)
"""Vendor family → the module holding its own fit (and score); every other family is standard."""

FAMILY_PREFIXES: Final = ("Ascend",)
"""Families whose common words are per chip and start with the family name."""


def family_of(word: str) -> str:
    """The family a common word belongs to (the word itself unless a prefix family claims it)."""
    if word in FIT_MODULES:
        return word
    for prefix in FAMILY_PREFIXES:
        if word.startswith(prefix):
            return prefix
    return word


def _function(module: object, path: str, name: str) -> Callable[..., object]:
    found = getattr(module, name, None)
    if not callable(found):
        raise StrategyError(f"{path} has no function {name!r}")
    return cast("Callable[..., object]", found)


def load_strategy(family: str, row: FitModule | None) -> VendorStrategy:
    """The strategy ``row`` names (a dotted ``module`` is taken as a full module path); the
    standard one when there is no row.  Raises :class:`StrategyError` when the row names a
    module, function or score shape that does not exist."""
    if row is None:
        return STANDARD
    path = row.module if "." in row.module else f"{VENDORS_PACKAGE}.{row.module}"
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as exc:
        raise StrategyError(f"vendor family {family!r}: no module {path}") from exc
    fit = _function(module, path, row.fit)
    score: NodeScore | None = None
    if row.score is not None:
        shape = SCORE_SHAPES.get(row.score_shape)
        if shape is None:
            raise StrategyError(
                f"vendor family {family!r}: unknown score shape {row.score_shape!r}"
            )
        score = shape(cast("Callable[..., float]", _function(module, path, row.score)))
    return VendorStrategy(family, fit=cast("Fit", fit), score=score)


STRATEGIES: Final[Mapping[str, VendorStrategy]] = MappingProxyType(
    {family: load_strategy(family, row) for family, row in FIT_MODULES.items()}
)
"""Every :data:`FIT_MODULES` row, loaded (at import: a bad row fails the scheduler's start)."""


@cache
def strategy_for(word: str) -> VendorStrategy:
    """The strategy of vendor ``word`` (cached: the lookup is on every fit)."""
    return STRATEGIES.get(family_of(word), STANDARD)
