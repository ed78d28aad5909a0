"""The fake backend's MIG: GPUs modelled from their profile tables (:mod:`.tables`), with
state that outlives the plugin process.

Per GPU the fake devices file says (``mig:`` of a ``gpus`` entry)::

    mig:
      mode: enabled        # enabled | disabled | pending (a reset is needed), at first sight
      fail_create_after: 2 # the third create call (GPU or compute instance) of this process fails
      busy: false          # processes run on the GPU (start-up leaves it alone)

The layout (mode, instances, ids) lives in a JSON file (``<fake devices file>.mig-state.json``
unless given), rewritten atomically after every change, so a restarted plugin finds the instances
a real GPU would still have.  Faithful where it matters: instances only at the profile's possible
placements, no two overlapping, GPU-instance ids unique per GPU, a fresh MIG UUID per creation,
``pending`` never becoming enabled without a reset, nothing allowed unless MIG mode is on.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

from hami_deviceplugin.errors import MigError
from hami_deviceplugin.gpu.mig.model import (
    MigCapability,
    MigInstance,
    MigMode,
    MigProfileSpec,
    MigState,
    overlaps,
)
from hami_protocol.node.registry import MigPlacement

__all__ = ["MIG_MODES", "FakeMigControl", "FakeMigGpu", "state_file_for"]

MIG_MODES: Final = ("enabled", "disabled", "pending")


@dataclass(frozen=True, slots=True)
class FakeMigGpu:
    """One GPU's ``mig:`` entry with the profile table of its model."""

    capability: MigCapability
    mode: MigMode = "enabled"
    fail_create_after: int | None = None
    busy: bool = False


def state_file_for(devices: Path) -> Path:
    return devices.with_name(devices.name + ".mig-state.json")


