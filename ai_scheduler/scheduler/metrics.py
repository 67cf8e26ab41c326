"""Prometheus metrics (names start with `ai_scheduler_`), one registry per scheduler instance."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
CYCLE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1)


class StateCollector(Collector):
    """Gauges read from live state at scrape time, so the hot path never updates them."""

    def __init__(
        self,
        pending: Callable[[], dict[tuple[str, str], int]],
        cache_sizes: Callable[[], dict[str, int]],
        binds_in_flight: Callable[[], int],
        gpus: Callable[[], dict[str, dict[str, int]]],
    ) -> None:
        self._pending = pending
        self._cache_sizes = cache_sizes
        self._binds_in_flight = binds_in_flight
        self._gpus = gpus

    def collect(self) -> Iterator[GaugeMetricFamily]:
        pending = GaugeMetricFamily(
            "ai_scheduler_pending_pods",
            "Pods waiting to be scheduled, by queue and state",
            labels=["queue", "state"],
        )
        for (queue, state), count in sorted(self._pending().items()):
            pending.add_metric([queue, state], count)
        yield pending
        sizes = GaugeMetricFamily(
            "ai_scheduler_cache_size", "Objects in the scheduler cache", labels=["type"]
        )
        for kind, count in sorted(self._cache_sizes().items()):
            sizes.add_metric([kind], count)
        yield sizes
        yield GaugeMetricFamily(
            "ai_scheduler_binds_in_flight", "Binding requests in flight", value=self._binds_in_flight()
        )
        yield from self._gpu_families(self._gpus())

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
        self.attempts = Counter(
            "ai_scheduler_schedule_attempts",
            "Scheduling attempts by result and profile",
            ["result", "profile"],
            registry=r,
        )
        self.attempt_duration = Histogram(
            "ai_scheduler_scheduling_attempt_duration_seconds",
            "Time of one scheduling cycle (filter, score, select)",
            ["result"],
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.e2e_latency = Histogram(
            "ai_scheduler_e2e_scheduling_duration_seconds",
            "From a pod entering the queue to its binding succeeding",
            buckets=LATENCY_BUCKETS,
            registry=r,
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

    def watch_state(self, collector: Collector) -> None:
        """Register gauges that are read from live state at scrape time."""
        self.registry.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)
