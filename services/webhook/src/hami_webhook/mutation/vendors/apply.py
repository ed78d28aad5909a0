"""Every enabled vendor's admission rule over one container, pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hami_webhook.mutation.vendors.ascend import apply_ascend
from hami_webhook.mutation.vendors.awsneuron import apply_aws_neuron
from hami_webhook.mutation.vendors.enflame import apply_enflame_drs
from hami_webhook.mutation.vendors.iluvatar import apply_iluvatar
from hami_webhook.mutation.vendors.kunlun import apply_kunlun_vxpu
from hami_webhook.mutation.vendors.metax_sgpu import apply_metax_sgpu
from hami_webhook.mutation.vendors.mthreads import apply_mthreads
from hami_webhook.mutation.vendors.rule_set import PodEdits, VendorRuleSet

__all__ = ["mutate_container"]


def mutate_container(
    ctr: dict[str, Any],
    pod_annotations: Mapping[str, str],
    rules: VendorRuleSet,
    edits: PodEdits,
) -> bool:
    """Apply every vendor's rule to ``ctr``; whether it asks for one of these vendors."""
    found = False
    for ascend in rules.ascend:
        found |= apply_ascend(ctr, pod_annotations, ascend, rules, edits)
    for row in rules.iluvatar:
        found |= apply_iluvatar(ctr, row)
    if rules.mthreads is not None:
        found |= apply_mthreads(ctr, rules.mthreads, rules.mthreads_memory_per_card, edits)
    if rules.kunlun_vxpu is not None:
        found |= apply_kunlun_vxpu(ctr, rules.kunlun_vxpu)
    if rules.metax_sgpu is not None:
        found |= apply_metax_sgpu(ctr, rules.metax_sgpu, pod_annotations, edits)
    if rules.aws_neuron is not None:
        found |= apply_aws_neuron(ctr, rules.aws_neuron)
    if rules.enflame_drs is not None:
        found |= apply_enflame_drs(ctr, rules.enflame_drs)
    return found
