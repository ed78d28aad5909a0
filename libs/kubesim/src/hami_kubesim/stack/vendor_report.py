"""The demo report's lines about other vendors: what each vendor pod's plugin reads, what it gave
each container, and every vendor device's load.  Pure."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, Final

from hami_kube.objects import PodView
from hami_kubesim.stack.state import (
    ClusterState,
    DeviceLoad,
    allocated_devices,
    container_names,
    device_loads,
)
from hami_kubesim.vendors.inventory import node_inventory
from hami_kubesim.vendors.profiles import Profile, known_words, profile_for
from hami_protocol import keys

__all__ = ["vendor_device_loads", "vendor_pod_lines", "vendors_of"]

_INDENT: Final = "      "


def vendors_of(pod: Mapping[str, Any]) -> list[Profile]:
    """The vendors the scheduler allocated devices of to ``pod``."""
    annotations = PodView(pod).annotations
    found = (profile_for(word) for word in known_words())
    return [p for p in found if p.allocated_key and p.allocated_key in annotations]


def _read_by_plugin(profile: Profile, key: str) -> bool:
    domain = profile.count_resource.split("/", 1)[0]
    own = {profile.to_allocate_key, profile.allocated_key, keys.BIND_PHASE}
    if profile.marker is not None:
        own.add(profile.marker.key)
    return key in own or key.startswith((domain + "/", *profile.pod_key_prefixes))


def vendor_pod_lines(pod: Mapping[str, Any]) -> list[str]:
    """Per vendor of ``pod``: the annotations its plugin reads, then each container's devices
    as the scheduler allocated them."""
    view = PodView(pod)
    lines: list[str] = []
    names = container_names(pod)
    for profile in vendors_of(pod):
        lines.append(f"{_INDENT}{profile.word} plugin reads:")
        for key, value in sorted(view.annotations.items()):
            if _read_by_plugin(profile, key):
                lines.append(f"{_INDENT}  {key}: {value}")
        for index, devices in enumerate(allocated_devices(pod, profile.allocated_key or "") or ()):
            if devices:
                name = names[index] if index < len(names) else f"#{index}"
                grants = ", ".join(f"{d.uuid} {d.usedmem} MiB {d.usedcores} cores" for d in devices)
                lines.append(f"{_INDENT}{name}: {grants}")
    return lines


def vendor_device_loads(state: ClusterState) -> list[tuple[str, str, Mapping[str, DeviceLoad]]]:
    """``(node, vendor, loads by device)`` for every node with that vendor's devices."""
    found: list[tuple[str, str, Mapping[str, DeviceLoad]]] = []
    for word in known_words():
        profile = profile_for(word)
        loads = device_loads(
            state,
            allocated_key=profile.allocated_key or "",
            inventory=partial(node_inventory, profile),
        )
        found.extend((node, word, per) for node, per in sorted(loads.items()) if per)
    return sorted(found)
