"""The cache fed by watch events: registrations, pod holdings, assumptions, quotas."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hami_protocol import keys
from hami_protocol.node.registry import DevicePairScore, encode_pair_scores
from hami_protocol.pod.devices import DeviceUsageSummary
from hami_protocol.selectors import parse_selector_string
from hami_protocol.vendor.table import DEFAULT_VENDORS, NVIDIA
from hami_scheduler.cache.holdings import BoundDecision
from hami_scheduler.cache.pods import Holding, allocation_key, slim_pod
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core import QuotaLimits

from ..service_helpers import gpus, node_object, pod_object, register_annotations

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def cache(**kwargs: Any) -> SchedulerCache:
    return SchedulerCache(DEFAULT_VENDORS, now=lambda: NOW, **kwargs)


def node(name: str, count: int = 2, **kwargs: Any) -> dict[str, Any]:
    return node_object(name, register_annotations(gpus(name, count, **kwargs)))


def placed(
    name: str,
    node_name: str,
    allocated: str,
    *,
    uid: str | None = None,
    init: int = 0,
    phase: str | None = None,
    init_exit_codes: list[int] | None = None,
) -> dict[str, Any]:
    pod = pod_object(
        name,
        init=[{"name": f"i{i}", "image": "x"} for i in range(init)],
        annotations={keys.VGPU_NODE: node_name, keys.NVIDIA_DEVICES_ALLOCATED: allocated},
    )
    pod["metadata"]["uid"] = uid or f"uid-{name}"
    status: dict[str, Any] = {}
    if phase:
        status["phase"] = phase
    if init_exit_codes is not None:
        status["initContainerStatuses"] = [
            {"state": {"terminated": {"exitCode": code}}} for code in init_exit_codes
        ]
    pod["status"] = status
    return pod


def held(c: SchedulerCache, node_name: str, index: int = 0) -> tuple[int, int, int]:
    device = c.nodes[node_name].device(f"GPU-{node_name}-{index}")
    assert device is not None
    return device.used, device.usedmem, device.usedcores


def test_registration_in_either_encoding_and_unchanged_values_cost_nothing() -> None:
    c = cache()
    c.upsert_node(node("a"))
    c.upsert_node(node_object("b", register_annotations(gpus("b", 1), colon=True)))
    c.upsert_node(node_object("plain"))
    assert sorted(c.nodes) == ["a", "b"]
    assert c.node_count == 3
    first = c.nodes["a"]
    # The device plugin rewrites the same value (and the handshake): nothing is rebuilt.
    c.upsert_node(node("a"))
    assert c.nodes["a"] is first
    c.upsert_node(node_object("a", register_annotations(gpus("a", 3))))
    assert len(c.nodes["a"].devices) == 3


def test_cordon_and_pair_scores_rebuild_the_node() -> None:
    c = cache()
    c.upsert_node(node("a"))
    scores = encode_pair_scores([DevicePairScore("GPU-a-0", (("GPU-a-1", 200),))])
    annotations = {
        **register_annotations(gpus("a", 2)),
        keys.DEVICE_CORDON: "GPU-a-1",
        keys.NVIDIA_SCORE: scores,
    }
    c.upsert_node(node_object("a", annotations))
    layout = c.nodes["a"].layout
    assert layout.cordon == frozenset({"GPU-a-1"})
    assert layout.pair_score("GPU-a-0", "GPU-a-1") == 200


def test_label_selector_limits_the_nodes() -> None:
    c = cache(selector=parse_selector_string("gpu=on"))
    labelled = node_object("a", register_annotations(gpus("a", 1)), labels={"gpu": "on"})
    c.upsert_node(labelled)
    c.upsert_node(node("b"))
    assert list(c.nodes) == ["a"]
    c.upsert_node(node("a"))  # label removed
    assert c.nodes == {}
    assert c.node_count == 0


def test_bad_annotations_are_reported_once_per_value() -> None:
    reported: list[tuple[str, str, str]] = []
    c = cache(on_bad_annotation=lambda n, k, problem, raw: reported.append((n, k, raw)))
    bad = node_object("x", {keys.NVIDIA_REGISTER: "garbage"})
    for _ in range(3):
        c.upsert_node(bad)
    c.upsert_node(node_object("x", {keys.NVIDIA_REGISTER: "[1]"}))
    assert reported == [
        ("x", keys.NVIDIA_REGISTER, "garbage"),
        ("x", keys.NVIDIA_REGISTER, "[1]"),
    ]
    assert c.troubled == {"x"}
    problem = c.node_problem("x", [NVIDIA])
    assert problem is not None
    assert problem.startswith(f"node annotation {keys.NVIDIA_REGISTER}")
    assert c.node_problem("x", ["MLU"]) is None
    c.upsert_node(node("x"))
    assert c.troubled == set()
    assert "x" in c.nodes


def test_pod_usage_init_peak_then_app_only_then_released() -> None:
    c = cache()
    c.upsert_node(node("n"))
    # init 5000/10 then app 3000/20 on the same GPU: peak memory 5000, cores max(10, 20).
    value = "GPU-n-0,NVIDIA,5000,10:;GPU-n-0,NVIDIA,3000,20:;"
    c.upsert_pod(placed("p", "n", value, init=1))
    assert held(c, "n") == (1, 5000, 20)
    assert c.ledger.used("default", NVIDIA) == (5000, 20)
    c.upsert_pod(placed("p", "n", value, init=1, init_exit_codes=[1]))
    assert held(c, "n") == (1, 5000, 20)
    c.upsert_pod(placed("p", "n", value, init=1, init_exit_codes=[0]))
    assert held(c, "n") == (1, 3000, 20)
    c.upsert_pod(placed("p", "n", value, init=1, phase="Succeeded"))
    assert held(c, "n") == (0, 0, 0)
    assert c.pod_count == 0
    assert c.ledger.used("default", NVIDIA) == (0, 0)


def test_deleted_pods_release_and_unknown_devices_are_ignored() -> None:
    c = cache()
    c.upsert_node(node("n"))
    pod = placed("p", "n", "GPU-n-0,NVIDIA,1000,5:GPU-gone,NVIDIA,7,7:;")
    c.upsert_pod(pod)
    assert held(c, "n") == (1, 1000, 5)
    c.remove_pod(pod)
    assert held(c, "n") == (0, 0, 0)
    assert c.ledger.used("default", NVIDIA) == (0, 0)


def test_pods_seen_before_their_node_count_once_it_registers() -> None:
    c = cache()
    c.upsert_pod(placed("p", "late", "GPU-late-1,NVIDIA,2000,0:;"))
    assert c.nodes == {}
    c.upsert_node(node("late"))
    assert held(c, "late", 1) == (1, 2000, 0)
    # Re-registration (a device more) keeps what pods hold.
    c.upsert_node(node_object("late", register_annotations(gpus("late", 3))))
    assert held(c, "late", 1) == (1, 2000, 0)
    c.remove_node_named("late")
    c.upsert_node(node("late"))
    assert held(c, "late", 1) == (1, 2000, 0)


def test_undecodable_pod_lists_hold_nothing_and_are_reported_once() -> None:
    problems: list[str] = []
    c = cache(on_pod_problem=lambda pod, uid, problem: problems.append(pod))
    c.upsert_node(node("n"))
    for _ in range(3):
        c.upsert_pod(placed("p", "n", "GPU-n-0,NVIDIA:;"))
    assert held(c, "n") == (0, 0, 0)
    assert problems == ["default/p"]


def _holding(node_name: str, mem: int) -> Holding:
    value = f"GPU-{node_name}-0,NVIDIA,{mem},0:;"
    return Holding(
        node=node_name,
        namespace="default",
        usage=(DeviceUsageSummary(f"GPU-{node_name}-0", NVIDIA, mem, 0, 1),),
        key=allocation_key(node_name, {NVIDIA: value}),
    )


def test_assumptions_count_at_once_until_confirmed_or_forgotten() -> None:
    c = cache()
    c.upsert_node(node("n"))
    c.assume("uid-p", "p", _holding("n", 3000))
    assert held(c, "n") == (1, 3000, 0)
    assert c.assumed_count() == 1
    # An older event without the decision does not undo the assumption.
    c.upsert_pod(
        {**pod_object("p"), "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"}}
    )
    assert held(c, "n") == (1, 3000, 0)
    c.upsert_pod(placed("p", "n", "GPU-n-0,NVIDIA,3000,0:;"))
    assert c.assumed_count() == 0
    assert held(c, "n") == (1, 3000, 0)
    c.assume("uid-q", "q", _holding("n", 1000))
    c.forget("uid-q", allocation_key("n", {NVIDIA: "other"}))
    assert held(c, "n") == (2, 4000, 0)
    c.forget("uid-q", _holding("n", 1000).key)
    assert held(c, "n") == (1, 3000, 0)
    assert c.pod_count == 1


def test_a_relist_forgets_bound_decisions_whose_pods_it_lacks_and_keeps_the_rest() -> None:
    c = cache()
    c.upsert_node(node("n"))
    gone, filtered, listed, late = (_holding("n", mem) for mem in (1000, 2000, 3000, 4000))
    c.assume("uid-gone", "gone", gone)
    c.bound("uid-gone", gone.key)
    c.assume("uid-filtered", "filtered", filtered)  # filtered, its bind still to come
    c.assume("uid-listed", "listed", listed)
    c.bound("uid-listed", listed.key)
    c.bound("uid-filtered", gone.key)  # not its assumption: nothing
    before = c.bound_unconfirmed()
    assert {uid: b.key for uid, b in before.items()} == {
        "uid-gone": gone.key,
        "uid-listed": listed.key,
    }
    # Bound once the list had begun: the list may predate its Binding.
    c.assume("uid-late", "late", late)
    c.bound("uid-late", late.key)
    assert held(c, "n") == (4, 10000, 0)

    assert c.forget_unlisted(before, {"uid-listed"}) == [("uid-gone", "default/gone")]
    assert held(c, "n") == (3, 9000, 0)
    assert c.holding("uid-gone") is None
    assert c.assumed_count() == 3
    assert {u: b.key for u, b in c.bound_unconfirmed().items()} == {
        "uid-listed": listed.key,
        "uid-late": late.key,
    }
    # Once the watch confirms, nothing is left to settle; a stale snapshot changes nothing.
    c.upsert_pod(placed("late", "n", "GPU-n-0,NVIDIA,4000,0:;"))
    assert list(c.bound_unconfirmed()) == ["uid-listed"]
    assert c.forget_unlisted({"uid-late": BoundDecision(late.key, "default", "late")}, set()) == []
    assert held(c, "n") == (3, 9000, 0)


def test_bound_after_the_watch_confirmed_or_forgotten_marks_nothing() -> None:
    c = cache()
    c.upsert_node(node("n"))
    holding = _holding("n", 3000)
    c.assume("uid-p", "p", holding)
    c.upsert_pod(placed("p", "n", "GPU-n-0,NVIDIA,3000,0:;"))  # the watch was quicker
    c.bound("uid-p", holding.key)
    c.assume("uid-q", "q", _holding("n", 1000))
    c.bound("uid-q", _holding("n", 1000).key)
    c.drop_pod("uid-q")
    assert c.bound_unconfirmed() == {}
    assert c.forget_unlisted({"uid-p": BoundDecision(holding.key, "default", "p")}, set()) == []
    assert held(c, "n") == (1, 3000, 0)


def test_release_stops_counting_until_a_new_allocation() -> None:
    c = cache()
    c.upsert_node(node("n"))
    c.upsert_pod(placed("p", "n", "GPU-n-0,NVIDIA,3000,0:;"))
    c.release("uid-p")
    assert held(c, "n") == (0, 0, 0)
    # Later events carrying the given-up allocation still do not count.
    c.upsert_pod(placed("p", "n", "GPU-n-0,NVIDIA,3000,0:;"))
    assert held(c, "n") == (0, 0, 0)
    c.upsert_pod(placed("p", "n", "GPU-n-1,NVIDIA,2000,0:;"))
    assert held(c, "n", 1) == (1, 2000, 0)
    # Deciding the released allocation again counts it again.
    c.release("uid-p")
    c.assume("uid-p", "p", _holding("n", 2000))
    assert held(c, "n") == (1, 2000, 0)


def test_quota_limits_merge_and_follow_their_objects() -> None:
    c = cache()

    def quota(name: str, hard: dict[str, str]) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "team"}, "spec": {"hard": hard}}

    c.upsert_quota(quota("a", {"limits.nvidia.com/gpumem": "4000", "pods": "10"}))
    c.upsert_quota(
        quota("b", {"limits.nvidia.com/gpumem": "3000", "limits.nvidia.com/gpucores": "50"})
    )
    c.upsert_quota(quota("c", {"limits.nvidia.com/gpumem": "1.5"}))
    assert len(c.quotas) == 2
    assert c.quotas.limits("team", NVIDIA) == QuotaLimits(memory=3000, cores=50)
    assert c.quota_view("other", NVIDIA) is None
    c.upsert_pod(placed("p", "n", "GPU-n-0,NVIDIA,1000,5:;") | {})
    c.upsert_quota(quota("b", {"pods": "1"}))
    assert c.quotas.limits("team", NVIDIA) == QuotaLimits(memory=4000)
    c.remove_quota(quota("a", {}))
    assert c.quotas.limits("team", NVIDIA) is None


def test_slim_pod_keeps_what_the_cache_reads() -> None:
    pod = placed("p", "n", ";GPU-n-0,NVIDIA,1000,5:;", init=1, init_exit_codes=[0])
    pod["metadata"]["annotations"]["unrelated"] = "x" * 1000
    pod["spec"]["containers"][0]["env"] = [{"name": "A", "value": "b"}]
    pod["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    c1, c2 = cache(), cache()
    for c in (c1, c2):
        c.upsert_node(node("n"))
    c1.upsert_pod(pod)
    slim_pod(pod, DEFAULT_VENDORS)
    c2.upsert_pod(pod)
    assert "managedFields" not in pod["metadata"]
    assert "unrelated" not in pod["metadata"]["annotations"]
    assert c1.nodes["n"].devices == c2.nodes["n"].devices
    assert held(c2, "n") == (1, 1000, 5)


def test_residents_carry_priority_and_start_time_through_slimming() -> None:
    pod = placed("p", "n", ";GPU-n-0,NVIDIA,1000,5:;", uid="u1")
    pod["spec"]["priority"] = 7
    pod["status"]["startTime"] = "2026-01-01T00:00:10Z"
    c = cache()
    c.upsert_node(node("n"))
    slim_pod(pod, DEFAULT_VENDORS)
    assert pod["spec"]["priority"] == 7
    c.upsert_pod(pod)
    (resident,) = c.residents("n")
    assert (resident.uid, resident.name, resident.priority) == ("u1", "p", 7)
    assert resident.started == NOW.timestamp() + 10
    # No priority: 0, as kube-scheduler reads it; an unreadable start time: not started.
    other = placed("q", "n", ";GPU-n-1,NVIDIA,1000,5:;", uid="u2")
    other["status"]["startTime"] = "yesterday"
    c.upsert_pod(other)
    ranks = {r.uid: (r.priority, r.started) for r in c.residents("n")}
    assert ranks["u2"] == (0, None)
    # A decision assumed here, never seen on a pod: held, but not rankable.
    assumed = Holding("n", "default", (), allocation_key("n", {"NVIDIA": "x"}))
    c.assume("u3", "r", assumed)
    assert {r.uid: r.priority for r in c.residents("n")}["u3"] is None
    assert c.residents("elsewhere") == []
