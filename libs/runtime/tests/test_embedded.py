"""Services run inside a test's event loop, and the build-information gauge."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from hami_runtime.build_info import package_version, register_build_info
from hami_runtime.embedded import embedded


async def test_embedded_yields_what_the_service_started_and_stops_it_on_exit() -> None:
    stopped: list[bool] = []

    async def run(stop: asyncio.Event, on_started: Callable[[str], None]) -> None:
        on_started("listening on 1234")
        await stop.wait()
        stopped.append(True)

    async with embedded(run, name="svc") as running:
        assert running == "listening on 1234"
        assert not stopped
    assert stopped == [True]


async def test_a_service_failing_before_it_started_raises_its_error() -> None:
    async def run(stop: asyncio.Event, on_started: Callable[[str], None]) -> None:
        raise OSError("address already in use")

    with pytest.raises(OSError, match="address already in use"):
        async with embedded(run, name="svc"):
            pytest.fail("the block must not run")


async def test_a_service_returning_before_it_started_is_an_error() -> None:
    async def run(stop: asyncio.Event, on_started: Callable[[str], None]) -> None:
        return

    with pytest.raises(RuntimeError, match="svc stopped before it started"):
        async with embedded(run, name="svc"):
            pytest.fail("the block must not run")


def test_build_info_has_hamis_labels_and_the_package_version() -> None:
    registry = CollectorRegistry()
    register_build_info(registry, distribution="hami-kube")
    labels = {
        "version": package_version("hami-kube"),
        "revision": "",
        "build_date": "",
    }
    samples = [s for m in registry.collect() for s in m.samples if s.name == "hami_build_info"]
    assert len(samples) == 1
    assert samples[0].value == 1
    assert {k: samples[0].labels[k] for k in labels} == labels
    assert samples[0].labels["version"] == "0.1.0"
    assert set(samples[0].labels) == {
        "version",
        "revision",
        "build_date",
        "python_version",
        "compiler",
        "platform",
    }


def test_package_version_of_something_not_installed_is_unknown() -> None:
    assert package_version("no-such-distribution-here") == "unknown"
