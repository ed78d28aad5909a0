"""Pure MIG decisions: what an Allocate adopts, creates or clears; start-up; the reconciler."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_deviceplugin.allocation.entries import AllocatingPod
from hami_deviceplugin.errors import AllocateError
from hami_deviceplugin.gpu.mig.decide import (
    Adopt,
    Clear,
    Create,
    LiveReservations,
    live_reservations,
    reconcile_destroys,
    reservation_steps,
    startup_plan,
)
from hami_deviceplugin.gpu.mig.model import MigCapability, MigInstance, MigState, overlaps
from hami_deviceplugin.gpu.mig.tables import fake_capability
from hami_protocol.keys import NVIDIA_MIG_ALLOCATIONS
from hami_protocol.node.registry import MigPlacement
from hami_protocol.pod.mig import MigReservation, MigRuntimeIds, encode_mig_reservations

GPU = "GPU-a100"
A100 = fake_capability("A100-SXM4-40GB")
assert A100 is not None
CAPS: dict[str, MigCapability] = {GPU: A100}


def res(
    profile: str, start: int, size: int, *, device: int = 0, container: int = 0
) -> MigReservation:
    return MigReservation(container, device, GPU, profile, MigPlacement(start, size))


def inst(profile: str, start: int, size: int, gi: int, gpu: str = GPU) -> MigInstance:
    return MigInstance(gpu, profile, MigPlacement(start, size), gi, 0, f"MIG-{gpu}-{gi}")


def steps(
    reservations: list[MigReservation],
    *,
    instances: tuple[MigInstance, ...] = (),
    others: dict[str, tuple[MigReservation, ...]] | None = None,
    mode: str = "enabled",
    pods_known: bool = True,
    doubtful: frozenset[str] = frozenset(),
) -> tuple[Adopt | Create | Clear, ...]:
    live = LiveReservations(by_pod={"me": tuple(reservations), **(others or {})}, doubtful=doubtful)
    return reservation_steps(
        reservations,
        pod_uid="me",
        capabilities=CAPS,
        states={GPU: MigState(mode, instances)},  # type: ignore[arg-type]
        live=live,
        pods_known=pods_known,
    )


def test_fresh_gpu_creates_each_reservation() -> None:
    plan = steps([res("1g.5gb", 6, 1), res("3g.20gb", 0, 4, device=1)])
    assert [type(s) for s in plan] == [Create, Create]
    assert [s.reservation.profile for s in plan if isinstance(s, Create)] == ["1g.5gb", "3g.20gb"]


def test_an_instance_the_pod_already_holds_is_adopted() -> None:
    existing = inst("1g.5gb", 6, 1, 9)
    # The pod's reservation names the instance an earlier Allocate of this pod made.
    held = dataclasses.replace(res("1g.5gb", 6, 1), runtime=MigRuntimeIds(existing.mig_uuid, 9, 0))
    (step,) = steps([held], instances=(existing,))
    assert step == Adopt(held, existing)


def test_a_leftover_at_exactly_the_placement_is_made_anew_never_handed_over() -> None:
    # A force-deleted pod's container may still run in an instance nobody reserves any more:
    # the next pod reserving that very placement gets a new instance (the clear fails, and the
    # Allocate with it, while processes run there), never the leftover.
    leftover = inst("1g.5gb", 6, 1, 9)
    plan = steps([res("1g.5gb", 6, 1)], instances=(leftover,))
    assert plan == (Clear(leftover), Create(res("1g.5gb", 6, 1), A100.profile("1g.5gb")))
    with pytest.raises(AllocateError, match="cannot be cleared now"):
        steps([res("1g.5gb", 6, 1)], instances=(leftover,), pods_known=False)


@pytest.mark.parametrize(
    ("reservation", "message"),
    [
        (res("1g.6gb", 0, 1), "unknown MIG profile '1g.6gb'"),
        (res("3g.20gb", 2, 4), "offers no 3g.20gb instance at slices 2+4"),
        (res("1g.5gb", 7, 1), "offers no 1g.5gb instance at slices 7+1"),
        (
            MigReservation(0, 0, "GPU-other", "1g.5gb", MigPlacement(0, 1)),
            "not a MIG GPU of this node",
        ),
    ],
)
def test_refusals_name_the_reason(reservation: MigReservation, message: str) -> None:
    with pytest.raises(AllocateError, match=re.escape(message)):
        steps([reservation])


def test_mig_mode_off_or_pending_is_refused() -> None:
    for mode in ("disabled", "pending"):
        with pytest.raises(AllocateError, match=f"MIG mode is {mode}"):
            steps([res("1g.5gb", 0, 1)], mode=mode)


def test_another_pods_reservation_is_never_shared_nor_overlapped() -> None:
    theirs = {"them": (res("1g.5gb", 6, 1),)}
    with pytest.raises(AllocateError, match="overlaps pod them"):
        steps([res("1g.5gb", 6, 1)], instances=(inst("1g.5gb", 6, 1, 3),), others=theirs)
    with pytest.raises(AllocateError, match="overlaps pod them"):
        steps([res("3g.20gb", 4, 4)], others=theirs)


def test_same_instance_for_two_containers_of_one_pod_but_no_overlap() -> None:
    init = res("1g.5gb", 6, 1, container=0)
    app = res("1g.5gb", 6, 1, container=1)
    plan = steps([app], others={"me-too": ()})
    assert plan == (Create(app, A100.profiles[0]),)
    live = LiveReservations(by_pod={"me": (init, app)})
    plan = reservation_steps(
        [app],
        pod_uid="me",
        capabilities=CAPS,
        states={GPU: MigState("enabled")},
        live=live,
        pods_known=True,
    )
    assert [type(s) for s in plan] == [Create]
    with pytest.raises(AllocateError, match="overlap"):
        steps([res("1g.5gb", 4, 1), res("2g.10gb", 4, 2, device=1)])


def test_a_stale_instance_in_the_way_is_cleared_only_when_safe() -> None:
    stale = inst("7g.40gb", 0, 8, 1)
    plan = steps([res("1g.5gb", 6, 1)], instances=(stale,))
    assert plan == (Clear(stale), Create(res("1g.5gb", 6, 1), A100.profiles[0]))
    with pytest.raises(AllocateError, match="cannot be cleared now"):
        steps([res("1g.5gb", 6, 1)], instances=(stale,), pods_known=False)
    with pytest.raises(AllocateError, match="cannot be cleared now"):
        steps([res("1g.5gb", 6, 1)], instances=(stale,), doubtful=frozenset({GPU}))


def test_nothing_is_adopted_on_a_doubtful_gpu() -> None:
    with pytest.raises(AllocateError, match="cannot be read"):
        steps(
            [res("1g.5gb", 6, 1)], instances=(inst("1g.5gb", 6, 1, 2),), doubtful=frozenset({GPU})
        )


def _a100_reservations() -> st.SearchStrategy[list[MigReservation]]:
    spots = [(p.name, s) for p in A100.profiles for s in p.placements]
    return st.lists(st.sampled_from(spots), max_size=6).map(
        lambda chosen: [
            res(name, spot.start, spot.size, device=n) for n, (name, spot) in enumerate(chosen)
        ]
    )


@given(_a100_reservations(), st.lists(st.sampled_from(range(7)), max_size=4, unique=True))
def test_no_two_instances_the_plan_leaves_overlap(
    reservations: list[MigReservation], existing_starts: list[int]
) -> None:
    existing = tuple(inst("1g.5gb", s, 1, 10 + s) for s in existing_starts)
    try:
        plan = steps(reservations, instances=existing)
    except AllocateError:
        return
    cleared = {s.instance for s in plan if isinstance(s, Clear)}
    kept = [i.placement for i in existing if i not in cleared]
    adopted = [s.instance.placement for s in plan if isinstance(s, Adopt)]
    made = [s.reservation.placement for s in plan if isinstance(s, Create)]
    final = [p for p in kept if p not in adopted] + adopted + made
    for n, a in enumerate(final):
        for b in final[n + 1 :]:
            assert not overlaps(a, b)


def _pod(uid: str, value: str, phase: str = "Running") -> AllocatingPod:
    return AllocatingPod("ns", uid, uid, annotations={NVIDIA_MIG_ALLOCATIONS: value}, phase=phase)


def test_live_reservations_skip_terminated_pods_and_doubt_unreadable_ones() -> None:
    good = encode_mig_reservations([res("1g.5gb", 0, 1)])
    live = live_reservations(
        [_pod("a", good), _pod("b", good, "Succeeded"), _pod("c", f'[{{"gpuUUID":"{GPU}"')],
        [GPU, "GPU-b"],
    )
    assert set(live.by_pod) == {"a"}
    assert live.doubtful == {GPU}
    unnamed = live_reservations([_pod("c", "nonsense")], [GPU, "GPU-b"])
    assert unnamed.doubtful == {GPU, "GPU-b"}


def test_reconcile_destroys_only_unreferenced_instances_where_safe() -> None:
    used, unused, foreign = (
        inst("1g.5gb", 0, 1, 1),
        inst("1g.5gb", 1, 1, 2),
        inst("1g.5gb", 2, 1, 3),
    )
    states = {GPU: MigState("enabled", (used, unused, foreign))}
    live = LiveReservations(by_pod={"a": (res("1g.5gb", 0, 1),)})
    managed = frozenset({(GPU, 1), (GPU, 2)})
    assert reconcile_destroys(states, owned=frozenset(), managed=managed, live=live) == (unused,)
    assert reconcile_destroys(states, owned=frozenset({GPU}), managed=frozenset(), live=live) == (
        unused,
        foreign,
    )
    doubt = LiveReservations(by_pod=live.by_pod, doubtful=frozenset({GPU}))
    assert reconcile_destroys(states, owned=frozenset({GPU}), managed=managed, live=doubt) == ()


def test_startup_clears_idle_gpus_and_adopts_on_busy_ones() -> None:
    kept = inst("1g.5gb", 0, 1, 1)
    states = {
        GPU: MigState("enabled", (kept, inst("1g.5gb", 1, 1, 2))),
        "GPU-idle": MigState("enabled", (inst("7g.40gb", 0, 8, 1, "GPU-idle"),)),
        "GPU-off": MigState("disabled"),
        "GPU-reset": MigState("pending"),
        "GPU-proc": MigState("enabled", (inst("1g.5gb", 0, 1, 4, "GPU-proc"),)),
    }
    live = LiveReservations(by_pod={"a": (res("1g.5gb", 0, 1),)})
    plan = startup_plan(states, live=live, processes=frozenset({"GPU-proc"}))
    assert plan.busy == {GPU, "GPU-proc"}
    assert plan.enable == ("GPU-off",)
    assert plan.pending == ("GPU-reset",)
    assert [(i.gpu_uuid, i.gi_id) for i in plan.destroy] == [("GPU-idle", 1)]
    assert plan.adopt == {(GPU, 1)}
    assert plan.owned == {"GPU-off", "GPU-idle"}
    blind = startup_plan(states, live=None, processes=frozenset())
    assert (blind.busy, blind.enable, blind.destroy, blind.adopt) == (
        frozenset(states),
        (),
        (),
        frozenset(),
    )
