"""Pod device lists (``hami.io/<word>-devices-to-allocate`` / ``-devices-allocated``).

Wire form: one device is ``UUID,Type,Usedmem,Usedcores`` terminated by ``:``; one container is its
devices terminated by ``;``; containers appear init containers first, then app containers, in spec
order, and a container without devices of the vendor is an empty segment.  Example with two
containers, one GPU each: ``GPU-a,NVIDIA,3000,0:;GPU-b,NVIDIA,5000,0:;``.

Two decoders exist because the terminator ``;`` leaves an empty piece after the last container:

* :func:`decode_pod_devices` splits exactly like HAMi, so the result has one entry per ``;`` plus
  one (``"UUID1,Type1,1000,30:;"`` gives two entries, the second empty).  Index ``i`` is still
  container ``i``; the extra entry is always empty for values we write.
* :func:`decode_pod_devices_canonical` is the inverse of :func:`encode_pod_devices`: it drops the
  final piece when it is blank, so ``decode_pod_devices_canonical(encode_pod_devices(x)) == x``
  and re-encoding a consumed list does not grow it by one ``;`` per round.

``PodSingleDevice`` values are plain tuples: ``tuple[tuple[ContainerDevice, ...], ...]``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hami_protocol._goparse import INT32_MAX, fold_line_breaks, has_line_break, parse_go_int
from hami_protocol.errors import DecodeError, ValidationError

__all__ = [
    "MISSING_FIELDS_MESSAGE",
    "ContainerDevice",
    "ContainerDevices",
    "DeviceUsageSummary",
    "PodDevices",
    "PodSingleDevice",
    "collapse_device_usage",
    "decode_container_devices",
    "decode_pod_devices",
    "decode_pod_devices_canonical",
    "encode_container_devices",
    "encode_pod_devices",
    "erase_container",
    "has_pending",
    "next_pending",
    "pop_next_pending",
]

MISSING_FIELDS_MESSAGE = (
    "pod annotation format error, missing fields, do not use nodeName in task spec"
)
"""HAMi's text for a device with fewer than 4 fields (a pod that bypassed the scheduler)."""


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device granted to one container: ``usedmem`` MiB and ``usedcores`` percent of it."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int


ContainerDevices = tuple[ContainerDevice, ...]
PodSingleDevice = tuple[ContainerDevices, ...]


# --- decoding -------------------------------------------------------------------------------------


def decode_container_devices(segment: str, *, key: str = "") -> ContainerDevices:
    """Decode one container's segment.  Pieces without a ``,`` are ignored, as HAMi does."""
    return _decode_segment(segment, key, segment)


def _decode_segment(segment: str, key: str, whole: str) -> ContainerDevices:
    devices: list[ContainerDevice] = []
    for piece in fold_line_breaks(segment).split(":"):
        if "," not in piece:
            continue
        fields = [part.strip() for part in piece.split(",")]
        if len(fields) < 4:
            raise DecodeError(key, whole, MISSING_FIELDS_MESSAGE)
        mem = parse_go_int(fields[2], low=0, high=INT32_MAX)
        cores = parse_go_int(fields[3], low=0, high=INT32_MAX)
        if mem is None or cores is None:
            raise DecodeError(
                key,
                whole,
                f"device {fields[0]!r}: memory and cores must be integers in [0, {INT32_MAX}]",
            )
        devices.append(
            ContainerDevice(uuid=fields[0], type=fields[1], usedmem=mem, usedcores=cores)
        )
    return tuple(devices)


def decode_pod_devices(value: str, *, key: str = "") -> PodSingleDevice:
    """HAMi's decoding: one entry per ``;``-separated piece, the trailing empty one included."""
    return tuple(_decode_segment(piece, key, value) for piece in value.split(";"))


def decode_pod_devices_canonical(value: str, *, key: str = "") -> PodSingleDevice:
    """One entry per container: like :func:`decode_pod_devices` minus a blank final piece."""
    pieces = value.split(";")
    if not pieces[-1].strip():
        pieces.pop()
    return tuple(_decode_segment(piece, key, value) for piece in pieces)


# --- encoding -------------------------------------------------------------------------------------


def _check_device(device: ContainerDevice, where: str) -> None:
    for name, text in (("uuid", device.uuid), ("type", device.type)):
        if any(ch in text for ch in ",:;") or has_line_break(text) or text != text.strip():
            raise ValidationError(
                where, text, f"{name} must not contain ',', ':', ';', line breaks or edge spaces"
            )
    for name, number in (("usedmem", device.usedmem), ("usedcores", device.usedcores)):
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= INT32_MAX:
            raise ValidationError(where, number, f"{name} must be an integer in [0, {INT32_MAX}]")


def encode_container_devices(devices: Iterable[ContainerDevice]) -> str:
    """``UUID,Type,mem,cores:`` per device (no container terminator)."""
    parts: list[str] = []
    for device in devices:
        _check_device(device, f"device {device.uuid!r}")
        parts.append(f"{device.uuid},{device.type},{device.usedmem},{device.usedcores}:")
    return "".join(parts)


def encode_pod_devices(pod: PodSingleDevice) -> str:
    """The canonical value: every container's devices followed by ``;``."""
    return "".join(encode_container_devices(container) + ";" for container in pod)


# --- device-plugin consumption --------------------------------------------------------------------


def next_pending(pod: PodSingleDevice) -> tuple[int, ContainerDevices] | None:
    """The first container entry that still has devices, with its index; ``None`` if none."""
    for index, container in enumerate(pod):
        if container:
            return index, container
    return None


