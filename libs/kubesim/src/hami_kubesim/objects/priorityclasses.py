"""PriorityClass (``scheduling.k8s.io/v1``) and the Priority admission plugin's rules, as
kube-apiserver applies them.

Sources: ``pkg/apis/scheduling/types.go`` and ``v1/helpers.go`` (constants, the two system
classes), ``v1/defaults.go``, ``validation/validation.go``,
``pkg/registry/scheduling/priorityclass/storage/storage.go`` (system classes cannot be deleted)
and ``plugin/pkg/admission/priority/admission.go`` (pods get ``spec.priority`` and
``spec.preemptionPolicy`` from their class at CREATE; at most one ``globalDefault`` class).

Everything here is pure; the store and the API server call it and turn a refusal into the
403/422 the real server sends.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from hami_kubesim.objects.validation import Cause, forbidden, invalid, required

SYSTEM_PRIORITY_CLASS_PREFIX: Final = "system-"
HIGHEST_USER_DEFINABLE_PRIORITY: Final = 1_000_000_000
SYSTEM_CRITICAL_PRIORITY: Final = 2 * HIGHEST_USER_DEFINABLE_PRIORITY
SYSTEM_CLUSTER_CRITICAL: Final = "system-cluster-critical"
SYSTEM_NODE_CRITICAL: Final = "system-node-critical"
DEFAULT_PRIORITY: Final = 0
"""``DefaultPriorityWhenNoDefaultClassExists``."""
PREEMPT_LOWER_PRIORITY: Final = "PreemptLowerPriority"
PREEMPT_NEVER: Final = "Never"

_INT32 = range(-(2**31), 2**31)

# In the order the bootstrap hook creates them (``systemPriorityClasses``).
_SYSTEM_CLASSES: Final[dict[str, tuple[int, str]]] = {
    SYSTEM_NODE_CRITICAL: (
        SYSTEM_CRITICAL_PRIORITY + 1000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    SYSTEM_CLUSTER_CRITICAL: (
        SYSTEM_CRITICAL_PRIORITY,
        "Used for system critical pods that must run in the cluster, but can be moved to "
        "another node if necessary.",
    ),
}
SYSTEM_CLASS_NOT_DELETABLE: Final = "this is a system priority class and cannot be deleted"


def system_priority_classes() -> list[dict[str, Any]]:
    """The classes kube-apiserver's ``scheduling/bootstrap-system-priority-classes`` hook
    creates at start, as it sends them (defaults are applied on create)."""
    return [
        {"metadata": {"name": name}, "value": value, "description": description}
        for name, (value, description) in _SYSTEM_CLASSES.items()
    ]


def is_system_class(name: str) -> bool:
    return name in _SYSTEM_CLASSES


def default_priority_class(obj: dict[str, Any]) -> None:
    """``SetDefaults_PriorityClass`` plus the wire form: ``value`` is always written, a false
    ``globalDefault`` never (``omitempty``).  In place: the request owns ``obj``."""
    obj.setdefault("value", 0)
    if not obj.get("preemptionPolicy"):
        obj["preemptionPolicy"] = PREEMPT_LOWER_PRIORITY
    if obj.get("globalDefault") is False:
        del obj["globalDefault"]


def prepare_for_create(obj: dict[str, Any]) -> None:
    """Defaults, and ``metadata.generation`` 1 (the strategy's ``PrepareForCreate``)."""
    default_priority_class(obj)
    obj["metadata"]["generation"] = 1


def prepare_for_update(new: dict[str, Any], old: Mapping[str, Any]) -> None:
    """Defaults; the generation stays (a class has no spec to bump it).  ``new`` is a fresh
    dict whose ``metadata`` may be shared: replaced, not changed."""
    default_priority_class(new)
    new["metadata"] = {**new["metadata"], "generation": old["metadata"].get("generation", 1)}


def _is_int32(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value in _INT32


def _known_system_class_problem(name: str, value: object, global_default: bool) -> str | None:
    """``IsKnownSystemPriorityClass``: why ``name`` may not use the reserved prefix."""
    known = _SYSTEM_CLASSES.get(name)
    if known is None:
        return f"{name} is not a known system priority class"
    if value != known[0]:
        return f"value of {name} PriorityClass must be {known[0]}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return None


def _validate_policy(policy: object) -> list[Cause]:
    if policy in (PREEMPT_LOWER_PRIORITY, PREEMPT_NEVER):
        return []
    if policy in (None, ""):
        return [required("preemptionPolicy")]
    return [
        (
            "preemptionPolicy",
            "FieldValueNotSupported",
            f'Unsupported value: "{policy}": supported values: '
            f'"{PREEMPT_LOWER_PRIORITY}", "{PREEMPT_NEVER}"',
        )
    ]


def validate_priority_class(obj: Mapping[str, Any]) -> list[Cause]:
    """``ValidatePriorityClass`` (the name itself is checked with every kind's metadata)."""
    name = str(obj["metadata"].get("name") or "")
    value = obj.get("value")
    if not _is_int32(value):
        # The real server fails earlier, decoding into an int32; still a refusal of the value.
        return [invalid("value", value, "must be a 32-bit integer")]
    causes: list[Cause] = []
    if name.startswith(SYSTEM_PRIORITY_CLASS_PREFIX):
        problem = _known_system_class_problem(name, value, bool(obj.get("globalDefault")))
        if problem is not None:
            causes.append(
                forbidden(
                    "metadata.name",
                    f"priority class names with '{SYSTEM_PRIORITY_CLASS_PREFIX}' prefix are "
                    f"reserved for system use only. error: {problem}",
                )
            )
    elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        causes.append(
            forbidden(
                "value",
                f"maximum allowed value of a user defined priority is "
                f"{HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        )
    causes.extend(_validate_policy(obj.get("preemptionPolicy")))
    return causes


def validate_priority_class_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """``ValidatePriorityClassUpdate``: ``value`` and ``preemptionPolicy`` are immutable."""
    causes: list[Cause] = []
    if new.get("value") != old.get("value"):
        causes.append(forbidden("value", "may not be changed in an update."))
    if new.get("preemptionPolicy") != old.get("preemptionPolicy"):
        causes.append(
            invalid("preemptionPolicy", new.get("preemptionPolicy"), "field is immutable")
        )
    return causes


def global_default(classes: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The class pods without a class name get: when a race left several marked
    ``globalDefault``, the one with the lowest value (``getDefaultPriorityClass``)."""
    found: Mapping[str, Any] | None = None
    for pc in classes:
        if pc.get("globalDefault") and (found is None or found["value"] > pc["value"]):
            found = pc
    return found


def global_default_conflict(
    obj: Mapping[str, Any], classes: Iterable[Mapping[str, Any]], *, updating: bool
) -> str | None:
    """Why the Priority plugin refuses ``obj`` (a create, or an update when ``updating``):
    only one class may be ``globalDefault``.  ``None`` when it may be stored."""
    if not obj.get("globalDefault"):
        return None
    current = global_default(classes)
    if current is None:
        return None
    name = current["metadata"]["name"]
    if updating and name == obj["metadata"].get("name"):
        return None
    return f"PriorityClass {name} is already marked as default. Only one default can exist"


def admit_pod_priority(
    spec: dict[str, Any], classes: Mapping[str, Mapping[str, Any]]
) -> str | None:
    """The Priority plugin on a pod CREATE: set ``spec.priority`` (and, from a class or when no
    default class exists, ``spec.preemptionPolicy``) in place.  Returns the reason the pod is
    forbidden, or ``None`` when it is admitted.  ``classes``: the PriorityClasses by name."""
    policy: object
    class_name = spec.get("priorityClassName")
    if not class_name:
        default = global_default(classes.values())
        if default is None:
            priority, policy = DEFAULT_PRIORITY, PREEMPT_LOWER_PRIORITY
            spec.pop("priorityClassName", None)  # "" is omitted on the wire
        else:
            priority, policy = default["value"], default.get("preemptionPolicy")
            spec["priorityClassName"] = default["metadata"]["name"]
    else:
        found = classes.get(str(class_name))
        if found is None:
            return f"no PriorityClass with name {class_name} was found"
        priority, policy = found["value"], found.get("preemptionPolicy")
    given = spec.get("priority")
    if given is not None and given != priority:
        return (
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {priority} from the given PriorityClass name"
        )
    spec["priority"] = priority
    if policy:
        given_policy = spec.get("preemptionPolicy")
        if given_policy is not None and given_policy != policy:
            return (
                f"the string value of PreemptionPolicy ({given_policy}) must not be provided in "
                f"pod spec; priority admission controller computed {policy} from the given "
                "PriorityClass name"
            )
        spec["preemptionPolicy"] = policy
    return None


def keep_pod_priority(spec: dict[str, Any], old_spec: Mapping[str, Any]) -> None:
    """The Priority plugin on a pod UPDATE: a body without ``priority`` / ``preemptionPolicy``
    keeps the stored ones (validation then refuses any other change of them)."""
    for key in ("priority", "preemptionPolicy"):
        if spec.get(key) is None and old_spec.get(key) is not None:
            spec[key] = old_spec[key]
