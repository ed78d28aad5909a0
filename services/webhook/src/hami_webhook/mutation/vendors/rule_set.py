"""What the vendor rules depend on and what they ask of the pod, pure.

:class:`VendorRuleSet` holds the enabled vendor rows and their config sections, built once by
:func:`vendor_rule_set`; :class:`PodEdits` collects what the rules ask of the pod (not of one
container), applied once every container passed; :class:`VendorRuleError` is a refusal in HAMi's
words.  :func:`read_sections`, :func:`read_count` and :func:`container_name` are the container
readers the vendors' rules share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hami_kube.objects import ContainerView
from hami_protocol.config.ascend import AscendChipConfig
from hami_protocol.config.device import DeviceConfig
from hami_protocol.vendor.table import (
    AWS_NEURON,
    ENFLAME_DRS,
    KUNLUN_VXPU,
    METAX_SGPU,
    MTHREADS,
    Vendor,
)
from hami_webhook.mutation.edits import Sections, sections, value

__all__ = [
    "AscendRule",
    "PodEdits",
    "VendorRuleError",
    "VendorRuleSet",
    "container_name",
    "read_count",
    "read_sections",
    "vendor_rule_set",
]


class VendorRuleError(Exception):
    """A container's request breaks a vendor's admission rule (HAMi answers with code 500)."""

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


@dataclass(frozen=True, slots=True)
class AscendRule:
    vendor: Vendor
    chip: AscendChipConfig


@dataclass(frozen=True, slots=True)
class VendorRuleSet:
    """What the vendor rules depend on: the enabled rows and their config sections."""

    ascend: tuple[AscendRule, ...] = ()
    iluvatar: tuple[Vendor, ...] = ()
    mthreads: Vendor | None = None
    mthreads_memory_per_card: tuple[int, ...] = (96,)
    kunlun_vxpu: Vendor | None = None
    metax_sgpu: Vendor | None = None
    aws_neuron: Vendor | None = None
    enflame_drs: Vendor | None = None

    @property
    def ascend_counts(self) -> tuple[str, ...]:
        return tuple(rule.vendor.count_resource for rule in self.ascend)


def vendor_rule_set(config: DeviceConfig, vendors: tuple[Vendor, ...]) -> VendorRuleSet:
    """The rules of the vendors in ``vendors`` (Ascend/Iluvatar only when their rows exist)."""
    by_word = {row.common_word: row for row in vendors}
    ascend = tuple(
        AscendRule(by_word[chip.common_word], chip)
        for chip in config.vnpus.configs
        if chip.common_word in by_word and by_word[chip.common_word].fit == "ascend"
    )
    iluvatar = tuple(
        by_word[chip.common_word] for chip in config.iluvatars if chip.common_word in by_word
    )
    return VendorRuleSet(
        ascend=ascend,
        iluvatar=iluvatar,
        mthreads=by_word.get(MTHREADS),
        mthreads_memory_per_card=config.mthreads.memory_per_card or (96,),
        kunlun_vxpu=by_word.get(KUNLUN_VXPU),
        metax_sgpu=by_word.get(METAX_SGPU),
        aws_neuron=by_word.get(AWS_NEURON),
        enflame_drs=by_word.get(ENFLAME_DRS),
    )


@dataclass(slots=True)
class PodEdits:
    """What the pod (not one container) must get; applied once every container passed."""

    annotations: dict[str, str] = field(default_factory=dict)
    """Set (overwriting) on the pod."""
    default_annotations: dict[str, str] = field(default_factory=dict)
    """Set only where the pod has none."""
    runtime_class: str | None = None
    """The first vendor runtime class asked for; set only when the pod names none."""

    def annotation(self, pod_annotations: Mapping[str, str], key: str) -> str | None:
        """``key`` as the pod will hold it after these edits."""
        if key in self.annotations:
            return self.annotations[key]
        if key in pod_annotations:
            return pod_annotations[key]
        return self.default_annotations.get(key)


def read_sections(ctr: dict[str, Any]) -> Sections:
    """The container's ``(limits, requests)`` as they are now."""
    return sections(ContainerView(ctr))


def read_count(ctr: dict[str, Any], vendor: Vendor) -> tuple[Sections, int | None]:
    """The container's ``(limits, requests)`` and its count of ``vendor``'s devices, if any."""
    where = read_sections(ctr)
    return where, value(where, vendor.count_resource)


def container_name(ctr: dict[str, Any]) -> str:
    """The container's name, ``""`` when it has none (for a refusal's detail)."""
    found = ctr.get("name")
    return found if isinstance(found, str) else ""
