"""Prometheus metrics: request counters kept as requests pass (HTTP by route and status, Kafka's protocol by API
and outcome), partition and fetch-session gauges read at scrape time, and the event loop's lag
(``loop_monitor.py``), which says whether anything is holding up the loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.loop_monitor import LAG_BUCKETS

if TYPE_CHECKING:
    from broker.fetch.sessions import SessionStats
    from broker.replication.partition import Partition

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5)


class _PartitionCollector(Collector):
    def __init__(self, partitions: Callable[[], Iterable[Partition]]) -> None:
        self._partitions = partitions

    def collect(self) -> Iterable[Metric]:
        labels = ["topic", "partition"]
        hw = GaugeMetricFamily("odradek_partition_high_watermark", "High watermark", labels=labels)
        leo = GaugeMetricFamily("odradek_partition_log_end_offset", "Log end offset", labels=labels)
        lso = GaugeMetricFamily("odradek_partition_log_start_offset", "Log start offset", labels=labels)
        isr = GaugeMetricFamily("odradek_partition_isr_size", "ISR size (leaders only)", labels=labels)
        leader = GaugeMetricFamily("odradek_partition_is_leader", "1 when this broker leads the partition",
                                   labels=labels)
        under = GaugeMetricFamily("odradek_partition_under_replicated",
                                  "1 when the ISR is smaller than the replica set (leaders only)", labels=labels)
        under_min = GaugeMetricFamily("odradek_partition_under_min_isr",
                                      "1 when the ISR is smaller than min.insync.replicas (leaders only)",
                                      labels=labels)
        for p in self._partitions():
            key = [p.topic, str(p.partition)]
            hw.add_metric(key, p.high_watermark)
            leo.add_metric(key, p.log_end_offset)
            lso.add_metric(key, p.log_start_offset)
            is_leader = p.role == "leader"
            leader.add_metric(key, 1 if is_leader else 0)
            if is_leader:
                isr.add_metric(key, len(p.isr))
                under.add_metric(key, 1 if len(p.isr) < len(p.replicas) else 0)
                under_min.add_metric(key, 1 if len(p.isr) < p.config.min_insync_replicas else 0)
        return [hw, leo, lso, isr, leader, under, under_min]


class _FetchSessionCollector(Collector):
    """The Kafka door's fetch sessions (KIP-227), read at scrape time; nothing while it has none."""

    def __init__(self) -> None:
        self.stats: Callable[[], SessionStats] | None = None

    def collect(self) -> Iterable[Metric]:
        if self.stats is None:
            return []
        stats = self.stats()
        sessions = GaugeMetricFamily("odradek_kafka_fetch_sessions", "Incremental fetch sessions held",
                                     value=stats.sessions)
        partitions = GaugeMetricFamily("odradek_kafka_fetch_session_partitions",
                                       "Partitions held by incremental fetch sessions", value=stats.partitions)
        evictions = CounterMetricFamily("odradek_kafka_fetch_session_evictions",
                                        "Fetch sessions evicted to make room for new ones", value=stats.evictions)
        fetches = CounterMetricFamily("odradek_kafka_fetches", "Kafka Fetch requests by fetch-session kind "
                                      "(sessionless, full, incremental, error)", labels=["session"])
        for kind, count in sorted(stats.contexts.items()):
            fetches.add_metric([kind], count)
        return [sessions, partitions, evictions, fetches]


class BrokerMetrics:
    def __init__(self, partitions: Callable[[], Iterable[Partition]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("odradek_http_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("odradek_http_request_seconds", "HTTP request latency by route", ["route"],
                                 registry=self.registry, buckets=LATENCY_BUCKETS)
        # Kafka's protocol: outcome is "ok" (answered), "no_response" (acks=0), "closed" (the connection was
        # closed instead of answering: Kafka's answer to what it cannot parse or serve) or "failed" (a bug).
        self.kafka_requests = Counter("odradek_kafka_requests", "Kafka protocol requests by API and outcome",
                                      ["api", "outcome"], registry=self.registry)
        self.kafka_latency = Histogram("odradek_kafka_request_seconds", "Kafka protocol request latency by API",
                                       ["api"], registry=self.registry, buckets=LATENCY_BUCKETS)
        self.loop_lag = Histogram("odradek_event_loop_lag_seconds",
                                  "How late the event loop ran a timer (time spent elsewhere: a stall)",
                                  registry=self.registry, buckets=LAG_BUCKETS)
        self.gc_pause = Histogram("odradek_gc_pause_seconds",
                                  "Cyclic garbage collections, by generation: each stops the event loop",
                                  ["generation"], registry=self.registry, buckets=LAG_BUCKETS)
        self.registry.register(_PartitionCollector(partitions))
        self._fetch_sessions = _FetchSessionCollector()
        self.registry.register(self._fetch_sessions)

    def watch_fetch_sessions(self, stats: Callable[[], SessionStats]) -> None:
        """Export the Kafka door's fetch-session cache (its ``stats``) from now on."""
        self._fetch_sessions.stats = stats

    def render(self) -> bytes:
        return generate_latest(self.registry)
