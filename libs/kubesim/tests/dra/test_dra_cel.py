"""CEL device selectors: the DRA environment, the Kubernetes quantity/semver functions, errors."""

from __future__ import annotations

import pytest

from hami_kubesim.dra.cel import CelError, device_variable, selector_matches
from hami_kubesim.dra.model import parse_device
from hami_kubesim.dra.quantities import format_quantity
from hami_kubesim.dra_objects import DRIVER, gpu_device

DEVICE = gpu_device(0, memory="16Gi", model="A100")
DEVICE["attributes"]["driverVersion"] = {"version": "550.54.15"}
DEVICE["attributes"]["resource.kubernetes.io/pcieRoot"] = {"string": "pci0000:00"}
VARIABLE = device_variable(
    parse_device(DEVICE, driver=DRIVER, pool="node-a", node_local=True, node_selector=None)
)
A = f'device.attributes["{DRIVER}"]'
C = f'device.capacity["{DRIVER}"]'


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f'device.driver == "{DRIVER}"', True),
        (f'{A}.model == "A100" && {A}.index == 0', True),
        (f'{A}.model in ["H100", "H200"]', False),
        (f'{A}.uuid.startsWith("GPU-")', True),
        ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', True),
        ('device.attributes["unknown.example.com"].size() == 0', True),
        ("device.allowMultipleAllocations", True),
        (f'{C}.memory.compareTo(quantity("8Gi")) >= 0', True),
        (f'{C}.memory.isGreaterThan(quantity("16Gi"))', False),
        (f'{C}.memory.isLessThan(quantity("17179869185"))', True),
        (f'{C}.memory == quantity("16384Mi")', True),
        (f"{C}.cores.asInteger() == 100 && {C}.cores.isInteger()", True),
        (f'{C}.memory.sub(quantity("8Gi")).compareTo(quantity("8Gi")) == 0', True),
        (f"{C}.cores.add(1).asInteger() == 101", True),
        ('quantity("1500m").asApproximateFloat() == 1.5 && quantity("-1").sign() == -1', True),
        ('isQuantity("1Gi") && !isQuantity("1 Gi")', True),
        (f'{A}.driverVersion.isGreaterThan(semver("550.0.0"))', True),
        (f"{A}.driverVersion.major() == 550 && {A}.driverVersion.minor() == 54", True),
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
        ('isSemver("1.2.3") && !isSemver("1.2")', True),
        (f'cel.bind(m, {C}.memory, m.compareTo(quantity("1Gi")) > 0 && m.isInteger())', True),
        (f"has({A}.model) && !has({A}.nosuch)", True),
    ],
)
def test_selector_values(expression: str, expected: bool) -> None:
    assert selector_matches(expression, VARIABLE) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (f"{A}.nosuch == 1", "runtime error"),  # unknown field inside a known domain
        (f"{A}.index", "must evaluate to a bool"),
        ("device.driver ==", "compilation failed"),
        (f'{C}.memory < quantity("1")', "runtime error"),  # no ordering operators on quantities
        ('quantity("not a quantity") == quantity("1")', "runtime error"),
    ],
)
def test_selector_errors(expression: str, message: str) -> None:
    with pytest.raises(CelError, match=message):
        selector_matches(expression, VARIABLE)


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (16 << 30, True, "16Gi"),
        (1536, True, "1536"),
        (0, True, "0"),
        (100, False, "100"),
        (2000, False, "2k"),
        (1 << 20, True, "1Mi"),
    ],
)
def test_canonical_quantities(value: int, binary: bool, text: str) -> None:
    assert format_quantity(value, binary=binary) == text
