"""Prometheus metrics, one registry per scheduler instance.

What kube-scheduler also measures carries kube-scheduler's name, label names and
bucket boundaries (v1.36, pkg/scheduler/metrics), so that dashboards and alerts
written for it work unchanged:

- `scheduler_schedule_attempts_total{result,profile}` and
  `scheduler_scheduling_attempt_duration_seconds{result,profile}`: one per
  attempt, `result` is `scheduled`, `unschedulable` or `error`. As in
  kube-scheduler, a placement counts as `scheduled` only once its binding has
  succeeded (the duration runs from the start of the cycle to the end of the
  binding), and a binding refused by the API server counts as `error`.
  `profile` is the profile's schedulerName.
- `scheduler_pod_scheduling_sli_duration_seconds{attempts}`: from the pod's
  first entry into the active queue to its binding, and
  `scheduler_pod_scheduling_attempts`: attempts a bound pod took.
- `scheduler_pending_pods{queue}`: `active`, `backoff`, `unschedulable`, and
  `gated` (pods of ours with schedulingGates, which are never tried).
- `scheduler_queue_incoming_pods_total{queue,event}`: pods put into a sub-queue,
  by the event that put them there (kube-scheduler's event labels:
  `UnschedulablePodAdd`, `ScheduleAttemptFailure`, `BackoffComplete`, `NodeAdd`, ...).
- `scheduler_preemption_attempts_total` (every PostFilter run) and
  `scheduler_preemption_victims` (victims of each preemption carried out).
- `scheduler_cache_size{type}`: nodes, pods and assumed pods in the cache.

Everything else (tenant queues, GPUs, gangs, bindings, API errors, relists,
config reloads) is ours and named `ai_scheduler_*`. Gauges are read from live
state at scrape time (`StateCollector`), so the hot path never updates them;
counters on the hot path (queue transitions) go through cached label children.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ai_scheduler.cache.tenancy import QuotaState
from ai_scheduler.quantity import MILLI_RESOURCES


def exponential_buckets(start: float, factor: float, count: int) -> tuple[float, ...]:
    """component-base's metrics.ExponentialBuckets: `count` bounds, each `factor` times the one before."""
    buckets = []
    for _ in range(count):
        buckets.append(start)
        start *= factor
    return tuple(buckets)


LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
CYCLE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)
# kube-scheduler's boundaries (pkg/scheduler/metrics/metrics.go, v1.36).
ATTEMPT_DURATION_BUCKETS = exponential_buckets(0.001, 2, 15)  # 1 ms .. 16.384 s
SLI_DURATION_BUCKETS = exponential_buckets(0.01, 2, 20)  # 10 ms .. ~87 min
POD_ATTEMPTS_BUCKETS = exponential_buckets(1, 2, 5)  # 1 .. 16
PREEMPTION_VICTIMS_BUCKETS = exponential_buckets(1, 2, 7)  # 1 .. 64

# `result` of scheduler_schedule_attempts_total (kube-scheduler's metrics.ScheduledResult, ...).
SCHEDULED = "scheduled"
UNSCHEDULABLE = "unschedulable"
ERROR = "error"
# `queue` of scheduler_pending_pods
PENDING_QUEUES = ("active", "backoff", "unschedulable", "gated")
MAX_ATTEMPTS_LABEL = 15  # kube-scheduler's getAttemptsLabel: 1 .. 14, then "15+"


def attempts_label(attempts: int) -> str:
    """The `attempts` label of the SLI histogram, capped as kube-scheduler caps it."""
    return f"{MAX_ATTEMPTS_LABEL}+" if attempts >= MAX_ATTEMPTS_LABEL else str(attempts)


