"""The interface the MIG manager drives a backend's MIG through (the fake's
:mod:`.fake_control`, NVML's :mod:`.nvml_control`).

Every method names the GPU by UUID and never blocks the event loop.  ``create`` makes one GPU
instance at exactly the given placement and one compute instance inside it (same slice count,
shared engine profile) and returns it with its MIG device UUID; when any step fails it destroys
what it made itself before raising :class:`~hami_deviceplugin.errors.MigError`, so a failed call
leaves the GPU as it found it.  ``destroy`` removes a GPU instance with its compute instances.
"""

from __future__ import annotations

from typing import Protocol

from hami_deviceplugin.gpu.mig.model import MigInstance, MigMode, MigProfileSpec, MigState
from hami_protocol.node.registry import MigPlacement

__all__ = ["MigControl"]


class MigControl(Protocol):
    async def state(self, gpu_uuid: str) -> MigState:
        """The GPU's MIG mode and every instance on it now."""
        ...

    async def enable(self, gpu_uuid: str) -> MigMode:
        """Ask for MIG mode; the mode it is in afterwards (``pending``: a GPU reset is needed)."""
        ...

    async def create(
        self, gpu_uuid: str, profile: MigProfileSpec, placement: MigPlacement
    ) -> MigInstance: ...

    async def destroy(self, gpu_uuid: str, gi_id: int) -> None: ...

    async def busy(self, gpu_uuid: str) -> bool:
        """Whether processes run on the GPU (or on any of its MIG devices)."""
        ...