class FakeMigControl:
    """:class:`~hami_deviceplugin.gpu.mig.control.MigControl` over the fake devices file's
    ``mig:`` entries (``gpus()``, read afresh on every call) and a state file."""

    def __init__(self, gpus: Callable[[], Mapping[str, FakeMigGpu]], state_file: Path) -> None:
        self._gpus = gpus
        self._path = state_file
        self._lock = threading.Lock()
        self._creates = 0
        self.calls: list[str] = []
        """Layout changes made, for tests: ``create <gpu> <gi>``, ``destroy <gpu> <gi>``..."""

    # --- the state file (worker threads only) -------------------------------------------------
    def _load(self) -> dict[str, Any]:
        try:
            return cast("dict[str, Any]", json.loads(self._path.read_text()))
        except FileNotFoundError:
            return {"serial": 0, "gpus": {}}
        except (OSError, ValueError) as exc:
            raise MigError(f"fake MIG state {self._path} unreadable: {exc}") from None

    def _save(self, document: Mapping[str, Any]) -> None:
        staging = self._path.with_name(self._path.name + ".tmp")
        staging.write_text(json.dumps(document, sort_keys=True))
        os.replace(staging, self._path)

    def _gpu(self, document: dict[str, Any], gpu_uuid: str) -> tuple[FakeMigGpu, dict[str, Any]]:
        described = self._gpus().get(gpu_uuid)
        if described is None:
            raise MigError(f"GPU {gpu_uuid} is not MIG-capable")
        record = document["gpus"].setdefault(gpu_uuid, {"mode": described.mode, "instances": []})
        return described, cast("dict[str, Any]", record)

    @staticmethod
    def _instance(gpu_uuid: str, raw: Mapping[str, Any]) -> MigInstance:
        return MigInstance(
            gpu_uuid=gpu_uuid,
            profile=str(raw["profile"]),
            placement=MigPlacement(int(raw["start"]), int(raw["size"])),
            gi_id=int(raw["gi"]),
            ci_id=int(raw["ci"]),
            mig_uuid=str(raw["uuid"]),
        )

    def _state_sync(self, gpu_uuid: str) -> MigState:
        with self._lock:
            _, record = self._gpu(self._load(), gpu_uuid)
            return MigState(
                mode=cast("MigMode", record["mode"]),
                instances=tuple(self._instance(gpu_uuid, raw) for raw in record["instances"]),
            )

    def _enable_sync(self, gpu_uuid: str) -> MigMode:
        with self._lock:
            document = self._load()
            _, record = self._gpu(document, gpu_uuid)
            if record["mode"] == "disabled":
                record["mode"] = "enabled"
                self._save(document)
                self.calls.append(f"enable {gpu_uuid}")
            return cast("MigMode", record["mode"])

    def _count_create(self, described: FakeMigGpu, what: str) -> None:
        limit = described.fail_create_after
        if limit is not None and self._creates >= limit:
            raise MigError(f"injected failure creating a {what} (fail_create_after {limit})")
        self._creates += 1

    def _create_sync(
        self, gpu_uuid: str, profile: MigProfileSpec, placement: MigPlacement
    ) -> MigInstance:
        with self._lock:
            document = self._load()
            described, record = self._gpu(document, gpu_uuid)
            if record["mode"] != "enabled":
                raise MigError(f"MIG mode is {record['mode']} on GPU {gpu_uuid}")
            spec = described.capability.profile(profile.name)
            if spec is None or placement not in spec.placements:
                raise MigError(
                    f"GPU {gpu_uuid}: no {profile.name} at {placement.start}+{placement.size}"
                )
            existing = [self._instance(gpu_uuid, raw) for raw in record["instances"]]
            if any(overlaps(i.placement, placement) for i in existing):
                raise MigError(f"GPU {gpu_uuid}: slices {placement} are in use (insufficient)")
            self._count_create(described, "GPU instance")
            used = {i.gi_id for i in existing}
            gi = next(n for n in range(1, 64) if n not in used)
            # The GPU instance exists now; a compute instance failure must take it back out,
            # which here means simply not saving it.
            self._count_create(described, "compute instance")
            serial = int(document.get("serial", 0)) + 1
            document["serial"] = serial
            mig_uuid = f"MIG-{uuid.uuid5(uuid.NAMESPACE_URL, f'{gpu_uuid}/{serial}')}"
            raw = {
                "profile": spec.name,
                "start": placement.start,
                "size": placement.size,
                "gi": gi,
                "ci": 0,
                "uuid": mig_uuid,
            }
            record["instances"].append(raw)
            self._save(document)
            self.calls.append(f"create {gpu_uuid} {gi}")
            return self._instance(gpu_uuid, raw)

    def _destroy_sync(self, gpu_uuid: str, gi_id: int) -> None:
        with self._lock:
            document = self._load()
            _, record = self._gpu(document, gpu_uuid)
            kept = [raw for raw in record["instances"] if int(raw["gi"]) != gi_id]
            if len(kept) == len(record["instances"]):
                raise MigError(f"GPU {gpu_uuid} has no GPU instance {gi_id}")
            record["instances"] = kept
            self._save(document)
            self.calls.append(f"destroy {gpu_uuid} {gi_id}")

    # --- MigControl ---------------------------------------------------------------------------
    async def state(self, gpu_uuid: str) -> MigState:
        return await asyncio.to_thread(self._state_sync, gpu_uuid)

    async def enable(self, gpu_uuid: str) -> MigMode:
        return await asyncio.to_thread(self._enable_sync, gpu_uuid)

    async def create(
        self, gpu_uuid: str, profile: MigProfileSpec, placement: MigPlacement
    ) -> MigInstance:
        return await asyncio.to_thread(self._create_sync, gpu_uuid, profile, placement)

    async def destroy(self, gpu_uuid: str, gi_id: int) -> None:
        await asyncio.to_thread(self._destroy_sync, gpu_uuid, gi_id)

    async def busy(self, gpu_uuid: str) -> bool:
        described = self._gpus().get(gpu_uuid)
        return described is not None and described.busy
