"""The scheduler's Prometheus metrics, on their own registry (``--metrics-bind-address``).

HAMi's names and labels, each sample with the constant label ``zone="vGPU"``, read from the
caches at scrape time (no bookkeeping on the request path):

* per device: ``hami_gpu_memory_limit_bytes``, ``hami_gpu_core_limit_ratio``,
  ``hami_gpu_memory_allocated_bytes`` (+``device_cores``), ``hami_gpu_shared_count``,
  ``hami_gpu_core_allocated_ratio``, ``hami_node_gpu_overview`` (+``device_cores``,
  ``device_memory_limit``), ``hami_node_gpu_memory_allocated_ratio`` — labels ``node``,
  ``device_uuid``, ``device_index``, ``device_type``;
* per namespace quota: ``hami_resource_quota_used{namespace,quota_name,limit}`` and
  ``hami_resource_quota_limit{namespace,quota_name}`` (``quota_name`` is the limited resource);
* per pod device: ``hami_vgpu_memory_allocated_bytes`` and ``hami_vgpu_core_allocated_ratio``
  ``{namespace,node,pod,container_index,device_uuid}``;
* per MIG instance the device plugin realised: ``hami_node_gpu_mig_instance_info{node,
  device_uuid,device_index,mig_uuid,profile,gpu_instance_id,compute_instance_id,
  placement_start,placement_size}`` = 1;
* ``hami_build_info`` = 1.

Ours: ``hami_scheduler_request_duration_seconds{verb,outcome}`` (filter/bind/prioritize/preempt
latency), ``hami_scheduler_decisions_total{verb,outcome,reason}``,
``hami_scheduler_node_rejections_total{reason}`` (per refused node and reason word — every
vendor's words too; a free-text reason such as a vendor's undecodable annotation counts as
``Other``),
``hami_scheduler_cache_objects{kind}``, ``hami_scheduler_cache_synced``,
``hami_scheduler_api_errors_total{operation}``, ``hami_scheduler_leader``,
``hami_scheduler_unavailable_vendors`` and ``hami_scheduler_tls_certificate_reloads``.

The node lock (bind): ``hami_scheduler_node_lock_wait_seconds{outcome}`` (how long each bind
that needed the lock waited for it: ``acquired``, ``expired`` — the wait budget ran out — or
``failed``), ``hami_scheduler_node_lock_waiters{node}`` (binds waiting now),
``hami_scheduler_node_lock_actions_total{action}`` (``acquire``, ``reenter`` and each
``takeover_*``), ``hami_node_lock_overdue`` (locks held past their timeout —
``--node-lock-timeout``, Cambricon's 2 minutes — by an owner still waiting for its Allocate),
``hami_scheduler_cache_misses_total{object}`` (a GET because the watch caches lacked a node, a
pod or a lock owner) and ``hami_scheduler_pending_binds`` (filtered pods whose bind has not come
yet).
The GPU map (docs/gpumap.md): ``hami_scheduler_gpumap_request_duration_seconds{view,format,code}``
(``view`` map/pending/fit/other, ``format`` json/html).
Memory is in bytes (MiB × 1048576), as HAMi exports it.
"""

from __future__ import annotations

import re
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from hami_runtime.service_metrics import ServiceMetrics
from hami_scheduler.cache.view import SchedulerCache
from hami_scheduler.core.reasons import NODE_UNREGISTERED
from hami_scheduler.events import reason_words

__all__ = ["SchedulerMetrics"]

MIB: Final = 1024 * 1024
ZONE: Final = "vGPU"
_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
_WAIT_BUCKETS: Final = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0)
_WORD: Final = re.compile(r"[A-Za-z]+")
OTHER_REASON: Final = "Other"
"""The rejection label of a free-text reason (a vendor's bad input, which names its key and may
quote the value): the label stays bounded; the text is in FailedNodes and the node's Event."""
_DEVICE_LABELS: Final = ("node", "device_uuid", "device_index", "device_type", "zone")


def _gauge(name: str, documentation: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=list(labels))


