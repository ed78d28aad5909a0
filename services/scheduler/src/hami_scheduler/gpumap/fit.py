"""The fit probe (``GET api/v1/fit``): where would this pod fit now, or what binds.

The pod comes either from parameters — ``gpus``, ``memory`` (MiB), ``memoryPercentage``,
``cores``, ``type`` (comma-separated models the pod accepts), ``vendor`` (a vendor's common
word, default ``NVIDIA``), ``namespace`` (its ResourceQuota then counts) — turned into a one-
container Pod asking the vendor's own resources (:func:`pod_from_parameters`), or from a
``manifest`` parameter: base64url of a Pod (or of a workload whose pod template is taken:
Deployment, StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) in YAML or JSON, at most
:data:`MAX_MANIFEST` bytes decoded (:func:`pod_from_manifest`).  A request that cannot be read
raises :class:`~.query.QueryError` saying what and where.

The pod is then judged exactly as ``/filter`` would judge it against every registered node
(:func:`probe`): the same plan (:class:`~hami_scheduler.selection.plan.Planner`), the same
refusals of troubled nodes (:func:`~hami_scheduler.selection.select.screen`), the same node
state (:meth:`SchedulerCache.fleet_for <hami_scheduler.cache.view.SchedulerCache.fleet_for>`,
devices held for nominated preemptors included) and the same rule
(:func:`~hami_scheduler.core.joint.route.choose`, then
:func:`~hami_scheduler.core.joint.route.decide_on` for each placement shown).  It is a dry run:
nothing is assumed, reserved or written; only the probe's own
:class:`~hami_scheduler.core.SelectMemo` remembers answers.  What the probe cannot know: the
webhook's mutation (a manifest is read as written), and kube-scheduler's own filters (CPU,
taints, affinity).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import yaml

from hami_kube.objects import PodView
from hami_protocol.errors import ProtocolError
from hami_protocol.vendor.table import NVIDIA, Vendor, vendor_by_word
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import SelectMemo
from hami_scheduler.core.joint.hints import koord_requests
from hami_scheduler.core.joint.route import choose, decide_on, resolved
from hami_scheduler.core.reasons import NODE_INSUFFICIENT_DEVICE
from hami_scheduler.gpumap.query import QueryError, document, number, text
from hami_scheduler.gpumap.verdicts import ReasonGroup, group_reasons
from hami_scheduler.selection.joint_plan import joint_request, managed
from hami_scheduler.selection.plan import Planner
from hami_scheduler.selection.select import screen

__all__ = [
    "MAX_MANIFEST",
    "MAX_PLACEMENTS",
    "FitProbe",
    "binding_dimension",
    "pod_from_manifest",
    "pod_from_parameters",
]

MAX_MANIFEST: Final = 64 * 1024
"""Decoded manifest bytes taken (a Pod is a few KiB)."""
MAX_PLACEMENTS: Final = 100
_URL_ALPHABET: Final = str.maketrans("-_", "+/")
_TEMPLATED: Final = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"})


def pod_from_parameters(query: Mapping[str, str], vendors: tuple[Vendor, ...]) -> dict[str, Any]:
    """A one-container Pod asking what the parameters say, in the vendor's own resources."""
    word = text(query, "vendor") or NVIDIA
    vendor = vendor_by_word(vendors, word)
    if vendor is None:
        known = ", ".join(v.common_word for v in vendors)
        raise QueryError(f"vendor: {word!r} is not one this scheduler handles ({known})")
    count = number(query, "gpus", low=1, high=1024) or 1
    memory = number(query, "memory", low=1)
    percentage = number(query, "memoryPercentage", low=1, high=100)
    cores = number(query, "cores", low=0, high=100)
    limits = {vendor.count_resource: str(count)}
    if memory is not None:
        if vendor.memory_resource is None:
            raise QueryError(f"memory: {vendor.common_word} requests name no memory")
        units = -(-memory // vendor.memory_scale)
        limits[vendor.memory_resource] = str(units)
    if percentage is not None:
        if vendor.memory_percentage_resource is None:
            raise QueryError(f"memoryPercentage: {vendor.common_word} requests take no percentage")
        limits[vendor.memory_percentage_resource] = str(percentage)
    if cores is not None:
        if vendor.cores_resource is None:
            raise QueryError(f"cores: {vendor.common_word} requests name no cores")
        limits[vendor.cores_resource] = str(cores)
    annotations: dict[str, str] = {}
    types = text(query, "type")
    if types:
        if vendor.use_type_key is None:
            raise QueryError(f"type: {vendor.common_word} pods cannot choose a card type")
        annotations[vendor.use_type_key] = types
    meta: dict[str, Any] = {"name": "fit-probe", "namespace": text(query, "namespace")}
    if annotations:
        meta["annotations"] = annotations
    container = {"name": "probe", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def _decode(encoded: str) -> bytes:
    if len(encoded) > (MAX_MANIFEST * 4) // 3 + 4:
        raise QueryError(f"manifest: more than {MAX_MANIFEST} bytes once decoded")
    try:
        # base64url (standard base64 is taken too); anything outside the alphabet is refused.
        standard = encoded.translate(_URL_ALPHABET)
        raw = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise QueryError("manifest: not base64url (RFC 4648 §5, padding optional)") from None
    if len(raw) > MAX_MANIFEST:
        raise QueryError(f"manifest: more than {MAX_MANIFEST} bytes once decoded")
    return raw


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The Pod a manifest describes: itself, or its workload's pod template."""
    kind = obj.get("kind", "Pod")
    spec = obj.get("spec")
    if kind == "Pod":
        return obj
    if kind == "CronJob" and isinstance(spec, Mapping):
        spec = (spec.get("jobTemplate") or {}).get("spec")
        kind = "Job"
    if kind in _TEMPLATED and isinstance(spec, Mapping):
        template = spec.get("template")
        if isinstance(template, Mapping):
            meta = dict(template.get("metadata") or {})
            meta.setdefault("namespace", (obj.get("metadata") or {}).get("namespace", ""))
            return {**template, "kind": "Pod", "apiVersion": "v1", "metadata": meta}
        raise QueryError(f"manifest: {kind} has no spec.template")
    raise QueryError(f"manifest: kind {kind!r} is not a Pod or a workload with a pod template")


def pod_from_manifest(encoded: str) -> dict[str, Any]:
    """The Pod of a base64url YAML or JSON manifest (one document)."""
    raw = _decode(encoded.strip())
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QueryError(f"manifest: not UTF-8 (byte {exc.start})") from None
    try:
        loaded = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise QueryError(f"manifest: not YAML or JSON{where}: {problem}") from None
    except RecursionError:
        raise QueryError("manifest: nested too deeply") from None
    if not isinstance(loaded, Mapping):
        raise QueryError("manifest: not an object (want a Pod)")
    pod = json.loads(json.dumps(_template(loaded), default=str))
    spec = pod.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("containers"), list):
        raise QueryError("manifest: spec.containers is missing or not a list")
    meta = pod.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise QueryError("manifest: metadata is not an object")
    meta.setdefault("name", "fit-probe")
    meta.setdefault("namespace", "")
    return dict(pod)


class FitProbe:
    """Dry runs of the selection rule over the cache (see the module docstring)."""

    def __init__(self, cache: SchedulerCache, planner: Planner) -> None:
        self._cache = cache
        self._planner = planner
        self.memo = SelectMemo()

    def probe(
        self, pod_obj: Mapping[str, Any], *, now: datetime, replica: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The ``FitProbe`` document for ``pod_obj``; raises :class:`QueryError` for a pod the
        filter would refuse to read."""
        cache, planner = self._cache, self._planner
        pod = PodView(pod_obj)
        try:
            requests, koord = planner.requests(pod_obj), koord_requests(pod_obj)
        except ProtocolError as exc:
            raise QueryError(f"manifest: cannot read the pod's device requests: {exc}") from None
        if not managed(requests, koord):
            raise QueryError("the pod asks for no device this scheduler allocates")
        try:
            quota = cache.quota_view if pod.namespace else None
            plan = planner.plan(pod, requests, quota=quota, sgpu_state=cache.sgpu_state)
            joint = joint_request(pod, plan, koord)
        except ProtocolError as exc:
            raise QueryError(f"manifest: {exc}") from None
        names = sorted(n for n in cache.node_names() if n in cache.nodes or n in cache.troubled)
        refused, candidates = screen(cache, names, plan, joint)
        fleet = cache.fleet_for(pod.uid, pod.priority)
        selection = choose(plan, joint, fleet, candidates, memo=self.memo)
        failed = {**refused, **resolved(selection.failed)}
        sign = 1 if plan.node_policy == "spread" else -1
        ranked = sorted(selection.fitting.items(), key=lambda item: (sign * item[1], item[0]))
        placements: list[dict[str, Any]] = []
        for name, score in ranked[:MAX_PLACEMENTS]:
            decision = decide_on(plan, joint, fleet, name)
            if isinstance(decision, str) or not decision.fits:
                continue
            node = fleet.gpus.get(name)
            devices: dict[str, dict[str, Any]] = {}
            for word, per_container in decision.devices.entries:
                for granted in per_container:
                    for one in granted:
                        card = None if node is None else node.device(one.uuid)
                        held = devices.setdefault(
                            one.uuid,
                            {
                                "id": one.uuid,
                                "vendor": word,
                                "type": one.type if card is None else card.type,
                                "memory": 0,
                                "cores": 0,
                            },
                        )
                        held["memory"] += one.usedmem
                        held["cores"] += one.usedcores
            placements.append(
                {"node": name, "score": round(score, 4), "devices": list(devices.values())}
            )
        reasons = group_reasons(failed)
        doc = document("FitProbe", now, replica)
        doc.update(
            {
                "fits": bool(selection.fitting),
                "nodes": len(names),
                "fitting": len(selection.fitting),
                "placements": placements,
                "binding": None if selection.fitting else binding_dimension(reasons),
                "reasons": [
                    {"reason": r.reason, "nodes": r.nodes, "examples": list(r.examples)}
                    for r in reasons
                ],
                "policy": {"node": plan.node_policy, "gpu": plan.gpu_policy.text},
            }
        )
        return doc


def binding_dimension(reasons: Sequence[ReasonGroup]) -> dict[str, Any] | None:
    """The dimension that binds: the reason most nodes gave, preferring any reason given by
    nodes that have the devices at all over ``NodeInsufficientDevice``."""
    # On a mixed cluster the other vendors' nodes lack the kind asked in numbers, which says
    # nothing about what binds where the kind exists.
    telling = [r for r in reasons if r.reason != NODE_INSUFFICIENT_DEVICE] or list(reasons)
    if not telling:
        return None
    return {"reason": telling[0].reason, "nodes": telling[0].nodes}
