"""NVIDIA's defaults for one container (rule 4 of :mod:`hami_webhook.mutation.admit`), pure.

The memory percentage must be 0..100 (:func:`check_percentage`); :func:`mutate_nvidia` writes
``CUDA_TASK_PRIORITY``, the default count and whole-card cores, ``GPU_CORE_UTILIZATION_POLICY``,
and ``NVIDIA_VISIBLE_DEVICES=none`` into containers without NVIDIA GPUs when ``overwriteEnv``
is on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_kube.objects import ContainerView
from hami_protocol.config.device import NvidiaConfig
from hami_protocol.pod import envs
from hami_protocol.request.containers import priority_value
from hami_protocol.vendor.table import Vendor
from hami_webhook.mutation.edits import (
    Sections,
    mapping,
    present,
    sections,
    set_env,
    set_limit,
    value,
)

__all__ = [
    "ENV_CORE_POLICY",
    "ENV_TASK_PRIORITY",
    "ENV_VISIBLE_DEVICES",
    "InvalidRequestError",
    "check_percentage",
    "mutate_nvidia",
]

ENV_TASK_PRIORITY: Final = envs.CUDA_TASK_PRIORITY
ENV_CORE_POLICY: Final = envs.GPU_CORE_UTILIZATION_POLICY
ENV_VISIBLE_DEVICES: Final = envs.NVIDIA_VISIBLE_DEVICES


class InvalidRequestError(Exception):
    """A container's request breaks a vendor rule (HAMi answers these with code 500)."""

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


def check_percentage(ctr: ContainerView, config: NvidiaConfig) -> None:
    """Refuse a memory percentage outside 0..100, in HAMi's words."""
    name = config.resource_memory_percentage_name
    percentage = value(sections(ctr), name)
    if percentage is not None and not 0 <= percentage <= 100:
        raise InvalidRequestError(
            f"invalid {name} value {percentage} in container {ctr.name}: "
            "must be an integer between 0 and 100",
            container=ctr.name,
            resource=name,
            value=percentage,
        )


def _whole_card(where: Sections, config: NvidiaConfig) -> bool:
    percentage = value(where, config.resource_memory_percentage_name)
    if percentage is not None:
        return percentage == 100
    return not config.resource_memory_name or not present(where, config.resource_memory_name)


def _uses_claims(ctr: Mapping[str, Any]) -> bool:
    """Whether the container lists DRA claims: their devices (and NVIDIA_VISIBLE_DEVICES) come
    from the driver's CDI spec, which a ``none`` from overwriteEnv would contradict."""
    return bool(mapping(ctr.get("resources")).get("claims"))


def mutate_nvidia(ctr: dict[str, Any], config: NvidiaConfig, vendor: Vendor) -> bool:
    """Apply the NVIDIA defaults to one container; returns whether it asks for NVIDIA GPUs."""
    priority = priority_value(ctr, vendor)
    if priority is not None:
        set_env(ctr, ENV_TASK_PRIORITY, str(priority))
    view = ContainerView(ctr)
    where = sections(view)
    count = config.resource_count_name
    found = present(where, count)
    partial = (
        config.resource_memory_name,
        config.resource_memory_percentage_name,
        config.resource_core_name,
    )
    if not found and config.default_gpu_num > 0 and any(present(where, n) for n in partial):
        set_limit(ctr, count, config.default_gpu_num)
        where = sections(view)
        found = True
    cores = config.resource_core_name
    if found and cores and not present(where, cores) and _whole_card(where, config):
        set_limit(ctr, cores, 100)
    if found and config.gpu_core_policy != "default":
        set_env(ctr, ENV_CORE_POLICY, config.gpu_core_policy)
    if not found and config.overwrite_env and not _uses_claims(ctr):
        set_env(ctr, ENV_VISIBLE_DEVICES, "none")
    return found