class _HamiCollector(Collector):
    """HAMi's device, quota and per-pod metrics, computed from the caches when scraped."""

    def __init__(self, cache: SchedulerCache) -> None:
        self._cache = cache

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._devices()
        yield from self._quotas()
        yield from self._pods()
        yield self._mig_instances()

    def _devices(self) -> Iterator[GaugeMetricFamily]:
        mem_limit = _gauge(
            "hami_gpu_memory_limit_bytes", "Device memory limit in bytes.", _DEVICE_LABELS
        )
        core_limit = _gauge("hami_gpu_core_limit_ratio", "Device core limit.", _DEVICE_LABELS)
        with_cores = ("node", "device_uuid", "device_index", "device_cores", "device_type", "zone")
        mem_alloc = _gauge(
            "hami_gpu_memory_allocated_bytes", "Device memory allocated in bytes.", with_cores
        )
        shared = _gauge("hami_gpu_shared_count", "Tasks sharing the device.", _DEVICE_LABELS)
        core_alloc = _gauge(
            "hami_gpu_core_allocated_ratio", "Device cores allocated.", _DEVICE_LABELS
        )
        overview = _gauge(
            "hami_node_gpu_overview",
            "Device memory allocated in bytes, with the device's limits as labels.",
            (
                "node",
                "device_uuid",
                "device_index",
                "device_cores",
                "device_memory_limit",
                "device_type",
                "zone",
            ),
        )
        ratio = _gauge(
            "hami_node_gpu_memory_allocated_ratio",
            "Share of the device memory allocated.",
            _DEVICE_LABELS,
        )
        for name, node in list(self._cache.nodes.items()):
            for dev in node.devices:
                index = str(dev.index)
                base = [name, dev.uuid, index, dev.type, ZONE]
                cores = str(dev.usedcores)
                mem_limit.add_metric(base, dev.totalmem * MIB)
                core_limit.add_metric(base, dev.totalcore)
                mem_alloc.add_metric(
                    [name, dev.uuid, index, cores, dev.type, ZONE], dev.usedmem * MIB
                )
                shared.add_metric(base, dev.used)
                core_alloc.add_metric(base, dev.usedcores)
                overview.add_metric(
                    [name, dev.uuid, index, cores, str(dev.totalmem * MIB), dev.type, ZONE],
                    dev.usedmem * MIB,
                )
                ratio.add_metric(base, dev.usedmem / dev.totalmem if dev.totalmem else 0.0)
        yield from (mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, ratio)

    def _quotas(self) -> Iterator[GaugeMetricFamily]:
        used = _gauge(
            "hami_resource_quota_used",
            "Device quota used in a namespace (MiB for memory).",
            ("namespace", "quota_name", "limit", "zone"),
        )
        limit_family = _gauge(
            "hami_resource_quota_limit",
            "Device quota limit in a namespace (MiB for memory).",
            ("namespace", "quota_name", "zone"),
        )
        vendors = {vendor.common_word: vendor for vendor in self._cache.vendors}
        for namespace, limits in self._cache.quotas.namespaces():
            for word, limit in limits.items():
                vendor = vendors.get(word)
                if vendor is None:
                    continue
                memory, cores = self._cache.ledger.used(namespace, word)
                for resource, value, held in (
                    (vendor.memory_resource, limit.memory, memory),
                    (vendor.cores_resource, limit.cores, cores),
                ):
                    if resource is None or value is None:
                        continue
                    used.add_metric([namespace, resource, str(value), ZONE], held)
                    limit_family.add_metric([namespace, resource, ZONE], value)
        yield used
        yield limit_family

    def _pods(self) -> Iterator[GaugeMetricFamily]:
        labels = ("namespace", "node", "pod", "container_index", "device_uuid", "zone")
        memory = _gauge(
            "hami_vgpu_memory_allocated_bytes", "Device memory allocated to a container.", labels
        )
        cores = _gauge(
            "hami_vgpu_core_allocated_ratio", "Device cores allocated to a container.", labels
        )
        for _uid, pod, holding in self._cache.holdings():
            for _word, containers in holding.pod_devices().entries:
                for index, container in enumerate(containers):
                    for device in container:
                        values = [
                            holding.namespace,
                            holding.node,
                            pod,
                            str(index),
                            device.uuid,
                            ZONE,
                        ]
                        memory.add_metric(values, device.usedmem * MIB)
                        cores.add_metric(values, device.usedcores)
        yield memory
        yield cores

    def _mig_instances(self) -> GaugeMetricFamily:
        """``hami_node_gpu_mig_instance_info``: one sample per realised MIG reservation."""
        family = _gauge(
            "hami_node_gpu_mig_instance_info",
            "A MIG instance the device plugin created for a pod's reservation.",
            (
                "node",
                "device_uuid",
                "device_index",
                "mig_uuid",
                "profile",
                "gpu_instance_id",
                "compute_instance_id",
                "placement_start",
                "placement_size",
                "zone",
            ),
        )
        nodes = self._cache.nodes
        for _uid, _pod, holding in self._cache.holdings():
            for reservation in holding.reservations:
                runtime = reservation.runtime
                if runtime is None:
                    continue
                node = nodes.get(holding.node)
                device = None if node is None else node.device(reservation.gpu_uuid)
                family.add_metric(
                    [
                        holding.node,
                        reservation.gpu_uuid,
                        "" if device is None else str(device.index),
                        runtime.mig_uuid,
                        reservation.profile,
                        str(runtime.gpu_instance_id),
                        str(runtime.compute_instance_id),
                        str(reservation.placement.start),
                        str(reservation.placement.size),
                        ZONE,
                    ],
                    1,
                )
        return family


class _WaitersCollector(Collector):
    """``hami_scheduler_node_lock_waiters{node}``: only nodes with waiting binds appear."""

    def __init__(self, waiting: Callable[[], Mapping[str, int]]) -> None:
        self._waiting = waiting

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = _gauge(
            "hami_scheduler_node_lock_waiters", "Binds waiting for a node's lock.", ("node",)
        )
        for node, count in sorted(self._waiting().items()):
            family.add_metric([node], count)
        yield family


