"""Invariants over the non-NVIDIA vendors' devices (:mod:`hami_kubesim.vendors`).

* ``vendors`` — over-commit: per vendor and device, the memory, cores and task slots summed over
  the pods holding it (their ``-devices-allocated`` annotation, init containers counted as the
  scheduler counts them) stay within what the node's inventory declares, however the vendor
  registers it (register annotation, node capacity, its own annotation); a pod holds no device
  the inventory does not list.  AWS Neuron and Enflame DRS count cores as a bitmask and slices,
  so their cores are not summed.
* ``vendors`` — what a Running container got: every container with devices in a vendor's
  allocated list got exactly those from that vendor's plugin stand-in (the
  ``kubesim.hami.io/vendor-devices`` answer in the kubelet's allocation record), and no
  container got a vendor's devices its list does not give it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from hami_kube.objects import PodView
from hami_kubesim.stack.state import (
    ClusterState,
    allocated_devices,
    allocation_record,
    container_names,
    device_loads,
    pod_key,
    record_containers,
)
from hami_kubesim.vendors.allocation import GIVEN_ANNOTATION, parse_given
from hami_kubesim.vendors.inventory import node_inventory
from hami_kubesim.vendors.profiles import Profile, known_words, profile_for
from hami_protocol.pod.devices import encode_container_devices

__all__ = ["vendor_problems"]


def _profiles() -> list[Profile]:
    return [profile_for(word) for word in known_words()]


def _overcommit(state: ClusterState, profile: Profile) -> Iterator[tuple[str, str]]:
    loads = device_loads(
        state,
        allocated_key=profile.allocated_key or "",
        inventory=lambda node: node_inventory(profile, node),
    )
    for node, devices in loads.items():
        for uuid, load in devices.items():
            if not load.holders:
                continue
            subject = f"{node}/{uuid}"
            holders = ", ".join(holder for holder, _, _ in load.holders)
            device = load.device
            if device.count == 0 and device.devmem == 0:
                yield subject, f"{profile.word}: held by {holders} but not in the node's inventory"
                continue
            limits = [("memory (MiB)", load.memory, device.devmem)]
            limits.append(("task slots", load.slots, device.count))
            if profile.checks_cores:
                limits.append(("cores", load.cores, device.devcore))
            for what, used, limit in limits:
                if used > limit:
                    yield (
                        subject,
                        f"{profile.word} {what} over-committed: {used} > {limit} "
                        f"(held by {holders})",
                    )


def _given(pod: Mapping[str, Any]) -> dict[tuple[str, str], tuple[int, str]]:
    """``(container, vendor) → (index, devices)`` the stand-ins answered, per the record."""
    found: dict[tuple[str, str], tuple[int, str]] = {}
    for name, container in record_containers(allocation_record(pod)).items():
        for entry in container.get("resources") or ():
            annotations = entry.get("annotations") if isinstance(entry, Mapping) else None
            value = annotations.get(GIVEN_ANNOTATION) if isinstance(annotations, Mapping) else None
            parsed = parse_given(str(value)) if value else None
            if parsed is not None:
                word, index, devices = parsed
                found[(name, word)] = (index, devices)
    return found


def _handed_out(state: ClusterState, profiles: list[Profile]) -> Iterator[tuple[str, str]]:
    for pod in state.pods:
        if PodView(pod).phase != "Running":
            continue
        names = container_names(pod)
        given = _given(pod)
        for profile in profiles:
            listed = allocated_devices(pod, profile.allocated_key or "") or ()
            for index, name in enumerate(names):
                wanted = listed[index] if index < len(listed) else ()
                got = given.pop((name, profile.word), None)
                subject = f"{pod_key(pod)}/{name}"
                if wanted and got is None:
                    yield subject, f"Running without the {profile.word} devices it was allocated"
                elif got is not None and (not wanted or got[1] != encode_container_devices(wanted)):
                    yield (
                        subject,
                        f"got {profile.word} devices {got[1]!r} (as container {got[0]}), "
                        f"allocation says {encode_container_devices(wanted)!r}",
                    )
        for (name, word), (_, devices) in sorted(given.items()):
            yield f"{pod_key(pod)}/{name}", f"got {word} devices {devices!r} no allocation names"


def vendor_problems(state: ClusterState) -> list[tuple[str, str]]:
    """``(subject, message)`` for every broken vendor invariant (see the module doc)."""
    profiles = _profiles()
    found = [problem for profile in profiles for problem in _overcommit(state, profile)]
    return found + list(_handed_out(state, profiles))
