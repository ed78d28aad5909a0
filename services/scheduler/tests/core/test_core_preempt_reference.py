""":func:`~hami_scheduler.core.preempt.select_victims` answers exactly as its straightforward
form did, where every trial rebuilt the node with :meth:`NodeState.without` and took the full
:func:`~hami_scheduler.core.joint.route.decide_on`.  The fast trials build trial nodes from
per-position sums, ask the filter's quick verdict and remember sets already judged; the steps
around them (candidates, reprieve order, minimality passes) did not change, so the oracle runs
those same steps with the trials it replaced (:class:`Rebuilt`) — same victims (the very
objects), same order, same PDB count, same refusal text, over random nodes, occupants, offered
pods and plans (stale holdings that clamp at zero, pods listed twice or sharing a UID, pods
holding nothing, two containers, GPU policies, NUMA binding, a UUID filter, exclusive PCIe
claims on the joint path)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from hami_protocol import keys
from hami_protocol.pod.devices import DeviceUsageSummary
from hami_scheduler.core import NodeUsage, apply_usage
from hami_scheduler.core.joint.hints import NO_JOINT, JointRequest
from hami_scheduler.core.joint.nics import NicPodUsage, build_nic_usage
from hami_scheduler.core.joint.route import decide_on
from hami_scheduler.core.plan import PodPlan
from hami_scheduler.core.preempt import (
    NodeState,
    Occupant,
    Verdict,
    Victims,
    _select_victims,
    select_victims,
)

from ..core_helpers import dev, gpu, node, plan_of
from ..core_joint_helpers import GPU_MEM, SWITCHES, f_layout, gpu_id, plan_and_request, pod_json


class Rebuilt:
    """The trials as first written: every one rebuilds the node with :meth:`NodeState.without`
    and takes the full :func:`decide_on`."""

    def __init__(
        self, node: NodeState, plan: PodPlan, request: JointRequest, required: Sequence[Occupant]
    ) -> None:
        self.node, self.plan, self.request, self.required = node, plan, request, required

    def verdict(self, gone: Sequence[Occupant]) -> Verdict:
        node = self.node
        return decide_on(
            self.plan, self.request, node.without([*self.required, *gone]).fleet(), node.name
        )

    def fits(self, gone: Sequence[Occupant]) -> bool:
        found = self.verdict(gone)
        return not isinstance(found, str) and found.fits


MEMS = (0, 1000, 2000, 3000, 4000, 6000)


def _usage(draw: st.DrawFn, uuids: Sequence[str], mem_unit: int) -> list[DeviceUsageSummary]:
    held = draw(st.lists(st.sampled_from(uuids), max_size=2, unique=True))
    return [
        DeviceUsageSummary(
            uuid,
            "NVIDIA",
            draw(st.sampled_from(MEMS)) * mem_unit,
            draw(st.sampled_from([0, 20, 50, 100])),
            draw(st.integers(0, 2)),
        )
        for uuid in held
    ]


def _pods(
    draw: st.DrawFn, uuids: Sequence[str], mem_unit: int, claims: Sequence[NicPodUsage] = ()
) -> list[Occupant]:
    pods: list[Occupant] = []
    for i in range(draw(st.integers(0, 7))):
        if pods and draw(st.integers(0, 4)) == 0:
            # The same pod listed twice, or another pod under the same UID.
            twin = draw(st.sampled_from(pods))
            pods.append(twin if draw(st.booleans()) else Occupant(twin.uid, twin.priority))
            continue
        nics = draw(st.sampled_from([None, *claims])) if claims else None
        pods.append(
            Occupant(
                f"p{i}",
                draw(st.integers(0, 4)),
                draw(st.sampled_from([None, 1.0, 2.0, 3.0])),
                tuple(_usage(draw, uuids, mem_unit)),
                nics=nics,
                violates_pdb=draw(st.booleans()),
            )
        )
    return pods


def _split(draw: st.DrawFn, pods: list[Occupant]) -> tuple[list[Occupant], list[Occupant]]:
    """Some pods as kube-scheduler's offered victims (``required``), the rest as occupants."""
    offered = draw(st.sets(st.sampled_from(range(len(pods))), max_size=2)) if pods else set()
    required = [pod for i, pod in enumerate(pods) if i in offered]
    return required, [pod for i, pod in enumerate(pods) if i not in offered]


