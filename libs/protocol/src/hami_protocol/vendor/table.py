"""The device vendors as data: one frozen :class:`Vendor` row per common word.

A row says which container resources a vendor reads, how its memory resource converts to MiB,
its default cores, where the scheduler finds its devices (:attr:`Vendor.inventory`: a HAMi
register annotation in JSON or colon form, node capacity, or the vendor's own node annotation),
and which annotation keys carry its handshake, node lock, pod device lists and device selectors
(``None`` where the vendor has no such key).  Rows are built from a
:class:`~hami_protocol.config.device.DeviceConfig` by :func:`vendors_from_config` — the one
constructor — so a renamed resource in ``device-config.yaml`` flows into request parsing with no
code change.  The shape is in :mod:`hami_protocol.vendor.model`, one builder per vendor in
:mod:`hami_protocol.vendor.rows`.

Rows exist for NVIDIA, Cambricon MLU, Hygon DCU, Moore Threads, MetaX (whole GPU and sGPU),
AMD, Biren, Vastai, Kunlunxin (whole XPU ``kunlun`` and vXPU ``XPU``), AWS Neuron and Enflame
(whole GCU ``GCU`` and DRS slices ``Enflame``), plus one row per configured Iluvatar chip and
Ascend ``commonWord`` when those vendors are enabled (HAMi registers them only behind
``--enable-iluvatar`` / ``--enable-ascend``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from hami_protocol.config.device import DeviceConfig
from hami_protocol.errors import ConfigError
from hami_protocol.vendor.model import (
    CapacitySpec,
    FitStrategy,
    HealthRule,
    InventorySource,
    RegisterEncoding,
    Vendor,
)
from hami_protocol.vendor.rows import (
    AMD,
    AWS_NEURON,
    BIREN,
    DCU,
    ENFLAME_DRS,
    ENFLAME_GCU,
    KUNLUN,
    KUNLUN_VXPU,
    METAX_GPU,
    METAX_SGPU,
    MLU,
    MTHREADS,
    NVIDIA,
    VASTAI,
    ascend_vendor,
    fixed_vendors,
    iluvatar_vendor,
    nvidia_vendor,
)

__all__ = [
    "AMD",
    "AWS_NEURON",
    "BIREN",
    "DCU",
    "DEFAULT_VENDORS",
    "ENFLAME_DRS",
    "ENFLAME_GCU",
    "KUNLUN",
    "KUNLUN_VXPU",
    "METAX_GPU",
    "METAX_SGPU",
    "MLU",
    "MTHREADS",
    "NVIDIA",
    "VASTAI",
    "CapacitySpec",
    "FitStrategy",
    "HealthRule",
    "InventorySource",
    "RegisterEncoding",
    "Vendor",
    "nvidia_vendor",
    "vendor_by_word",
    "vendors_from_config",
]


def vendors_from_config(
    config: DeviceConfig,
    *,
    enable_ascend: bool = False,
    enable_iluvatar: bool = False,
) -> tuple[Vendor, ...]:
    """Every vendor row for ``config``, NVIDIA first.

    Raises :class:`ConfigError` when two rows share a common word or a resource name, since a
    container's request could then not be attributed to one vendor.
    """
    rows = [nvidia_vendor(config.nvidia), *fixed_vendors(config)]
    if enable_iluvatar:
        rows += [iluvatar_vendor(chip) for chip in config.iluvatars]
    if enable_ascend:
        rows += [ascend_vendor(chip) for chip in config.vnpus.configs]
    _check_unique(rows)
    return tuple(rows)


def _check_unique(rows: Iterable[Vendor]) -> None:
    words: set[str] = set()
    owners: dict[str, str] = {}
    for row in rows:
        if row.common_word in words:
            raise ConfigError("commonWord", row.common_word, "two vendors share a common word")
        words.add(row.common_word)
        for name in (*row.managed_resources, row.priority_resource):
            if name is None:
                continue
            if name in owners and owners[name] != row.common_word:
                raise ConfigError(
                    "resource name", name, f"used by both {owners[name]} and {row.common_word}"
                )
            owners[name] = row.common_word


def vendor_by_word(vendors: Iterable[Vendor], word: str) -> Vendor | None:
    """The row whose common word is ``word`` (exact match), if any."""
    return next((row for row in vendors if row.common_word == word), None)


DEFAULT_VENDORS: Final = vendors_from_config(DeviceConfig())
"""The rows of a default configuration (Ascend and Iluvatar disabled, as HAMi's flags default)."""