def erase_container(pod: PodSingleDevice, index: int) -> PodSingleDevice:
    """``pod`` with entry ``index`` emptied (the segment stays, keeping later indices valid)."""
    if not 0 <= index < len(pod):
        raise ValidationError("container index", index, f"outside 0..{len(pod) - 1}")
    return (*pod[:index], (), *pod[index + 1 :])


def pop_next_pending(
    pod: PodSingleDevice,
) -> tuple[int, ContainerDevices, PodSingleDevice] | None:
    """Take the next pending entry: ``(index, devices, pod with that entry erased)``."""
    found = next_pending(pod)
    if found is None:
        return None
    index, devices = found
    return index, devices, erase_container(pod, index)


def has_pending(pod: PodSingleDevice) -> bool:
    """Whether any container entry still lists a device."""
    return next_pending(pod) is not None


# --- all vendors of one pod -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodDevices:
    """Per-vendor device lists of one pod: ``(common word, PodSingleDevice)`` sorted by word.

    A tuple of pairs rather than a dict so the value is immutable and hashable; use
    :meth:`from_mapping`, :meth:`get` and :meth:`as_dict` to convert.
    """

    entries: tuple[tuple[str, PodSingleDevice], ...] = field(default=())

    def __post_init__(self) -> None:
        words = [word for word, _ in self.entries]
        if len(set(words)) != len(words):
            raise ValidationError("vendor", words, "each vendor may appear only once")
        object.__setattr__(self, "entries", tuple(sorted(self.entries, key=lambda e: e[0])))

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, PodSingleDevice]) -> PodDevices:
        return cls(tuple(mapping.items()))

    def get(self, word: str) -> PodSingleDevice | None:
        for candidate, pod in self.entries:
            if candidate == word:
                return pod
        return None

    @property
    def vendors(self) -> tuple[str, ...]:
        return tuple(word for word, _ in self.entries)

    def as_dict(self) -> dict[str, PodSingleDevice]:
        return dict(self.entries)

    def with_vendor(self, word: str, pod: PodSingleDevice) -> PodDevices:
        """A copy with ``word``'s list set to ``pod`` (added or replaced)."""
        kept = tuple((w, p) for w, p in self.entries if w != word)
        return PodDevices((*kept, (word, pod)))


# --- usage accounting (init containers, sidecars, app containers) ---------------------------------


@dataclass(frozen=True, slots=True)
class DeviceUsageSummary:
    """What one pod holds on one device: memory, cores and task slots."""

    uuid: str
    type: str
    usedmem: int
    usedcores: int
    slots: int


@dataclass(slots=True)
class _Tally:
    mem: int = 0
    cores: int = 0
    slots: int = 0

    def add(self, other: _Tally) -> _Tally:
        return _Tally(self.mem + other.mem, self.cores + other.cores, self.slots + other.slots)

    def peak(self, other: _Tally) -> None:
        self.mem = max(self.mem, other.mem)
        self.cores = max(self.cores, other.cores)
        self.slots = max(self.slots, other.slots)


def _per_uuid(container: ContainerDevices) -> dict[str, _Tally]:
    sums: dict[str, _Tally] = {}
    for device in container:
        sums[device.uuid] = sums.get(device.uuid, _Tally()).add(
            _Tally(device.usedmem, device.usedcores, 1)
        )
    return sums


def collapse_device_usage(
    pod: PodSingleDevice,
    *,
    init_count: int,
    sidecars: frozenset[int] = frozenset(),
    init_finished: bool = False,
) -> tuple[DeviceUsageSummary, ...]:
    """Effective per-device usage of a pod, sorted by UUID.

    Entries ``0..init_count-1`` are init containers; they run one at a time, so what counts is
    their peak, not their sum.  Indices in ``sidecars`` are init containers that keep running
    (``restartPolicy: Always``) and add to everything after them.  App containers run together and
    add up.  Per device: memory/cores = max(peak during init, sidecars + apps); slots = max(1,
    concurrent occurrences at the busiest moment).  With ``init_finished`` only sidecars and apps
    count.  With no sidecars this is HAMi's rule: max(init peak, sum of apps), max(1, #apps).
    """
    kinds: dict[str, str] = {}
    running: dict[str, _Tally] = {}  # sidecars started so far
    init_peak: dict[str, _Tally] = {}
    apps: dict[str, _Tally] = {}
    for index, container in enumerate(pod):
        for device in container:
            kinds.setdefault(device.uuid, device.type)
        sums = _per_uuid(container)
        for uuid, tally in sums.items():
            if index >= init_count:
                apps[uuid] = apps.get(uuid, _Tally()).add(tally)
                continue
            if index in sidecars:
                running[uuid] = running.get(uuid, _Tally()).add(tally)
                concurrent = running[uuid]
            else:
                concurrent = running.get(uuid, _Tally()).add(tally)
            init_peak.setdefault(uuid, _Tally()).peak(concurrent)
    summaries: list[DeviceUsageSummary] = []
    for uuid in sorted(kinds):
        steady = running.get(uuid, _Tally()).add(apps.get(uuid, _Tally()))
        if init_finished:
            if steady.slots == 0:
                continue
            total = steady
        else:
            total = _Tally(steady.mem, steady.cores, max(steady.slots, 1))
            total.peak(init_peak.get(uuid, _Tally()))
        summaries.append(DeviceUsageSummary(uuid, kinds[uuid], total.mem, total.cores, total.slots))
    return tuple(summaries)
