"""broker.api.console.counters: the totals behind the console overview's rate charts, read from a broker's real
/metrics text (BrokerMetrics rendered, not a hand-written sample), each total checked against what was counted:
records_in is the sum of the log end offsets of the partitions the broker leads (a follower's copy is not
counted again), produce and fetch requests are the Kafka API's and the HTTP routes' counts (not their
``_created`` timestamps, not other routes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from broker.api.console import FETCH_ROUTES, PRODUCE_ROUTES, counters
from broker.metrics import BrokerMetrics


@dataclass
class FakePartition:
    topic: str
    partition: int
    log_end_offset: int
    role: str
    high_watermark: int = 0
    log_start_offset: int = 0
    isr: list[int] = field(default_factory=lambda: [1])
    replicas: list[int] = field(default_factory=lambda: [1, 2])
    config: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(min_insync_replicas=1))


def render(partitions: list[FakePartition], http: dict[tuple[str, str], int], kafka: dict[tuple[str, str], int]) -> str:
    metrics = BrokerMetrics(lambda: partitions)
    for (route, status), n in http.items():
        metrics.requests.labels(route, status).inc(n)
    for (api, outcome), n in kafka.items():
        metrics.kafka_requests.labels(api, outcome).inc(n)
    return metrics.render().decode()


def test_an_idle_broker_counts_nothing() -> None:
    assert counters(render([], {}, {})) == {"records_in": 0.0, "produce_requests": 0.0, "fetch_requests": 0.0}


def test_records_in_sums_the_log_end_offsets_of_led_partitions_only() -> None:
    partitions = [FakePartition("orders", 0, 40, "leader"), FakePartition("orders", 1, 7, "follower"),
                  FakePartition("readings", 0, 3, "leader"), FakePartition("orders", 2, 1000, "follower")]
    led = sum(p.log_end_offset for p in partitions if p.role == "leader")
    assert counters(render(partitions, {}, {}))["records_in"] == led == 43


def test_requests_are_counted_by_kafka_api_and_http_route_over_every_status() -> None:
    produce_route, fetch_route = sorted(PRODUCE_ROUTES)[0], sorted(FETCH_ROUTES)[0]
    http = {(produce_route, "200"): 5, (produce_route, "403"): 2, (fetch_route, "200"): 11,
            ("/metrics", "200"): 50, ("/groups/{group}/offsets", "200"): 9}
    kafka = {("Produce", "ok"): 3, ("Produce", "no_response"): 4, ("Fetch", "ok"): 13, ("Metadata", "ok"): 100}
    got = counters(render([], http, kafka))
    assert got["produce_requests"] == 5 + 2 + 3 + 4
    assert got["fetch_requests"] == 11 + 13
    assert got["records_in"] == 0


def test_every_listed_route_counts_and_the_lists_do_not_overlap() -> None:
    assert not PRODUCE_ROUTES & FETCH_ROUTES
    http = {(route, "200"): 1 for route in PRODUCE_ROUTES | FETCH_ROUTES}
    got = counters(render([], http, {}))
    assert (got["produce_requests"], got["fetch_requests"]) == (len(PRODUCE_ROUTES), len(FETCH_ROUTES))
