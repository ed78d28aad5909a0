"""Dynamic MIG reservations (``hami.io/vgpu-mig-allocations``).

The scheduler decides which MIG profile, on which GPU and at which slices, each MIG device of a
container gets, and writes it next to the device lists as a JSON array::

    [{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-…","profile":"1g.10gb",
      "placement":{"start":6,"size":1}}]

``containerIndex`` counts init containers first, then app containers (as the device lists do);
``deviceIndex`` is the position in that container's NVIDIA device list.  Once the device plugin
has created the GPU and compute instances it merge-patches their runtime identity into the same
entries: ``"migUUID"``, ``"gpuInstanceID"``, ``"computeInstanceID"`` — all three or none.

Decoding follows Go's ``encoding/json`` (keys matched case-insensitively, unknown fields ignored,
``null`` leaves a field unset) and HAMi's checks: an empty value means no reservations; an entry
with a negative index, no GPU UUID, no profile or a zero-size placement, with only part of the
runtime identity, or repeating a ``(containerIndex, deviceIndex)`` pair makes the whole value
unusable.  Encoding writes the fields in HAMi's order, runtime ids only when present, entries
sorted by ``(containerIndex, deviceIndex)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from hami_protocol._goparse import (
    INT64_MAX,
    INT64_MIN,
    UINT32_MAX,
    JSONReader,
    check_int,
    check_text,
    dump_go_json,
)
from hami_protocol.errors import ValidationError
from hami_protocol.keys import NVIDIA_MIG_ALLOCATIONS
from hami_protocol.node.registry import MigPlacement

__all__ = [
    "MigReservation",
    "MigRuntimeIds",
    "ReservationKey",
    "container_reservations",
    "decode_mig_reservations",
    "encode_mig_reservations",
    "with_runtime_ids",
]

ReservationKey = tuple[int, int]
"""``(containerIndex, deviceIndex)``: what identifies a reservation within one pod."""


@dataclass(frozen=True, slots=True)
class MigRuntimeIds:
    """The instance the device plugin realised for a reservation."""

    mig_uuid: str
    gpu_instance_id: int
    compute_instance_id: int


@dataclass(frozen=True, slots=True)
class MigReservation:
    """One MIG device of one container: ``profile`` at ``placement`` on GPU ``gpu_uuid``."""

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    placement: MigPlacement
    runtime: MigRuntimeIds | None = None
    """Set once the device plugin has created the instance."""

    @property
    def key(self) -> ReservationKey:
        return (self.container_index, self.device_index)


# --- decoding -------------------------------------------------------------------------------------

_ENTRY_FIELDS = (
    "containerIndex",
    "deviceIndex",
    "gpuUUID",
    "profile",
    "placement",
    "migUUID",
    "gpuInstanceID",
    "computeInstanceID",
)
_PLACEMENT_FIELDS = ("start", "size")
_RUNTIME_FIELDS = ("migUUID", "gpuInstanceID", "computeInstanceID")


def decode_mig_reservations(
    value: str, *, key: str = NVIDIA_MIG_ALLOCATIONS
) -> tuple[MigReservation, ...]:
    """Decode the annotation into reservations in canonical order.

    ``""`` and ``null`` mean none.  Raises :class:`~hami_protocol.errors.DecodeError` for text
    Go could not unmarshal (bad JSON, wrong types, out-of-range numbers) and
    :class:`~hami_protocol.errors.ValidationError` for HAMi's rule checks.
    """
    if not value.strip():
        return ()
    reader = JSONReader(key, value)
    result: list[MigReservation] = []
    seen: dict[ReservationKey, int] = {}
    for position, item in enumerate(reader.array_items(reader.load(), "document")):
        where = f"entry {position}"
        fields = {} if item is None else reader.obj_fields(item, where, _ENTRY_FIELDS)
        reservation = _decode_entry(reader, fields, where)
        earlier = seen.setdefault(reservation.key, position)
        if earlier != position:
            raise ValidationError(
                key,
                value,
                f"{where}: duplicate reservation for container {reservation.container_index} "
                f"device {reservation.device_index} (also entry {earlier})",
            )
        result.append(reservation)
    return tuple(sorted(result, key=lambda r: r.key))


def _decode_entry(reader: JSONReader, fields: dict[str, object], where: str) -> MigReservation:
    container = reader.integer(fields, "containerIndex", where, INT64_MIN, INT64_MAX)
    device = reader.integer(fields, "deviceIndex", where, INT64_MIN, INT64_MAX)
    gpu_uuid = reader.text(fields, "gpuUUID", where)
    profile = reader.text(fields, "profile", where)
    raw_placement = fields.get("placement")
    spot = (
        {}
        if raw_placement is None
        else reader.obj_fields(raw_placement, f"{where} placement", _PLACEMENT_FIELDS)
    )
    placement = MigPlacement(
        start=reader.integer(spot, "start", f"{where} placement", 0, UINT32_MAX),
        size=reader.integer(spot, "size", f"{where} placement", 0, UINT32_MAX),
    )
    mig_uuid = reader.text(fields, "migUUID", where)
    # Go reads the two ids into *uint32: present (even 0) unless missing or null; an empty
    # migUUID is absent (omitempty string).
    gi = _optional_id(reader, fields, "gpuInstanceID", where)
    ci = _optional_id(reader, fields, "computeInstanceID", where)

    def broken(reason: str) -> ValidationError:
        return ValidationError(reader.key, reader.value, f"{where}: {reason}")

    if container < 0 or device < 0:
        raise broken(f"containerIndex {container} and deviceIndex {device} must not be negative")
    if not gpu_uuid or not profile or placement.size == 0:
        raise broken("incomplete: gpuUUID, profile and a placement of size >= 1 are required")
    present = [
        name
        for name, item in zip(_RUNTIME_FIELDS, (mig_uuid or None, gi, ci), strict=True)
        if item is not None
    ]
    if present and len(present) != len(_RUNTIME_FIELDS):
        missing = sorted(set(_RUNTIME_FIELDS) - set(present))
        raise broken(
            f"partial runtime identity: has {', '.join(present)}, lacks {', '.join(missing)}"
        )
    runtime = None
    if gi is not None and ci is not None and mig_uuid:
        runtime = MigRuntimeIds(mig_uuid=mig_uuid, gpu_instance_id=gi, compute_instance_id=ci)
    return MigReservation(container, device, gpu_uuid, profile, placement, runtime)


def _optional_id(
    reader: JSONReader, fields: dict[str, object], name: str, where: str
) -> int | None:
    if fields.get(name) is None:
        return None
    return reader.integer(fields, name, where, 0, UINT32_MAX)


# --- encoding -------------------------------------------------------------------------------------


def _check(reservation: MigReservation, where: str) -> None:
    check_int(where, "container_index", reservation.container_index, 0, INT64_MAX)
    check_int(where, "device_index", reservation.device_index, 0, INT64_MAX)
    check_text(where, "gpu_uuid", reservation.gpu_uuid)
    check_text(where, "profile", reservation.profile)
    if not reservation.gpu_uuid or not reservation.profile:
        raise ValidationError(where, reservation, "gpu_uuid and profile must not be empty")
    check_int(where, "placement start", reservation.placement.start, 0, UINT32_MAX)
    check_int(where, "placement size", reservation.placement.size, 1, UINT32_MAX)
    runtime = reservation.runtime
    if runtime is not None:
        check_text(where, "mig_uuid", runtime.mig_uuid)
        if not runtime.mig_uuid:
            raise ValidationError(where, runtime, "mig_uuid must not be empty")
        check_int(where, "gpu_instance_id", runtime.gpu_instance_id, 0, UINT32_MAX)
        check_int(where, "compute_instance_id", runtime.compute_instance_id, 0, UINT32_MAX)


def _document(reservation: MigReservation) -> dict[str, object]:
    document: dict[str, object] = {
        "containerIndex": reservation.container_index,
        "deviceIndex": reservation.device_index,
        "gpuUUID": reservation.gpu_uuid,
        "profile": reservation.profile,
        "placement": {"start": reservation.placement.start, "size": reservation.placement.size},
    }
    if reservation.runtime is not None:
        document["migUUID"] = reservation.runtime.mig_uuid
        document["gpuInstanceID"] = reservation.runtime.gpu_instance_id
        document["computeInstanceID"] = reservation.runtime.compute_instance_id
    return document


def encode_mig_reservations(reservations: Iterable[MigReservation]) -> str:
    """The canonical value (``[]`` for none; HAMi then leaves the annotation out).

    Raises :class:`~hami_protocol.errors.ValidationError` for anything
    :func:`decode_mig_reservations` would refuse, so what is written always reads back.
    """
    ordered = sorted(reservations, key=lambda r: r.key)
    seen: set[ReservationKey] = set()
    for reservation in ordered:
        where = f"reservation {reservation.key}"
        _check(reservation, where)
        if reservation.key in seen:
            raise ValidationError(where, reservation, "duplicate (container_index, device_index)")
        seen.add(reservation.key)
    return dump_go_json([_document(reservation) for reservation in ordered])


# --- device-plugin helpers ------------------------------------------------------------------------


def container_reservations(
    reservations: Iterable[MigReservation], container_index: int
) -> tuple[MigReservation, ...]:
    """The reservations of one container, by device index (the order its devices are made)."""
    return tuple(
        sorted(
            (r for r in reservations if r.container_index == container_index),
            key=lambda r: r.device_index,
        )
    )


def with_runtime_ids(
    reservations: Iterable[MigReservation],
    runtime: Mapping[ReservationKey, MigRuntimeIds],
    *,
    overwrite: bool = False,
) -> tuple[MigReservation, ...]:
    """``reservations`` with the realised instances of ``runtime`` filled in, canonical order.

    Setting the same ids again is a no-op, so a retried merge is harmless.  A key naming no
    reservation, or (unless ``overwrite``) different ids for an entry that already has some,
    raises :class:`~hami_protocol.errors.ValidationError`: either means the annotation and the
    hardware disagree, which must not be papered over.
    """
    result: list[MigReservation] = []
    unused = dict(runtime)
    for reservation in sorted(reservations, key=lambda r: r.key):
        ids = unused.pop(reservation.key, None)
        if ids is None:
            result.append(reservation)
            continue
        if reservation.runtime not in (None, ids) and not overwrite:
            raise ValidationError(
                f"reservation {reservation.key}",
                ids,
                f"already realised as {reservation.runtime!r}",
            )
        result.append(replace(reservation, runtime=ids))
    if unused:
        raise ValidationError(
            "runtime ids", sorted(unused), "no reservation for these (container, device) keys"
        )
    return tuple(result)
