"""The DRA driver's wire names: device names and how a published device's attributes read."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_protocol.dra_driver import DRIVER, attribute_value, device_index, device_name


@given(st.integers(min_value=0, max_value=10_000))
def test_device_names_round_trip(index: int) -> None:
    assert device_index(device_name(index)) == index


@pytest.mark.parametrize("name", ["gpu-01", "gpu--1", "cpu-0", "gpu-", "gpu-0x"])
def test_other_names_are_not_this_drivers(name: str) -> None:
    assert device_index(name) is None


@pytest.mark.parametrize(
    ("attributes", "value"),
    [
        ({"uuid": {"string": "GPU-1"}}, "GPU-1"),
        ({f"{DRIVER}/uuid": {"string": "GPU-2"}}, "GPU-2"),  # qualified, as CEL names it
        ({"uuid": {"int": 3}}, 3),
        ({"uuid": {"bool": False}}, False),
        ({"uuid": {"version": "1.2.3"}}, "1.2.3"),
        ({"uuid": {"unknown": 1}}, None),
        ({"uuid": "GPU-raw"}, None),  # not a DeviceAttribute
        ({}, None),
        (None, None),
        ([], None),
    ],
)
def test_attribute_values(attributes: Any, value: object) -> None:
    assert attribute_value(attributes, "uuid") == value
