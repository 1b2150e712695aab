"""Prometheus metrics: request counters kept as requests pass, partition gauges read at scrape time, and the
event loop's lag (``loop_monitor.py``), which says whether anything is holding up the loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.loop_monitor import LAG_BUCKETS

if TYPE_CHECKING:
    from broker.replication.partition import Partition


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


class BrokerMetrics:
    def __init__(self, partitions: Callable[[], Iterable[Partition]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("odradek_http_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("odradek_http_request_seconds", "HTTP request latency by route", ["route"],
                                 registry=self.registry,
                                 buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5))
        self.loop_lag = Histogram("odradek_event_loop_lag_seconds",
                                  "How late the event loop ran a timer (time spent elsewhere: a stall)",
                                  registry=self.registry, buckets=LAG_BUCKETS)
        self.registry.register(_PartitionCollector(partitions))

    def render(self) -> bytes:
        return generate_latest(self.registry)
