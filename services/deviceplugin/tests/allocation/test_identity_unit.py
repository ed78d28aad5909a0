"""The identity rule (pure): which pod an Allocate is for, or why the plugin refuses."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_deviceplugin.allocation.entries import AllocatingContainer, AllocatingPod, ContainerKind
from hami_deviceplugin.allocation.identity import (
    Evidence,
    Fetch,
    Identified,
    ListedContainer,
    ListedPod,
    Outcome,
    Refusal,
    Relist,
    check_entries,
    find,
    identify,
    is_admissible,
    next_entries,
    placed_by_us,
)
from hami_deviceplugin.errors import FailureKind
from hami_deviceplugin.gpu.plan import gpu_device_list, kubelet_mismatch
from hami_protocol.keys import BIND_PHASE, BIND_TIME, NVIDIA_DEVICES_TO_ALLOCATE, VGPU_NODE

from ..helpers import devices_value

NODE = "n1"
RESOURCE = "nvidia.com/gpu"
A, B = "GPU-a", "GPU-b"
OWNERS = {f"{uuid}-{i}": uuid for uuid in (A, B) for i in range(4)}
GPUS = gpu_device_list(RESOURCE, OWNERS)


def container(name: str, gpus: int = 1, kind: ContainerKind = "app") -> AllocatingContainer:
    limits = ((RESOURCE, str(gpus)),) if gpus else ()
    return AllocatingContainer(name, limits=limits, kind=kind)


def pod(
    name: str,
    *entries: Sequence[str],
    containers: Sequence[AllocatingContainer] | None = None,
    placed: bool = True,
    phase: str = "Pending",
    node: str = NODE,
    bind_phase: str = "allocating",
    scheduler: str = "hami-scheduler",
    deleting: bool = False,
    value: str | None = None,
) -> AllocatingPod:
    """A pod bound to ``node``; ``entries``: the GPU UUIDs of each container's entry (one
    container per entry, asking for as many GPUs, unless ``containers`` are given)."""
    annotations: dict[str, str] = {}
    if placed:
        annotations = {
            VGPU_NODE: node,
            BIND_PHASE: bind_phase,
            BIND_TIME: "1700000000",
            NVIDIA_DEVICES_TO_ALLOCATE: (
                value
                if value is not None
                else devices_value(*([(uuid, 1000, 10) for uuid in entry] for entry in entries))
            ),
        }
    if containers is None:
        containers = [container(f"c{i}", len(entry)) for i, entry in enumerate(entries)]
    return AllocatingPod(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        containers=tuple(containers),
        annotations=annotations,
        node_name=node,
        phase=phase,
        deleting=deleting,
        scheduler_name=scheduler,
        resource_version="7",
    )


def listed(p: AllocatingPod, holding: Mapping[str, Sequence[str]] | None = None) -> ListedPod:
    """How the kubelet lists ``p``: its sidecars and app containers with what they hold."""
    holding = holding or {}
    return ListedPod(
        p.namespace,
        p.name,
        tuple(
            ListedContainer(
                c.name, ((RESOURCE, tuple(holding[c.name])),) if holding.get(c.name) else ()
            )
            for c in p.containers
            if c.kind != "init"
        ),
    )


def evidence(
    *pods: AllocatingPod,
    requests: Sequence[Sequence[str]] = ((f"{A}-0",),),
    fresh: bool = True,
    listing: Sequence[ListedPod] | None = None,
    gone: Sequence[str] = (),
    answered: Mapping[str, frozenset[str]] | None = None,
) -> Evidence:
    return Evidence(
        node_name=NODE,
        requests=tuple(tuple(ids) for ids in requests),
        pods={p.key: p for p in pods},
        fresh=fresh,
        listing=None if listing is None else tuple(listing),
        gone=frozenset(gone),
        answered=answered or {},
    )


def identified(outcome: Outcome) -> str:
    assert isinstance(outcome, Identified), outcome
    return outcome.pod.name


def refused(outcome: Outcome) -> str:
    assert isinstance(outcome, Refusal), outcome
    return outcome.message


# --- rule 1: the kubelet's pod-resources listing -------------------------------------------------


def test_the_listed_pod_with_a_container_holding_nothing_yet_is_the_one() -> None:
    a = pod("a", [A])
    b = pod("b", [B], phase="Running")
    running = listed(b, {"c0": [f"{B}-0"]})
    outcome = find(evidence(a, b, listing=[listed(a), running], fresh=False), GPUS)
    assert identified(outcome) == "a"
    assert isinstance(outcome, Identified)
    assert outcome.via == "pod-resources"


def test_listing_wins_over_everything_else_bound_here() -> None:
    # b waits too (bound later, its lock taken, ...): only the listing tells who is admitted.
    a, b = pod("a", [A]), pod("b", [A])
    assert identified(find(evidence(a, b, listing=[listed(a)], fresh=False), GPUS)) == "a"
    assert identified(find(evidence(a, b, listing=[listed(b)], fresh=False), GPUS)) == "b"


def test_a_later_container_of_the_pod_being_admitted() -> None:
    # c0 got its GPU (entry consumed, device recorded); c1 is being answered.
    a = pod("a", [], [B], containers=[container("c0"), container("c1")])
    halfway = listed(a, {"c0": [f"{A}-1"]})
    outcome = identify(evidence(a, requests=[[f"{B}-0"]], listing=[halfway], fresh=False), GPUS)
    assert identified(outcome) == "a"


def test_a_pod_whose_gpu_containers_all_hold_theirs_is_not_being_admitted() -> None:
    a = pod("a", [A], phase="Pending")  # admitted, not started yet
    outcome = find(evidence(a, listing=[listed(a, {"c0": [f"{A}-0"]})], fresh=False), GPUS)
    assert isinstance(outcome, Relist)
    # Nor is a running one holding nothing (a kubelet that lost its checkpoint).
    b = pod("b", [A], phase="Running")
    assert isinstance(find(evidence(b, listing=[listed(b)], fresh=False), GPUS), Relist)


def test_only_an_init_container_asks_while_the_pod_is_pending() -> None:
    containers = [container("setup", 1, "init"), container("main", 0)]
    a = pod("a", [A], [], containers=containers)
    assert identified(find(evidence(a, listing=[listed(a)], fresh=False), GPUS)) == "a"
    started = pod("a", [A], [], containers=containers, phase="Running")
    assert isinstance(find(evidence(started, listing=[listed(started)], fresh=False), GPUS), Relist)


def test_a_listed_pod_the_cache_lacks_is_fetched_and_a_gone_one_ignored() -> None:
    a = pod("a", [A])
    outcome = find(evidence(listing=[listed(a)], fresh=False), GPUS)
    assert outcome == Fetch(("ns/a",))
    assert isinstance(find(evidence(listing=[listed(a)], gone=["ns/a"], fresh=False), GPUS), Relist)


def test_two_listed_pods_without_devices_fall_back_to_the_second_rule() -> None:
    a, b = pod("a", [A]), pod("b", [B])
    both = [listed(a), listed(b)]
    assert isinstance(find(evidence(a, b, listing=both, fresh=False), GPUS), Relist)
    assert "2 pods bound to it wait for GPUs (ns/a, ns/b)" in refused(
        find(evidence(a, b, listing=both), GPUS)
    )


def test_a_listed_pod_not_placed_by_us_is_refused_in_hamis_words() -> None:
    stray = pod("stray", [A], placed=False, scheduler="default-scheduler")
    a = pod("a", [A])
    outcome = find(evidence(stray, a, listing=[listed(stray)], fresh=False), GPUS)
    assert refused(outcome) == (
        "no binding pod found on node n1: pod ns/stray was not placed by hami-scheduler "
        "(schedulerName default-scheduler): it has no device decision"
    )
    assert isinstance(outcome, Refusal)
    assert outcome.pod == stray
    assert not outcome.placed
    assert outcome.kind is FailureKind.NO_POD


# --- rule 2: the node's admissible pods ---------------------------------------------------------


def test_without_a_listing_the_cache_is_not_enough() -> None:
    assert isinstance(find(evidence(pod("a", [A]), fresh=False), GPUS), Relist)


def test_the_sole_admissible_pod() -> None:
    others = [
        pod("running", [A], phase="Running"),
        pod("done", [], bind_phase="success"),
        pod("failed", [A], bind_phase="failed"),
        pod("elsewhere", [A], node="n2"),
        pod("deleting", [A], deleting=True),
        pod("no-gpu", [A], containers=[container("c0", 0)]),
        pod("succeeded", [A], phase="Succeeded"),
    ]
    outcome = find(evidence(pod("a", [A]), *others), GPUS)
    assert identified(outcome) == "a"
    assert isinstance(outcome, Identified)
    assert outcome.via == "sole-admissible"
    assert "no pod bound to it waits for GPUs" in refused(find(evidence(*others), GPUS))


def test_a_pod_with_an_unreadable_list_is_admissible_so_the_plan_can_say_why() -> None:
    broken = pod("broken", [A], value="garbage,,:;")
    assert is_admissible(broken, GPUS, NODE)
    assert identified(find(evidence(broken), GPUS)) == "broken"


def test_two_waiting_pods_are_ambiguous_whatever_their_entries() -> None:
    message = refused(find(evidence(pod("a", [A]), pod("b", [B])), GPUS))
    assert message.startswith("no binding pod found on node n1: 2 pods bound to it wait for GPUs")
    assert "without the kubelet's pod-resources API" in message


def test_a_pending_pod_not_placed_by_us_makes_it_ambiguous() -> None:
    stray = pod("stray", [A], placed=False)
    assert "(ns/a, ns/stray)" in refused(find(evidence(pod("a", [A]), stray), GPUS))
    alone = find(evidence(stray), GPUS)
    assert "pod ns/stray was not placed by hami-scheduler" in refused(alone)


def test_many_waiting_pods_are_named_up_to_five() -> None:
    pods = [pod(f"p{i}", [A]) for i in range(7)]
    assert "(ns/p0, ns/p1, ns/p2, ns/p3, ns/p4 and 2 more)" in refused(find(evidence(*pods), GPUS))


# --- the kubelet's device ids -------------------------------------------------------------------


def test_the_entry_must_name_the_kubelets_gpus() -> None:
    a = pod("a", [A])
    outcome = identify(evidence(a, requests=[[f"{B}-2"]]), GPUS)
    assert refused(outcome) == "the kubelet chose GPUs [GPU-b] but pod ns/a was given [GPU-a]"
    assert isinstance(outcome, Refusal)
    assert outcome.kind is FailureKind.INVALID
    assert outcome.placed
    assert identified(identify(evidence(a, requests=[[f"{A}-3"]]), GPUS)) == "a"


def test_an_init_containers_replica_handed_on_matches() -> None:
    a = pod("a", [A], [B])
    halfway = pod("a", [], [B])
    handed_on = {a.uid: frozenset({f"{A}-1"})}
    assert check_entries(halfway, GPUS, [[f"{A}-1"]], handed_on) is None
    assert check_entries(halfway, GPUS, [[f"{A}-1"]], {}) is not None
    assert next_entries(a, GPUS, 3) == next_entries(a, GPUS, 2)


def test_what_the_plan_reports_is_left_to_it() -> None:
    # Another count, a GPU this node lacks, an unreadable list, nothing left: the plan says it.
    for p, ids in [
        (pod("a", [A, B]), [f"{A}-0"]),
        (pod("a", ["GPU-elsewhere"]), [f"{A}-0"]),
        (pod("a", [A], value="x,y:;"), [f"{B}-0"]),
        (pod("a", []), [f"{B}-0"]),
    ]:
        assert check_entries(p, GPUS, [ids], {}) is None


# --- properties ---------------------------------------------------------------------------------

UUIDS = st.sampled_from([A, B, "GPU-elsewhere"])
REPLICAS = st.sampled_from(sorted(OWNERS))


@st.composite
def node_pod(draw: st.DrawFn, name: str) -> AllocatingPod:
    entries = draw(st.lists(st.lists(UUIDS, max_size=2), min_size=1, max_size=2))
    asks = [draw(st.sampled_from([len(entry), 0, 1])) for entry in entries]
    return pod(
        name,
        *entries,
        containers=[container(f"c{i}", n) for i, n in enumerate(asks)],
        placed=draw(st.sampled_from([True, True, True, False])),
        phase=draw(st.sampled_from(["Pending", "Pending", "", "Running", "Failed"])),
        node=draw(st.sampled_from([NODE, NODE, NODE, "n2"])),
        bind_phase=draw(st.sampled_from(["allocating", "allocating", "success", "failed"])),
        deleting=draw(st.sampled_from([False, False, False, True])),
    )


@st.composite
def cases(draw: st.DrawFn) -> Evidence:
    pods = [draw(node_pod(f"p{i}")) for i in range(draw(st.integers(0, 3)))]
    listing = None
    if draw(st.booleans()):
        listing = [
            listed(p, {c.name: draw(st.lists(REPLICAS, max_size=1)) for c in p.containers})
            for p in pods
            if draw(st.booleans())
        ]
    requests = draw(st.lists(st.lists(REPLICAS, min_size=1, max_size=2), min_size=1, max_size=2))
    answered = {p.uid: frozenset(draw(st.lists(REPLICAS, max_size=1))) for p in pods}
    return evidence(
        *pods,
        requests=requests,
        fresh=draw(st.sampled_from([True, True, False])),
        listing=listing,
        answered=answered,
    )


@settings(max_examples=400)
@given(cases())
def test_never_a_pod_whose_next_entries_differ_from_the_kubelets_gpus(case: Evidence) -> None:
    outcome = identify(case, GPUS)
    if isinstance(outcome, Identified):
        entries = next_entries(outcome.pod, GPUS, len(case.requests))
        reused = case.answered.get(outcome.pod.uid, frozenset())
        for entry, ids in zip(entries, case.requests, strict=False):
            assert kubelet_mismatch(entry, ids, reused, owners=OWNERS) is None


@settings(max_examples=400)
@given(cases())
def test_never_a_pod_not_placed_by_us(case: Evidence) -> None:
    outcome = identify(case, GPUS)
    if isinstance(outcome, Identified):
        assert placed_by_us(outcome.pod)
    if isinstance(outcome, Refusal) and outcome.pod is not None and not outcome.placed:
        assert "was not placed by hami-scheduler" in outcome.message


@settings(max_examples=400)
@given(cases())
def test_without_a_single_listed_pod_the_answer_is_the_only_admissible_one(
    case: Evidence,
) -> None:
    outcome = find(case, GPUS)
    if isinstance(outcome, Identified) and outcome.via == "sole-admissible":
        assert case.fresh
        admissible = [p for p in case.pods.values() if is_admissible(p, GPUS, NODE)]
        assert admissible == [outcome.pod]
    if isinstance(outcome, Identified) and outcome.via == "pod-resources":
        assert case.listing is not None
        assert outcome.pod.key in {p.key for p in case.listing}


@given(st.lists(UUIDS, min_size=1, max_size=2), st.integers(2, 4), st.booleans())
def test_pods_with_the_same_next_entry_and_no_other_evidence_are_refused(
    entry: list[str], count: int, listed_all: bool
) -> None:
    pods = [pod(f"p{i}", entry) for i in range(count)]
    # No listing, or one that shows every one of them still waiting: nothing tells them apart.
    listing = [listed(p) for p in pods] if listed_all else None
    requests = [[f"{uuid}-{i}" for i, uuid in enumerate(entry)]]
    outcome = identify(evidence(*pods, requests=requests, listing=listing), GPUS)
    assert isinstance(outcome, Refusal)
    assert outcome.pod is None
    assert f"{count} pods bound to it wait for GPUs" in outcome.message


@given(cases(), st.data())
def test_a_listing_naming_one_pod_being_admitted_decides(
    case: Evidence, data: st.DataObject
) -> None:
    candidates = [p for p in case.pods.values() if p.phase in ("", "Pending") and not p.deleting]
    if not candidates:
        return
    chosen = data.draw(st.sampled_from(candidates))
    asking = [c for c in chosen.containers if c.limit(RESOURCE) not in (None, "0")]
    if not asking:
        return
    # Every other pod listed with all its containers holding a device: only ``chosen`` waits.
    others = [
        listed(p, {c.name: [f"{A}-0"] for c in p.containers})
        for p in case.pods.values()
        if p is not chosen
    ]
    shown = Evidence(
        node_name=NODE,
        requests=case.requests,
        pods=case.pods,
        listing=(listed(chosen), *others),
    )
    outcome = find(shown, GPUS)
    if placed_by_us(chosen):
        assert identified(outcome) == chosen.name
    else:
        assert isinstance(outcome, Refusal)
        assert outcome.pod == chosen


@pytest.mark.parametrize("fresh", [True, False])
def test_nothing_bound_here(fresh: bool) -> None:
    outcome = find(evidence(fresh=fresh, listing=[]), GPUS)
    if fresh:
        assert "no pod bound to it waits for GPUs" in refused(outcome)
    else:
        assert isinstance(outcome, Relist)
