"""The scheduler's view of the cluster, kept incrementally from watch events.

:class:`SchedulerCache` holds

* ``nodes``: node name → :class:`~hami_scheduler.core.NodeUsage` for every registered node with
  at least one usable vendor — the mapping :func:`~hami_scheduler.core.select_node` reads;
* per node the :class:`~hami_scheduler.cache.nodes.NodeFacts` (registrations, cordon, pair
  scores, handshakes) and its :class:`~hami_scheduler.cache.health.NodeHealth` (which vendors
  are marked unavailable by the handshake rule, which bad annotations were reported);
* per pod UID what the pod holds (:class:`~hami_scheduler.cache.holdings.PodHoldings`: what
  its annotations say, what was assumed here, what was given up), applied to its node's usage
  and to the namespace's :class:`~hami_scheduler.core.QuotaLedger`;
* the RDMA NICs and exclusive PCIe claims (:class:`~hami_scheduler.cache.nics.NicCache`):
  ``nics`` maps node name → :class:`~hami_scheduler.core.joint.nics.NicUsage`, the mapping
  :func:`~hami_scheduler.core.joint.decide.select_joint` reads; a pod's holding carries its NIC
  part, so assumptions, releases and deletions move it together with the GPU usage;
* the ResourceQuota limits (:class:`~hami_scheduler.cache.quotas.QuotaLimitCache`);
* the pending pods nominated to a node (:class:`~hami_scheduler.cache.nominated.Nominations`)
  and the PodDisruptionBudgets (:class:`~hami_scheduler.cache.budgets.DisruptionBudgets`).

:attr:`SchedulerCache.fleet` is all of it as the selection rule reads it
(:class:`~hami_scheduler.core.joint.route.Fleet`), and :meth:`SchedulerCache.fleet_for` the
same as one pod sees it — with the devices held for nominated preemptors of equal or higher
priority counted: the one place the filter, the bind and the preempt verb read a node's state.
:meth:`SchedulerCache.simulated` builds a throw-away one from Node objects given in a request,
with the usage known for those names (:mod:`hami_scheduler.cache.simulation`).

Every event costs O(devices of the pod or node): a pod event shifts one node's usage, a node
event rebuilds only that node (and only when its registration, cordon or pair scores changed).
Nothing here walks all pods.

The cache performs no I/O; callbacks report bad annotations and health changes to the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from hami_kube.objects import NodeView, PodView
from hami_kube.resources import JsonObject
from hami_kube.timefmt import utc_now
from hami_protocol.selectors import EVERYTHING, LabelSelector
from hami_protocol.vendor.table import METAX_SGPU, Vendor
from hami_scheduler.cache.budgets import DisruptionBudgets
from hami_scheduler.cache.health import BadAnnotation, HandshakeWrite, HealthChange, NodeHealth
from hami_scheduler.cache.holdings import BoundDecision, PodHoldings, PodProblem, Resident
from hami_scheduler.cache.nics import NicCache
from hami_scheduler.cache.nodes import NodeFacts, read_node
from hami_scheduler.cache.nominated import Nominations
from hami_scheduler.cache.pods import AllocationKey, Holding, read_pod
from hami_scheduler.cache.quotas import QuotaLimitCache
from hami_scheduler.cache.simulation import Simulation, simulate
from hami_scheduler.cache.vendor_facts import node_vendor_facts
from hami_scheduler.core import (
    NodeUsage,
    QuotaLedger,
    VendorQuota,
    apply_usage,
    build_node_usage,
    remove_usage,
)
from hami_scheduler.core.joint.nics import NicUsage
from hami_scheduler.core.joint.route import Fleet
from hami_scheduler.core.vendors.context import (
    NO_SGPU_STATE,
    NO_SGPU_TASKS,
    SgpuNodeState,
    SgpuTasks,
)
from hami_scheduler.core.vendors.metax_sgpu import QOS_KEY

__all__ = ["HandshakeWrite", "SchedulerCache"]


class SchedulerCache:
    """Nodes, pod holdings and quotas (see the module docstring)."""

    def __init__(
        self,
        vendors: Sequence[Vendor],
        *,
        selector: LabelSelector = EVERYTHING,
        handshake_timeout_s: float = 300.0,
        now: Callable[[], datetime] = utc_now,
        on_bad_annotation: BadAnnotation | None = None,
        on_health_change: HealthChange | None = None,
        on_pod_problem: PodProblem | None = None,
    ) -> None:
        self.vendors = tuple(vendors)
        self._selector = selector
        self._now = now
        self.nodes: dict[str, NodeUsage] = {}
        self.ledger = QuotaLedger()
        self.quotas = QuotaLimitCache(self.vendors)
        self._health = NodeHealth(
            self.vendors,
            handshake_timeout_s=handshake_timeout_s,
            on_bad_annotation=on_bad_annotation,
            on_health_change=on_health_change,
        )
        self._facts: dict[str, NodeFacts] = {}
        self._holdings = PodHoldings(self._moved, on_problem=on_pod_problem)
        self.nic = NicCache()
        self.troubled: set[str] = set()
        """Nodes with a malformed register annotation or a vendor marked unavailable: the
        filter asks :meth:`node_problem` (and :meth:`nic_problem`) about these only."""
        self.nominations = Nominations()
        """Pending pods nominated to a node, and what is held for them there."""
        self.budgets = DisruptionBudgets()
        """The PodDisruptionBudgets (the preempt verb ranks victims by them)."""

    @property
    def nics(self) -> Mapping[str, NicUsage]:
        """Node name → its NICs and claims, for nodes with a NIC layout."""
        return self.nic.usages

    @property
    def gpu_claimed(self) -> set[str]:
        """Nodes where a pod holds an exclusive PCIe claim on GPUs."""
        return self.nic.gpu_claimed

    @property
    def fleet(self) -> Fleet:
        """The cached nodes, as the selection rule reads them (a view: it follows the cache)."""
        return Fleet(self.nodes, self.nic.usages, self.nic.gpu_claimed, self._facts)

    def fleet_for(self, uid: str, priority: int) -> Fleet:
        """The cached nodes as pod ``uid`` of ``priority`` sees them: on a node some other pod
        of equal or higher priority is nominated to, what is held for it counts
        (:mod:`~hami_scheduler.cache.nominated`).  The one place every verb that decides —
        the filter, the bind, the preempt verb — reads a node's state from.

        Cost: O(1) without nominated pods; else O(nodes they are nominated to) plus one copy
        of the node mapping when a hold applies (a few tens of µs at 5,000 nodes)."""
        fleet = self.fleet
        if not len(self.nominations):
            return fleet
        adjusted: dict[str, NodeUsage] = {}
        for name in self.nominations.nodes:
            node = self.nodes.get(name)
            if node is not None:
                held = self.held_node(node, uid, priority)
                if held is not node:
                    adjusted[name] = held
        if not adjusted:
            return fleet
        return Fleet({**self.nodes, **adjusted}, fleet.nics, fleet.gpu_claimed, fleet.seen)

    def held_node(self, node: NodeUsage, uid: str, priority: int) -> NodeUsage:
        """``node`` as pod ``uid`` of ``priority`` sees it (see :meth:`fleet_for`)."""
        name = node.layout.name
        nominees = self.nominations.placed(name, uid, priority, self._holdings.holding)
        if not nominees:
            return node
        held, _ = self.nominations.node_for(
            node, nominees, self._holdings.residents(name), self.nic.usages.get(name)
        )
        return held

    # -- sizes -------------------------------------------------------------------------------
    @property
    def node_count(self) -> int:
        """Nodes seen (matching the label selector), registered or not."""
        return len(self._facts)

    @property
    def pod_count(self) -> int:
        return self._holdings.count

    def assumed_count(self) -> int:
        return self._holdings.assumed_count()

    def unavailable_count(self) -> int:
        """Node × vendor pairs marked unavailable by the handshake rule."""
        return self._health.unavailable_count()

    # -- nodes -------------------------------------------------------------------------------
    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        """A Node was added or changed."""
        name = NodeView(obj).name
        if not name:
            return
        previous = self._facts.get(name)
        facts = read_node(obj, self.vendors, previous)
        if not self._selector.matches(facts.labels):
            self.remove_node_named(name)
            return
        self._facts[name] = facts
        self._health.report(facts)
        health_changed = self._health.judge(facts, self._now())
        if previous is None or previous.layout_key != facts.layout_key or health_changed:
            self._rebuild(name)
        if previous is None or previous.nic_key != facts.nic_key:
            self.nic.node_changed(facts)
        self._retrouble(name)

    def remove_node(self, obj: Mapping[str, Any]) -> None:
        self.remove_node_named(NodeView(obj).name)

    def remove_node_named(self, name: str) -> None:
        # Pods keep their holdings (their own events release them); a returning node is rebuilt
        # with them.
        self._facts.pop(name, None)
        self.nodes.pop(name, None)
        self._health.forget(name)
        self.troubled.discard(name)
        self.nic.node_removed(name)

    def _retrouble(self, name: str) -> None:
        facts = self._facts.get(name)
        if facts is not None and self._health.troubled(facts):
            self.troubled.add(name)
        else:
            self.troubled.discard(name)

    def facts(self, name: str) -> NodeFacts | None:
        return self._facts.get(name)

    def unhealthy(self, name: str) -> frozenset[str]:
        return self._health.unhealthy(name)

    def node_problem(self, name: str, words: Iterable[str]) -> str | None:
        """Why a seen node cannot take a pod asking for vendors ``words``, beyond its devices:
        a malformed register annotation, or devices that stopped answering the handshake."""
        facts = self._facts.get(name)
        return None if facts is None else self._health.problem(facts, words)

    def nic_problem(self, name: str) -> str | None:
        """Why a seen node's NICs cannot be used: its RDMA register annotation is unreadable."""
        return self.nic.problem(name)

    def _rebuild(self, name: str) -> None:
        facts = self._facts.get(name)
        devices = self._health.usable(facts) if facts is not None else {}
        if facts is None or not devices:
            self.nodes.pop(name, None)
            return
        held = self._holdings.on_node(name)
        self.nodes[name] = build_node_usage(
            name,
            devices,
            cordon=facts.cordon,
            pair_scores=facts.pair_scores,
            usages=[summary for holding in held.values() for summary in holding.usage],
            mig=[hold for holding in held.values() for hold in holding.mig],
            vendor=node_vendor_facts(facts),
        )

    def holders_of(self, node: str, words: Collection[str]) -> list[tuple[str, str]]:
        """``(namespace, name)`` of the pods held on ``node`` that were given devices of any of
        the vendors ``words``."""
        return self._holdings.holders_of(node, words)

    def residents(self, node: str) -> list[Resident]:
        """The pods held on ``node`` with their priority and start time (the preempt verb's
        candidates); O(pods on the node)."""
        return self._holdings.residents(node)

    def sgpu_state(self, name: str) -> SgpuNodeState:
        """What the pods held on node ``name`` say about its MetaX sGPU devices: per device the
        app classes of the pods on it, and the QoS its pods set that the node's ``QosPolicy``
        report does not show yet — HAMi's just-assigned QoS cache, which holds until the report
        agrees, since the plugin reports a device's new policy only after the pod is bound (an
        exclusive placement — 100 cores — clears the policy).  HAMi's cache holds only its own
        placements and is lost on restart; here every pod held on the device counts, so another
        replica's placements and a restart keep the rule.  O(pods on the node); asked for sGPU
        pods only."""
        node = self.nodes.get(name)
        if node is None or METAX_SGPU not in node.layout.vendor_positions:
            return NO_SGPU_STATE
        devices = node.vendor_devices(METAX_SGPU)
        reported = {dev.uuid: dev.custom.get(QOS_KEY, "") for dev in devices}
        tasks: dict[str, SgpuTasks] = {}
        pending: dict[str, str] = {}
        for holding in self._holdings.on_node(name).values():
            for summary in holding.usage:
                report = reported.get(summary.uuid)
                if report is None:
                    continue
                if holding.sgpu_class in ("online", "offline"):
                    known = tasks.get(summary.uuid, NO_SGPU_TASKS)
                    online = known.online + (holding.sgpu_class == "online")
                    offline = known.offline + (holding.sgpu_class == "offline")
                    tasks[summary.uuid] = SgpuTasks(online, offline)
                # A shared pod that names no policy (placed before a webhook set one) says
                # nothing of the device's: its "" would read as "any policy may join".
                expected = "" if summary.usedcores >= 100 else holding.sgpu_qos
                if expected != report and (expected or summary.usedcores >= 100):
                    pending[summary.uuid] = expected
        if not tasks and not pending:
            return NO_SGPU_STATE
        return SgpuNodeState(tasks, pending)

    def simulated(
        self,
        objs: Iterable[JsonObject],
        *,
        exclude_uid: str = "",
        words: Collection[str] | None = None,
    ) -> Simulation:
        """The nodes of Node objects given in a request (the autoscaler's simulation path), with
        the usage this cache knows for those names, leaving out pod ``exclude_uid``; a node
        whose input for one of ``words`` (the pod's vendors; ``None``: any) is bad is failed.
        Changes nothing."""
        return simulate(
            objs,
            vendors=self.vendors,
            held=self._holdings.on_node,
            nic=self.nic,
            exclude_uid=exclude_uid,
            words=words,
        )

    # -- handshakes ----------------------------------------------------------------------------
    def check_handshakes(self, names: Iterable[str], now: datetime) -> list[HandshakeWrite]:
        """Judge the handshake of every vendor of ``names`` (marking vendors unavailable or
        back), and return the handshake values the leader should (re)write."""
        writes: list[HandshakeWrite] = []
        for name in names:
            facts = self._facts.get(name)
            if facts is not None and self._health.judge(facts, now, writes):
                self._rebuild(name)
                self._retrouble(name)
        return writes

    def warm(self) -> None:
        """Build every node's open-device views now (once the watches have listed), so the
        first filter after a start does not pay for 5,000 of them at once."""
        for usage in self.nodes.values():
            for word in usage.layout.vendors:
                usage.open(word)

    def node_names(self) -> list[str]:
        return list(self._facts)

    # -- pods --------------------------------------------------------------------------------
    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        """A Pod was added or changed."""
        self._holdings.observe(read_pod(obj, self.vendors))

    def remove_pod(self, obj: Mapping[str, Any]) -> None:
        """A Pod was deleted: whatever it held is released."""
        self.drop_pod(PodView(obj).uid)

    def drop_pod(self, uid: str) -> None:
        self._holdings.drop(uid)

    def assume(self, uid: str, name: str, holding: Holding) -> None:
        """Count a decision at once, before its annotations are written."""
        self._holdings.assume(uid, name, holding)

    def forget(self, uid: str, key: AllocationKey) -> None:
        """Drop the assumption ``key`` (its bind failed)."""
        self._holdings.forget(uid, key)

    def bound(self, uid: str, key: AllocationKey) -> None:
        """The Binding of the assumption ``key`` succeeded; see :meth:`PodHoldings.bound
        <hami_scheduler.cache.holdings.PodHoldings.bound>`."""
        self._holdings.bound(uid, key)

    def bound_unconfirmed(self) -> dict[str, BoundDecision]:
        return self._holdings.bound_unconfirmed()

    def unconfirmed(self, uid: str) -> BoundDecision | None:
        return self._holdings.unconfirmed(uid)

    def forget_unlisted(
        self, before: Mapping[str, BoundDecision], listed: Collection[str]
    ) -> list[tuple[str, str]]:
        """See :meth:`PodHoldings.forget_unlisted
        <hami_scheduler.cache.holdings.PodHoldings.forget_unlisted>`."""
        return self._holdings.forget_unlisted(before, listed)

    def release(self, uid: str) -> None:
        """Stop counting what the pod holds or was assumed to hold (filtered again, or its
        bind failed); see :meth:`PodHoldings.release
        <hami_scheduler.cache.holdings.PodHoldings.release>`."""
        self._holdings.release(uid)

    def holding(self, uid: str) -> Holding | None:
        return self._holdings.holding(uid)

    def holdings(self) -> Iterator[tuple[str, str, Holding]]:
        """``(uid, pod name, holding)`` for every pod holding devices."""
        return self._holdings.holdings()

    def _moved(self, uid: str, new: Holding | None, old: Holding | None) -> None:
        """What pod ``uid`` holds changed: move its node's usage, its namespace's quota and its
        NICs with it."""
        if old is not None:
            node = self.nodes.get(old.node)
            if node is not None:
                self.nodes[old.node] = remove_usage(node, old.usage, old.mig)
            self.ledger.remove(old.namespace, old.usage)
            if old.nics is not None:
                self.nic.release(uid, old.node)
        if new is not None:
            node = self.nodes.get(new.node)
            if node is not None:
                self.nodes[new.node] = apply_usage(node, new.usage, new.mig)
            self.ledger.add(new.namespace, new.usage)
            if new.nics is not None:
                self.nic.hold(uid, new.node, new.nics)

    # -- nominated pods and disruption budgets -------------------------------------------------
    def upsert_nominated(self, obj: Mapping[str, Any]) -> None:
        """A pod of the nominated-pods watch was added or changed."""
        self.nominations.observe(obj)

    def remove_nominated(self, obj: Mapping[str, Any]) -> None:
        self.nominations.drop(PodView(obj).uid)

    def upsert_budget(self, obj: Mapping[str, Any]) -> None:
        self.budgets.upsert(obj)

    def remove_budget(self, obj: Mapping[str, Any]) -> None:
        self.budgets.remove(obj)

    # -- quotas ------------------------------------------------------------------------------
    def upsert_quota(self, obj: Mapping[str, Any]) -> None:
        self.quotas.upsert(obj)

    def remove_quota(self, obj: Mapping[str, Any]) -> None:
        self.quotas.remove(obj)

    def quota_view(self, namespace: str, word: str) -> VendorQuota | None:
        """What a pod in ``namespace`` may still use of vendor ``word``; ``None``: unlimited."""
        limits = self.quotas.limits(namespace, word)
        if limits is None:
            return None
        return self.ledger.view(namespace, word, limits)