class StateCollector(Collector):
    """Gauges read from live state at scrape time, so the hot path never updates them."""

    def __init__(
        self,
        pending: Callable[[], dict[tuple[str, str], int]],
        cache_sizes: Callable[[], dict[str, int]],
        binds_in_flight: Callable[[], int],
        gpus: Callable[[], dict[str, dict[str, int]]],
        queue_pending: Callable[[], dict[str, int]],
        quotas: Callable[[], list[QuotaState]] = list,
    ) -> None:
        self._pending = pending
        self._cache_sizes = cache_sizes
        self._binds_in_flight = binds_in_flight
        self._gpus = gpus
        self._queue_pending = queue_pending
        self._quotas = quotas

    def collect(self) -> Iterator[GaugeMetricFamily]:
        by_queue = self._queue_pending()
        kube_pending = GaugeMetricFamily(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' "
            "means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods "
            "that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable "
            "pods that the scheduler never attempted to schedule because they are gated.",
            labels=["queue"],
        )
        for queue in PENDING_QUEUES:
            kube_pending.add_metric([queue], by_queue.get(queue, 0))
        yield kube_pending
        pending = GaugeMetricFamily(
            "ai_scheduler_pending_pods",
            "Pods waiting to be scheduled, by tenant queue and state",
            labels=["queue", "state"],
        )
        for (queue, state), count in sorted(self._pending().items()):
            pending.add_metric([queue, state], count)
        yield pending
        sizes = GaugeMetricFamily(
            "scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            labels=["type"],
        )
        for kind, count in sorted(self._cache_sizes().items()):
            sizes.add_metric([kind], count)
        yield sizes
        yield GaugeMetricFamily(
            "ai_scheduler_binds_in_flight", "Binding requests in flight", value=self._binds_in_flight()
        )
        yield from self._gpu_families(self._gpus())
        yield from self._quota_families(self._quotas())

    @staticmethod
    def _quota_families(states: list[QuotaState]) -> Iterator[GaugeMetricFamily]:
        """Each group's, user's and queue's quota bounds and use, in base units (cores, bytes, devices;
        a GPU fraction in devices)."""
        used = GaugeMetricFamily(
            "ai_scheduler_quota_used", "What the placed pods of a group, user or queue request, by resource",
            labels=["kind", "name", "resource"],
        )
        limit = GaugeMetricFamily(
            "ai_scheduler_quota_limit", "A group's, user's or queue's quota bound (min or max), by resource",
            labels=["kind", "name", "resource", "bound"],
        )
        for state in states:
            for resource in sorted({*state.used, *state.min, *state.max}):
                scale = 1000 if resource in MILLI_RESOURCES else 1
                labels = [state.kind, state.name, resource]
                used.add_metric(labels, state.used.get(resource, 0) / scale)
                for bound, amounts in (("min", state.min), ("max", state.max)):
                    if resource in amounts:
                        limit.add_metric([*labels, bound], amounts[resource] / scale)
        yield used
        yield limit

    @staticmethod
    def _gpu_families(per_node: dict[str, dict[str, int]]) -> Iterator[GaugeMetricFamily]:
        """Managed GPUs per node and for the cluster, and how much free GPU memory is stranded."""
        families = {
            "devices": GaugeMetricFamily("ai_scheduler_gpu_devices", "Usable managed GPUs", labels=["node"]),
            "whole_used": GaugeMetricFamily(
                "ai_scheduler_gpu_whole_allocated", "Managed GPUs held whole by pods", labels=["node"]
            ),
            "shared_bytes": GaugeMetricFamily(
                "ai_scheduler_gpu_memory_allocated_bytes",
                "Managed GPU memory allocated to shared pods",
                labels=["node"],
            ),
            "free_bytes": GaugeMetricFamily(
                "ai_scheduler_gpu_memory_free_bytes", "Managed GPU memory free for new pods", labels=["node"]
            ),
        }
        totals = dict.fromkeys(families, 0)
        stranded = 0
        for node, stats in sorted(per_node.items()):
            for key, family in families.items():
                family.add_metric([node], stats.get(key, 0))
                totals[key] += stats.get(key, 0)
            stranded += stats.get("stranded_bytes", 0)
        yield from families.values()
        cluster = GaugeMetricFamily(
            "ai_scheduler_gpu_cluster", "Managed GPUs in the whole cluster", labels=["measure"]
        )
        for key, value in totals.items():
            cluster.add_metric([key], value)
        yield cluster
        yield GaugeMetricFamily(
            "ai_scheduler_gpu_fragmentation_ratio",
            "Share of free managed GPU memory on partly used devices, which no whole-GPU pod can take",
            value=stranded / totals["free_bytes"] if totals["free_bytes"] else 0.0,
        )


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # ---- kube-scheduler's (names, labels and buckets as in v1.36)
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be "
            "scheduled, while 'error' means an internal scheduler problem.",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ["result", "profile"],
            buckets=ATTEMPT_DURATION_BUCKETS,
            registry=r,
        )
        self.sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and "
            "might involve multiple scheduling attempts.",
            ["attempts"],
            buckets=SLI_DURATION_BUCKETS,
            registry=r,
        )
        self.pod_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            buckets=POD_ATTEMPTS_BUCKETS,
            registry=r,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts", "Total preemption attempts in the cluster till now", registry=r
        )
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            buckets=PREEMPTION_VICTIMS_BUCKETS,
            registry=r,
        )
        self.queue_incoming = Counter(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            ["queue", "event"],
            registry=r,
        )
        self._incoming: dict[tuple[str, str], Counter] = {}  # label children, for the queue's hot path
        self._attempt: dict[tuple[str, str], tuple[Counter, Histogram]] = {}  # and for every attempt's
        # ---- ours
        self.gang_timeouts = Counter(
            "ai_scheduler_gang_timeouts", "Gangs not placed whole within their schedule timeout", registry=r
        )
        self.gang_attempt_duration = Histogram(
            "ai_scheduler_gang_attempt_duration_seconds",
            "Time of one gang attempt (all members tried together), by outcome",
            ["result"],
            buckets=(*CYCLE_BUCKETS, 2.5, 5),
            registry=r,
        )
        self.bind_duration = Histogram(
            "ai_scheduler_binding_duration_seconds",
            "Binding request latency",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.bind_errors = Counter(
            "ai_scheduler_bind_errors", "Failed bindings by HTTP status (0: no answer)", ["code"], registry=r
        )
        self.api_errors = Counter(
            "ai_scheduler_api_errors",
            "Failed status patches and events by call",
            ["call", "code"],
            registry=r,
        )
        self.events_dropped = Counter(
            "ai_scheduler_events_dropped", "Events not sent because the queue was full", registry=r
        )
        self.relists = Counter(
            "ai_scheduler_informer_relists",
            "Relists after a broken or expired watch",
            ["resource", "reason"],
            registry=r,
        )
        self.config_reloads = Counter(
            "ai_scheduler_config_reloads", "Config file reloads by result", ["result"], registry=r
        )
        # Set on the (rare) change of role, not read at scrape time: 1 while this replica schedules.
        self.leader = Gauge(
            "ai_scheduler_leader",
            "1 while this replica leads (holds the leader election Lease, or runs without election)",
            registry=r,
        )

    def attempt(self, result: str, profile: str, seconds: float) -> None:
        """One scheduling attempt ended with `result` (SCHEDULED, UNSCHEDULABLE or ERROR) after `seconds`."""
        children = self._attempt.get((result, profile))
        if children is None:  # labels() costs a lock and a lookup: the children are kept per label pair
            children = self._attempt[(result, profile)] = (
                self.attempts.labels(result, profile), self.attempt_duration.labels(result, profile))
        children[0].inc()
        children[1].observe(seconds)

    def scheduled(self, profile: str, seconds: float, since_queued: float, attempts: int) -> None:
        """A pod's binding succeeded: `seconds` since its last cycle began, `since_queued` since it first
        entered the active queue, after `attempts` attempts (kube-scheduler's bindingCycle metrics)."""
        self.attempt(SCHEDULED, profile, seconds)
        self.pod_attempts.observe(attempts)
        self.sli_duration.labels(attempts_label(attempts)).observe(since_queued)

    def incoming(self, queue: str, event: str) -> None:
        """A pod was put into the scheduling queue's `queue` (active, backoff, unschedulable) by `event`."""
        child = self._incoming.get((queue, event))
        if child is None:
            child = self._incoming[(queue, event)] = self.queue_incoming.labels(queue, event)
        child.inc()

    def watch_state(self, collector: Collector) -> None:
        """Register gauges that are read from live state at scrape time."""
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
