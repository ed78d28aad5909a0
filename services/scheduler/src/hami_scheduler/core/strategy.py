"""Where vendors differ: one :class:`VendorStrategy` per vendor word, found by :func:`strategy_for`.

Most vendors walk HAMi's standard fit loop (:func:`~hami_scheduler.core.fit.fit_request`) and
add nothing to the node score, so the default strategy is exactly that and costs NVIDIA nothing
but one dictionary lookup per request.  A vendor with its own rules gets a row in
:data:`FIT_MODULES`: the module ``hami_scheduler.core.vendors.<module>`` and the names of its
``fit`` and (optional) ``score`` functions.  Modules are imported on first use; a row whose module
is not there (yet) falls back to the standard loop, so a vendor's rules plug in by adding one
module and one row.

Contract of a vendor ``fit``: the same arguments and result as :func:`fit_request` — devices of
that vendor already sorted by the GPU policy (walk them from the end, as HAMi does), the
container's request of that vendor, the :class:`~hami_scheduler.core.fit.FitContext`.

Contract of a vendor ``score``: ``score(node_devices, pod_devices)`` with every device of the node
(all vendors) *before* the pod and the pod's devices of that vendor per container (init first);
a row with ``score_policy`` also passes ``policy=`` the node policy (``binpack``/``spread``).  The
value is added to the node's usage score (HAMi adds every device vendor's ``ScoreNode``).

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
from hami_scheduler.core.usage import DeviceUsage

__all__ = [
    "FAMILY_PREFIXES",
    "FIT_MODULES",
    "STANDARD",
    "Fit",
    "FitModule",
    "NodeScore",
    "VendorStrategy",
    "family_of",
    "load_strategy",
    "strategy_for",
]

Fit = Callable[[Sequence[DeviceUsage], ContainerDeviceRequest, FitContext], FitResult]
NodeScore = Callable[[Sequence[DeviceUsage], Sequence[ContainerDevices], NodePolicy], float]

VENDORS_PACKAGE: Final = "hami_scheduler.core.vendors"


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
    """A vendor's own rules: ``hami_scheduler.core.vendors.<module>.<fit>`` (and ``<score>``)."""

    module: str
    fit: str = "fit"
    score: str | None = None
    score_policy: bool = False
    """Whether ``score`` takes the node policy as ``policy=``."""


FIT_MODULES: Final[Mapping[str, FitModule]] = MappingProxyType(
    {
        # Node scores whose signatures need node or pod facts the registry does not pass yet
        # (Ascend's chip word, MetaX's node annotations and pod context) are left out for now.
        "Ascend": FitModule("ascend"),
        "AWSNeuron": FitModule("awsneuron"),
        "Enflame": FitModule("enflame"),
        "GCU": FitModule("enflame", fit="fit_gcu"),
        "kunlun": FitModule("kunlun", score="score"),
        "XPU": FitModule("kunlun", fit="fit_vxpu"),
        "Metax-GPU": FitModule("metax_gpu"),
        "Metax-SGPU": FitModule("metax_sgpu"),
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


def _attribute(module: object, name: str | None) -> object | None:
    return None if name is None else getattr(module, name, None)


def load_strategy(family: str, row: FitModule | None) -> VendorStrategy:
    """The strategy ``row`` names (a dotted ``module`` is taken as a full module path); the
    standard one when there is no row or its module does not exist."""
    if row is None:
        return STANDARD
    path = row.module if "." in row.module else f"{VENDORS_PACKAGE}.{row.module}"
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as exc:
        if exc.name is not None and path.startswith(exc.name):
            return STANDARD
        raise
    fit = _attribute(module, row.fit)
    score = _attribute(module, row.score)
    return VendorStrategy(
        family,
        fit=cast("Fit", fit) if callable(fit) else fit_request,
        score=_node_score(score, policy=row.score_policy) if callable(score) else None,
    )


def _node_score(score: Callable[..., float], *, policy: bool) -> NodeScore:
    if policy:
        return lambda devices, pod, node_policy: score(devices, pod, policy=node_policy)
    return lambda devices, pod, node_policy: score(devices, pod)


@cache
def strategy_for(word: str) -> VendorStrategy:
    """The strategy of vendor ``word`` (cached: the lookup is on every fit)."""
    family = family_of(word)
    return load_strategy(family, FIT_MODULES.get(family))
