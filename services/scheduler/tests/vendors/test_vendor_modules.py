"""Every vendor module's fits share one shape, so a registry can call any of them alike."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterator
from types import ModuleType

import pytest

import hami_scheduler.core.vendors as vendors
from hami_scheduler.core import FitContext, FitResult

from .vendor_helpers import vreq

HELPERS = {"common", "context", "standard"}


def vendor_modules() -> Iterator[ModuleType]:
    for info in pkgutil.iter_modules(vendors.__path__):
        if info.name not in HELPERS:
            yield importlib.import_module(f"{vendors.__name__}.{info.name}")


def fits() -> list[tuple[str, Callable[..., FitResult]]]:
    found = []
    for module in vendor_modules():
        for name in module.__all__:
            if name.startswith("fit"):
                found.append((f"{module.__name__.rsplit('.', 1)[1]}.{name}", getattr(module, name)))
    return found


def test_every_vendor_module_has_a_fit() -> None:
    modules = {module.__name__.rsplit(".", 1)[1] for module in vendor_modules()}
    assert modules == {
        "amd", "ascend", "awsneuron", "biren", "enflame", "kunlun", "metax_gpu", "metax_sgpu",
        "mthreads", "vastai",
    }  # fmt: skip
    assert {name.split(".")[0] for name, _ in fits()} == modules


@pytest.mark.parametrize(("name", "fit"), fits())
def test_a_fit_takes_devices_request_and_context(name: str, fit: Callable[..., FitResult]) -> None:
    assert list(inspect.signature(fit).parameters) == ["devices", "request", "ctx"]
    nothing = fit([], vreq("any", 0), FitContext())
    assert nothing == FitResult(ok=True)
    missing = fit([], vreq("any", 1, mem=1), FitContext())
    assert not missing.ok
    assert missing.devices == ()
