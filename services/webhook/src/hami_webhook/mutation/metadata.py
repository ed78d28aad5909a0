"""The pod annotations the admission decision writes or drops (rules 4 and 6 of
:mod:`hami_webhook.mutation.admit`), pure.  Metadata and annotations are copied on write: the
rest of the pod stays shared with the original, so the patch diff skips it by identity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_webhook.mutation.vendors.rule_set import PodEdits

__all__ = ["annotate", "drop_placement"]


def annotate(pod: dict[str, Any], current: Mapping[str, str], edits: PodEdits) -> None:
    """Write the vendor rules' pod annotations."""
    wanted = dict(edits.annotations)
    for key, text in edits.default_annotations.items():
        if key not in current and key not in wanted:
            wanted[key] = text
    if all(current.get(key) == text for key, text in wanted.items()):
        return
    meta = pod.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        return
    meta = dict(meta or {})
    annotations = meta.get("annotations")
    annotations = dict(annotations) if isinstance(annotations, dict) else {}
    annotations.update(wanted)
    meta["annotations"] = annotations
    pod["metadata"] = meta


def drop_placement(
    pod: dict[str, Any], current: Mapping[str, str], placement: frozenset[str]
) -> None:
    """Remove a placement's record from a pod being created unplaced (copied from a placed
    pod's manifest, or restored from a backup): it is another pod's, and the scheduler's cache
    would count its devices as held until the pod is placed."""
    stale = placement.intersection(current)
    if not stale:
        return
    meta = dict(pod.get("metadata") or {})
    annotations = dict(meta.get("annotations") or {})
    for key in stale:
        annotations.pop(key, None)
    meta["annotations"] = annotations
    pod["metadata"] = meta
