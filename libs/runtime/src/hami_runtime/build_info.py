"""``hami_build_info``: HAMi's build-information gauge, the same on every service."""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import CollectorRegistry, Gauge

__all__ = ["package_version", "register_build_info"]


def package_version(distribution: str) -> str:
    """The installed version of ``distribution`` (``unknown`` when it is not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def register_build_info(registry: CollectorRegistry, *, distribution: str) -> None:
    """``hami_build_info{version,revision,build_date,python_version,compiler,platform} 1``.

    HAMi's label set, with ``python_version`` in place of ``go_version``.
    """
    info = Gauge(
        "hami_build_info",
        "Build information (always 1).",
        ["version", "revision", "build_date", "python_version", "compiler", "platform"],
        registry=registry,
    )
    info.labels(
        version=package_version(distribution),
        revision="",
        build_date="",
        python_version=platform.python_version(),
        compiler=platform.python_implementation(),
        platform=f"{platform.system().lower()}/{platform.machine()}",
    ).set(1)