def _applied(draw: st.DrawFn, idle: NodeUsage, pods: Sequence[Occupant]) -> NodeUsage:
    """The node as the cache holds it; some pods' holdings missing (stale), so taking them away
    clamps at zero."""
    kept = [pod for pod in pods if draw(st.integers(0, 5)) > 0]
    return apply_usage(idle, [summary for pod in kept for summary in pod.usage])


Case = tuple[NodeState, PodPlan, JointRequest, int, list[Occupant], list[Occupant]]


@st.composite
def plain_cases(draw: st.DrawFn) -> Case:
    cards = draw(st.integers(1, 4))
    idle = node(
        "n1",
        [
            dev(
                f"GPU-{i}",
                index=i,
                mem=draw(st.sampled_from([4000, 8000])),
                count=draw(st.integers(1, 3)),
                numa=i // 2,
            )
            for i in range(cards)
        ],
    )
    uuids = [f"GPU-{i}" for i in range(cards)]
    pods = _pods(draw, uuids, 1)
    required, occupants = _split(draw, pods)
    containers = [
        gpu(
            draw(st.integers(1, 2)),
            mem=draw(st.sampled_from([1000, 2000, 4000, 6000])),
            cores=draw(st.sampled_from([None, 30, 100])),
        )
        for _ in range(draw(st.integers(1, 2)))
    ]
    annotations: dict[str, str] = {}
    policy = draw(st.sampled_from([None, "binpack", "spread", "topology-aware"]))
    if policy is not None:
        annotations[keys.GPU_SCHEDULER_POLICY] = policy
    if draw(st.booleans()):
        annotations[keys.NVIDIA_NUMA_BIND] = "true"
    if draw(st.integers(0, 3)) == 0:
        annotations[keys.NVIDIA_USE_GPUUUID] = "GPU-0"
    plan = plan_of(containers, annotations=annotations)
    state = NodeState("n1", _applied(draw, idle, pods))
    return state, plan, NO_JOINT, draw(st.integers(0, 5)), occupants, required


@st.composite
def claimed_cases(draw: st.DrawFn) -> Case:
    """GPUs behind PCIe switches, some pods holding exclusive claims: the joint path."""
    idle = node("n1", [dev(gpu_id(i), mem=GPU_MEM, index=i) for i in range(4)])
    uuids = [gpu_id(i) for i in range(4)]
    claims = [NicPodUsage(claims=(("gpu", switch),)) for switch in SWITCHES[:2]]
    pods = _pods(draw, uuids, 10, claims)
    required, occupants = _split(draw, pods)
    held = [pod.nics for pod in pods if pod.nics is not None and draw(st.integers(0, 5)) > 0]
    gpus = _applied(draw, idle, pods)
    state = NodeState("n1", gpus, build_nic_usage(f_layout(), held))
    plan, request = plan_and_request(
        pod_json(gpus=draw(st.integers(1, 2)), rdma=None, hint=None, joint=None)
    )
    return state, plan, request, draw(st.integers(0, 5)), occupants, required


def _same_answer(case: Case) -> None:
    state, plan, request, priority, occupants, required = case
    fast = select_victims(
        state, plan, request, priority=priority, occupants=occupants, required=required
    )
    # select_victims as first written: the same steps, with Rebuilt trials.
    rebuilt = Rebuilt(state, plan, request, required)
    slow = _select_victims(state, priority, occupants, required, lambda _: rebuilt)
    assert fast == slow
    if isinstance(fast, Victims) and isinstance(slow, Victims):
        # The very objects, in the same order (equal values could hide a swapped twin).
        assert [id(pod) for pod in fast.pods] == [id(pod) for pod in slow.pods]


@settings(max_examples=400, deadline=None)
@given(plain_cases())
def test_the_fast_choice_equals_the_reference_on_hamis_path(case: Case) -> None:
    _same_answer(case)


@settings(max_examples=150, deadline=None)
@given(claimed_cases())
def test_the_fast_choice_equals_the_reference_on_the_joint_path(case: Case) -> None:
    _same_answer(case)
