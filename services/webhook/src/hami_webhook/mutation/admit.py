"""The admission decision for one pod: allow, mutate (with a JSON Patch) or deny, and why.

Pure: :func:`admit_pod` takes the pod as decoded JSON, the
:class:`~hami_webhook.mutation.rules.MutationRules` and a quota view, and returns a
:class:`~hami_webhook.mutation.decision.Decision`.  Nothing here awaits or performs I/O.  The
steps live beside it: the container pass (:mod:`~hami_webhook.mutation.containers`, NVIDIA's
defaults in :mod:`~hami_webhook.mutation.nvidia`), the pod annotations
(:mod:`~hami_webhook.mutation.metadata`) and the quota check
(:mod:`~hami_webhook.mutation.quota_denial`).

The rules, in HAMi's order (pkg/scheduler/webhook.go and the NVIDIA ``MutateAdmission``):

1. A pod whose containers cannot be read (wrong JSON types, a managed resource that is not a
   quantity) is an error, code 400.  A pod without containers is denied ``pod has no containers``.
2. A pod labelled ``hami.io/webhook: ignore`` is allowed unchanged (the chart's object selector
   normally keeps such pods away; this guards a configuration without it).
3. A pod that names another scheduler is allowed unchanged: ``schedulerName`` is set, and it is
   not ``default-scheduler`` (or overwriting that is switched off), and it is not ours.
4. Every container, init containers first: an NVIDIA memory percentage outside 0..100 is an
   error, code 500, as in HAMi.  Privileged containers are not mutated.  Every other container:

   * ``CUDA_TASK_PRIORITY=<n>`` from the priority resource (limits);
   * count absent but memory, percentage or cores present → add the count ``defaultGPUNum``
     (none when it is 0);
   * count present, cores absent, and the request is for a whole card (percentage 100, or no
     memory resource configured, or neither memory nor percentage given) → add cores ``100``;
   * with an NVIDIA request: ``GPU_CORE_UTILIZATION_POLICY`` when ``gpuCorePolicy`` is not
     ``default``; ``runtimeClassName`` when configured and the pod has none;
   * without one, and ``overwriteEnv`` on: ``NVIDIA_VISIBLE_DEVICES=none`` (not in a container
     listing DRA claims: a DRA driver's CDI spec sets it).

   A container asks for another vendor's devices when that vendor's count resource is present
   (or, for AWS Neuron and Enflame DRS, their core/memory resources).  Then each vendor's own
   rule (:mod:`hami_webhook.mutation.vendors`: Ascend templates and 910C modules, Iluvatar,
   Moore Threads, Kunlunxin vXPU memory, MetaX sGPU QoS, AWS Neuron and Enflame checks); a
   refusal is an error, code 500, in HAMi's words.  The pod annotations and runtime class
   those rules ask for are written once every container passed.
   4b. With ``dra_claims`` (the ``/webhook/dra`` path, ``--dra-claims``): every unprivileged
   container's NVIDIA request becomes a DRA claim from a ResourceClaimTemplate and its NVIDIA
   resources are removed (:mod:`hami_webhook.dra.claims`; a request no claim can express is an
   error, code 500).  Converted GPUs do not route the pod to our scheduler (rule 6): only
   other devices do.  The templates travel in :attr:`Decision.templates`.
5. Devices requested and any container privileged → denied ``container <name> is privileged``
   (naming the first privileged container that asks for devices, else the first privileged one).
6. Devices requested and a scheduler name configured → ``schedulerName`` is set, and a pod that
   already names a node is denied ``pod has node assigned``.  Devices requested and no node
   named → a placement's record on the pod (:func:`~hami_protocol.pod.allocation.placement_keys`:
   device lists, ``hami.io/vgpu-node``, bind phase and time, MIG reservations — a manifest copied
   from a placed pod) is removed (not in HAMi).
7. With ``capacity_totals`` on (``--write-capacity-totals``): every container asking NVIDIA GPUs
   gets ``hami.io/nvidia-memory`` / ``hami.io/nvidia-cores`` in limits and requests, any other
   container loses them (:mod:`hami_webhook.mutation.totals`); values already there are overwritten.
8. Per vendor, memory = max(Σ app containers memory×count, largest init container) and the same
   for cores; if that exceeds a namespace quota → denied ``exceeding resource quota: ...``.

Deliberate differences from HAMi, each to keep the reply minimal or the rule consistent:
an env var that is already present with the wanted value is left alone, and one with another
value (or a ``valueFrom``) is replaced in place instead of appending a duplicate;
``GPU_CORE_UTILIZATION_POLICY`` goes only to containers with an NVIDIA request (HAMi-core reads it
only there); resources are looked up in limits and then requests throughout (HAMi reads some
only from limits).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from hami_kube.objects import ObjectView
from hami_protocol import keys
from hami_protocol.errors import ProtocolError
from hami_protocol.request.containers import pod_device_requests
from hami_webhook.dra.claims import Conversion, ConversionError, convert_pod
from hami_webhook.mutation.containers import mutate_containers
from hami_webhook.mutation.decision import Decision, allowed, denied, error
from hami_webhook.mutation.metadata import annotate, drop_placement
from hami_webhook.mutation.nvidia import InvalidRequestError
from hami_webhook.mutation.patch import copy_json, diff
from hami_webhook.mutation.quota_denial import quota_denial
from hami_webhook.mutation.rules import MutationRules
from hami_webhook.mutation.totals import write_totals
from hami_webhook.mutation.vendors.rule_set import VendorRuleError
from hami_webhook.quota.check import QuotaView

__all__ = ["DEFAULT_SCHEDULER", "admit_pod"]

DEFAULT_SCHEDULER: Final = "default-scheduler"


def _other_scheduler(spec: Mapping[str, Any], rules: MutationRules) -> str | None:
    current = spec.get("schedulerName")
    if not isinstance(current, str) or not current:
        return None
    if current == DEFAULT_SCHEDULER and rules.force_overwrite_default_scheduler:
        return None
    if rules.scheduler_name and current == rules.scheduler_name:
        return None
    return current


def admit_pod(
    pod: object,
    *,
    namespace: str,
    rules: MutationRules,
    quota: QuotaView | None = None,
    dra_claims: bool = False,
) -> Decision:
    """Decide on one pod CREATE.  ``namespace`` is the request's namespace; ``dra_claims``:
    NVIDIA requests become DRA claims (rule 4b)."""
    if not isinstance(pod, dict):
        return error(400, "cannot decode pod: request.object is not a JSON object")
    spec = pod.get("spec", {})
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        return error(400, "cannot decode pod: spec is not a JSON object")
    try:
        pod_device_requests(pod, vendors=rules.vendors)
    except ProtocolError as exc:
        return error(400, f"cannot decode pod: {exc}", key=exc.key, value=exc.value)
    if not spec.get("containers"):
        return denied("pod has no containers")
    if ObjectView(pod).labels.get(keys.WEBHOOK_IGNORE_LABEL) == keys.WEBHOOK_IGNORE_VALUE:
        return allowed("pod is labelled to be ignored")
    other = _other_scheduler(spec, rules)
    if other is not None:
        return allowed(f"pod already has different scheduler assigned: {other}")

    # Only the container lists are edited; every other part of the spec stays shared with the
    # original, so the diff below skips it by identity.
    mutated = dict(pod)
    mutated_spec = mutated["spec"] = dict(spec)
    for key in ("initContainers", "containers"):
        if type(spec.get(key)) is list:
            mutated_spec[key] = copy_json(spec[key])
    annotations = ObjectView(pod).annotations
    try:
        scan = mutate_containers(mutated_spec, rules, annotations)
    except (InvalidRequestError, VendorRuleError) as exc:
        return error(500, exc.message, **exc.detail)
    except ProtocolError as exc:
        return error(400, f"cannot decode pod: {exc}", key=exc.key, value=exc.value)
    if scan.has_devices and scan.privileged is not None:
        return denied(f"container {scan.privileged} is privileged", container=scan.privileged)
    if scan.has_nvidia and rules.nvidia.runtime_class_name and spec.get("runtimeClassName") is None:
        mutated_spec["runtimeClassName"] = rules.nvidia.runtime_class_name
    if scan.edits.runtime_class and mutated_spec.get("runtimeClassName") is None:
        mutated_spec["runtimeClassName"] = scan.edits.runtime_class
    annotate(mutated, annotations, scan.edits)
    conversion = Conversion()
    nvidia = rules.nvidia_row
    if dra_claims and scan.has_nvidia and nvidia is not None:
        try:
            conversion = convert_pod(
                mutated_spec, namespace=namespace, annotations=annotations, vendor=nvidia
            )
        except ConversionError as exc:
            return error(500, exc.message, **exc.detail)
    # Claims are allocated by whatever scheduler the pod names (kube-scheduler's
    # DynamicResources plugin, Volcano, ...): only devices left to our extender reroute it.
    routed = scan.has_other if conversion.containers else scan.has_devices
    if scan.has_devices and rules.scheduler_name:
        node = spec.get("nodeName")
        if node:
            # Also for claims: a pod bound by name skips the scheduler that allocates them.
            return denied("pod has node assigned", nodeName=node)
        if routed:
            mutated_spec["schedulerName"] = rules.scheduler_name
    if scan.has_devices and not spec.get("nodeName"):
        drop_placement(mutated, annotations, rules.placement)
    if rules.capacity_totals:
        try:
            write_totals(mutated_spec, rules.nvidia_row)
        except ProtocolError as exc:
            return error(400, f"cannot decode pod: {exc}", key=exc.key, value=exc.value)
    if scan.has_devices and quota is not None and quota.has_limits(namespace):
        denial = quota_denial(mutated, namespace, rules, quota)
        if denial is not None:
            return denial
    ops = diff(pod, mutated)
    if not ops:
        return Decision("allowed", pod=pod, warnings=conversion.warnings)
    return Decision(
        "mutated",
        patch=tuple(ops),
        pod=mutated,
        templates=conversion.templates,
        warnings=conversion.warnings,
    )