class SchedulerMetrics(ServiceMetrics):
    """Every metric the service exports, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__("hami_scheduler", distribution="hami-scheduler", registry=registry)
        self.duration = Histogram(
            "hami_scheduler_request_duration_seconds",
            "Time to answer an extender request, by verb and outcome.",
            ["verb", "outcome"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.decisions = Counter(
            "hami_scheduler_decisions",
            "Extender requests answered, by verb, outcome and reason.",
            ["verb", "outcome", "reason"],
            registry=self.registry,
        )
        self.rejections = Counter(
            "hami_scheduler_node_rejections",
            "Nodes refused by filters, by reason word (CardInsufficientMemory, ...).",
            ["reason"],
            registry=self.registry,
        )
        self.cache_objects = Gauge(
            "hami_scheduler_cache_objects",
            "Objects in the scheduler's caches: nodes seen, registered nodes, pods holding "
            "devices, decisions assumed but not yet seen, ResourceQuotas limiting devices.",
            ["kind"],
            registry=self.registry,
        )
        self.synced = Gauge(
            "hami_scheduler_cache_synced",
            "1 once the node, pod and ResourceQuota watches have completed their first list.",
            registry=self.registry,
        )
        self.api_errors = Counter(
            "hami_scheduler_api_errors",
            "Failed Kubernetes API calls, by operation.",
            ["operation"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "hami_scheduler_leader", "1 while this replica is the leader.", registry=self.registry
        )
        self.unavailable = Gauge(
            "hami_scheduler_unavailable_vendors",
            "Node × vendor pairs marked unavailable by the handshake rule.",
            registry=self.registry,
        )
        self.lock_wait = Histogram(
            "hami_scheduler_node_lock_wait_seconds",
            "How long a bind that needed the node lock waited for it, by outcome.",
            ["outcome"],
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self.lock_actions = Counter(
            "hami_scheduler_node_lock_actions",
            "Node locks taken, by how (acquire, reenter, takeover_*).",
            ["action"],
            registry=self.registry,
        )
        self.cache_misses = Counter(
            "hami_scheduler_cache_misses",
            "API reads because the watch caches lacked an object, by object.",
            ["object"],
            registry=self.registry,
        )
        self.overdue_locks = Gauge(
            "hami_node_lock_overdue",
            "Node locks held past their timeout (--node-lock-timeout; Cambricon's: 2 minutes) "
            "by a pod still waiting for its Allocate.",
            registry=self.registry,
        )
        self.gpumap = Histogram(
            "hami_scheduler_gpumap_request_duration_seconds",
            "Time to answer a GPU map request (page or JSON), by view, format and status code.",
            ["view", "format", "code"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.pending_binds = Gauge(
            "hami_scheduler_pending_binds",
            "Filtered pods whose bind has not come yet (their decisions are assumed).",
            registry=self.registry,
        )

    def observe(self, verb: str, outcome: str, seconds: float, reason: str = "") -> None:
        self.duration.labels(verb=verb, outcome=outcome).observe(seconds)
        self.decisions.labels(verb=verb, outcome=outcome, reason=reason).inc()

    def reject(self, reasons: Iterable[str]) -> None:
        """Count refused nodes by reason word (``"1/2 A, 1/2 B"`` counts A and B once each)."""
        counts: dict[str, int] = {}
        # Many nodes share one reason text: split each distinct text once.
        for reason, nodes in Tally(reasons).items():
            for word in reason_words(reason):
                label = word if _WORD.fullmatch(word) or word == NODE_UNREGISTERED else OTHER_REASON
                counts[label] = counts.get(label, 0) + nodes
        for word, count in counts.items():
            self.rejections.labels(reason=word).inc(count)

    def api_error(self, operation: str) -> None:
        self.api_errors.labels(operation=operation).inc()

    def cache_miss(self, what: str) -> None:
        self.cache_misses.labels(object=what).inc()

    def track_binds(
        self,
        *,
        waiting: Callable[[], Mapping[str, int]],
        overdue: Callable[[], int],
        pending: Callable[[], int],
    ) -> None:
        """Read the bind path's gauges at scrape time."""
        self.overdue_locks.set_function(overdue)
        self.pending_binds.set_function(pending)
        self.registry.register(_WaitersCollector(waiting))

    def track_cache(self, cache: SchedulerCache, synced: Callable[[], bool]) -> None:
        """Read sizes and HAMi's device metrics from ``cache`` at scrape time."""
        self.cache_objects.labels(kind="nodes").set_function(lambda: cache.node_count)
        self.cache_objects.labels(kind="registered_nodes").set_function(lambda: len(cache.nodes))
        self.cache_objects.labels(kind="pods").set_function(lambda: cache.pod_count)
        self.cache_objects.labels(kind="assumed").set_function(cache.assumed_count)
        self.cache_objects.labels(kind="resourcequotas").set_function(lambda: len(cache.quotas))
        self.synced.set_function(lambda: 1 if synced() else 0)
        self.unavailable.set_function(cache.unavailable_count)
        self.registry.register(_HamiCollector(cache))
