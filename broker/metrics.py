"""Prometheus metrics: request counters kept as requests pass (HTTP by route and status, Kafka's protocol by API
and outcome), partition and fetch-session gauges read at scrape time, the Kafka-protocol replica fetchers' counters
and lag (read at scrape time too), and the event loop's lag (``loop_monitor.py``), which says whether anything is
holding up the loop."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from broker.loop_monitor import LAG_BUCKETS

if TYPE_CHECKING:
    from broker.fetch.sessions import SessionStats
    from broker.replication.fetcher_manager import FetcherManager
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


class _ReplicaFetcherCollector(Collector):
    """The Kafka-protocol replica fetchers (Kafka's ``ReplicaFetcherManager``, ``FetcherStats`` and
    ``FetcherLagMetrics``), read at scrape time; nothing on the HTTP transport. Counters name every fetcher ever
    started; gauges only the running ones, so a closed fetcher leaves them."""

    def __init__(self) -> None:
        self.manager: FetcherManager | None = None

    def collect(self) -> Iterable[Metric]:
        if self.manager is None:
            return []
        labels = ["leader", "fetcher"]
        requests = CounterMetricFamily("odradek_replica_fetcher_requests", "Fetch requests sent", labels=labels)
        errors = CounterMetricFamily("odradek_replica_fetcher_errors", "Fetch requests that failed (not answered, "
                                     "or refused as a whole)", labels=labels)
        received = CounterMetricFamily("odradek_replica_fetcher_bytes", "Record bytes received", labels=labels)
        records = CounterMetricFamily("odradek_replica_fetcher_records", "Offsets appended to followed logs",
                                      labels=labels)
        truncations = CounterMetricFamily("odradek_replica_fetcher_truncations", "Times a followed log was cut back",
                                          labels=labels)
        rounds = HistogramMetricFamily("odradek_replica_fetcher_round_seconds",
                                       "Round trip of answered Fetch requests (the leader's wait included)",
                                       labels=labels)
        for (leader, fetcher), stats in sorted(self.manager.stats.items()):
            key = [str(leader), str(fetcher)]
            requests.add_metric(key, stats.requests)
            errors.add_metric(key, stats.errors)
            received.add_metric(key, stats.bytes)
            records.add_metric(key, stats.records)
            truncations.add_metric(key, stats.truncations)
            rounds.add_metric(key, [(floatToGoString(b), c) for b, c in stats.round_buckets()], stats.round_sum)
        partitions = GaugeMetricFamily("odradek_replica_fetcher_partitions", "Partitions a running fetcher follows",
                                       labels=labels)
        lag = GaugeMetricFamily("odradek_replica_fetcher_partition_lag", "The leader's high watermark (as last "
                                "answered) minus the follower's log end, at least 0",
                                labels=[*labels, "topic", "partition"])
        max_lag = 0
        for (leader, fetcher), running in sorted(self.manager.fetchers.items()):
            key = [str(leader), str(fetcher)]
            lags = running.lags()
            partitions.add_metric(key, len(lags))
            for (topic, partition), n in lags.items():
                lag.add_metric([*key, topic, str(partition)], n)
                max_lag = max(max_lag, n)
        worst = GaugeMetricFamily("odradek_replica_fetcher_max_lag", "The largest partition lag of any fetcher "
                                  "(Kafka's ReplicaFetcherManager MaxLag)", value=max_lag)
        return [requests, errors, received, records, truncations, rounds, partitions, lag, worst]


class BrokerMetrics:
    def __init__(self, partitions: Callable[[], Iterable[Partition]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("odradek_http_requests", "HTTP requests by route and status",
                                ["route", "status"], registry=self.registry)
        self.latency = Histogram("odradek_http_request_seconds", "HTTP request latency by route", ["route"],
                                 registry=self.registry, buckets=LATENCY_BUCKETS)
        # (route, status) -> its labelled counter and histogram, looked up once (broker/api/app.py's middleware);
        # bounded by the route table times the statuses answered.
        self.route_children: dict[tuple[str | None, int], tuple[Any, Any]] = {}
        # Kafka's protocol: outcome is "ok" (answered), "no_response" (acks=0), "closed" (the connection was
        # closed instead of answering: Kafka's answer to what it cannot parse or serve) or "failed" (a bug).
        self.kafka_requests = Counter("odradek_kafka_requests", "Kafka protocol requests by API and outcome",
                                      ["api", "outcome"], registry=self.registry)
        self.kafka_latency = Histogram("odradek_kafka_request_seconds", "Kafka protocol request latency by API",
                                       ["api"], registry=self.registry, buckets=LATENCY_BUCKETS)
        # Kafka's answers by how their bytes left: "write" (through the transport) or "sendfile" (a Fetch answer's
        # record sets, from the segment files without entering Python; broker/kafka/frames.py).
        self.kafka_response_bytes = Counter("odradek_kafka_response_bytes",
                                            "Kafka protocol response bytes sent, by how: write or sendfile",
                                            ["how"], registry=self.registry)
        self.loop_lag = Histogram("odradek_event_loop_lag_seconds",
                                  "How late the event loop ran a timer (time spent elsewhere: a stall)",
                                  registry=self.registry, buckets=LAG_BUCKETS)
        self.gc_pause = Histogram("odradek_gc_pause_seconds",
                                  "Cyclic garbage collections, by generation: each stops the event loop",
                                  ["generation"], registry=self.registry, buckets=LAG_BUCKETS)
        self.registry.register(_PartitionCollector(partitions))
        self._fetch_sessions = _FetchSessionCollector()
        self.registry.register(self._fetch_sessions)
        self._replica_fetchers = _ReplicaFetcherCollector()
        self.registry.register(self._replica_fetchers)

    def watch_fetch_sessions(self, stats: Callable[[], SessionStats]) -> None:
        """Export the Kafka door's fetch-session cache (its ``stats``) from now on."""
        self._fetch_sessions.stats = stats

    def watch_replica_fetchers(self, manager: FetcherManager) -> None:
        """Export the Kafka-protocol replica fetchers of ``manager`` from now on."""
        self._replica_fetchers.manager = manager

    def render(self) -> bytes:
        return generate_latest(self.registry)
