"""acks=all RF 3 produce latency through the Kafka front door, as a Kafka client measures it: librdkafka's own
per-record figure (``Message.latency()``: from ``produce()`` to the broker's acknowledgement, timed in C inside
the client, so neither Python's delivery-report polling nor this script's pacing is in it).

    .venv/bin/python bench/kafka_latency.py [--rate 10000] [--burst 50] [--seconds 5] [--runs 2]
                                            [--transports kafka] [--linger-ms 0] [--spread]

A 3-broker cluster (one ZooKeeper node) per replica transport, a 6-partition topic at RF 3 with
min.insync.replicas 2 (and one at RF 1 for the floor, and RF 3 with acks=1: what replication costs a produce
that does not wait for it); a confluent-kafka (librdkafka) producer with acks=all,
``linger.ms`` 0 (Kafka's producer default until 4.0; librdkafka's is 5 ms, which every record would wait),
idempotence on (Kafka's producer default since 3.0: at most 5 requests in flight per connection; without it
librdkafka pipelines a burst as many tiny requests, which a broker answers one after the other, as Kafka's does,
and the latency then measures how librdkafka cut the burst, `--no-idempotence`) and
keyed 100-byte records, produced ``--burst`` at a time at ``--rate`` records/s, each burst to one partition and
the partitions in turn (as bench/rest_bench.py's latency phase sends its requests; ``--spread``: each burst over
the partitions by key). The first second is warm-up.
Prints p50, p90, p99 and p99.9 of the records' latencies, the requests the client sent (librdkafka's
statistics: how many records went per request), the three brokers' CPU per record, and how many bursts went as
more than one request (the later ones wait on the connection for the earlier one's answer) with how many of the
slowest 1 % of records are theirs.

Beside bench/acks_all_load.py, whose figure is the binary HTTP path's, timed around an aiohttp request in Python
(its client's own costs included); this one is what issue 25's "through the Kafka front door" asks. Not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.acks_all_load import ticks  # noqa: E402
from bench.latency_floor import rf1_rf3  # noqa: E402
from bench.rest_bench import PARTITIONS, make_values  # noqa: E402

HZ = 100  # USER_HZ


def run(bootstrap: str, topic: str, acks: str, rate: int, burst: int, seconds: float, linger_ms: int,
        one_partition: bool, idempotence: bool, on_start: object) -> tuple[list[float], int, str]:
    """The measured records' latencies in seconds (sorted), the produce requests sent while measuring, and what
    the slowest records have in common (:func:`_split_bursts`)."""
    from confluent_kafka import Producer

    stats: list[dict[str, object]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms,
                         "enable.idempotence": idempotence and acks == "all",  # (acks=1 forbids it: its cap)
                         "max.in.flight.requests.per.connection": 5 if idempotence else 1_000_000,
                         "statistics.interval.ms": 1000,
                         "stats_cb": lambda s: stats.append(json.loads(s))})
    values = make_values(burst)
    keys = [f"k{i}".encode() for i in range(burst)]
    measured: list[tuple[int, float]] = []  # (burst, latency)
    failed: list[object] = []

    def delivered(burst_index: int | None):  # type: ignore[no-untyped-def]
        def report(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                failed.append(err)
            elif burst_index is not None:
                measured.append((burst_index, msg.latency()))
        return report

    interval = burst / rate
    warm_bursts, bursts = int(1.0 / interval), int(seconds / interval)
    requests_before = 0
    start = time.perf_counter()
    for i in range(warm_bursts + bursts):
        while True:
            delay = start + i * interval - time.perf_counter()
            if delay <= 0:
                break
            producer.poll(min(delay, 0.001))  # delivery reports while waiting for the next burst's time
        if i == warm_bursts:
            producer.flush(30)
            requests_before = _produce_requests(producer, stats)
            on_start()  # type: ignore[operator]
        report = delivered(i if i >= warm_bursts else None)
        partition = i % PARTITIONS if one_partition else -1  # -1: librdkafka's partitioner, by key
        for k, v in zip(keys, values, strict=True):
            producer.produce(topic, v, key=k, partition=partition, on_delivery=report)
        producer.poll(0)
    left = producer.flush(30)
    requests = _produce_requests(producer, stats) - requests_before
    if left or failed:
        raise RuntimeError(f"{left} records not delivered; errors: {failed[:3]}")
    return sorted(lat for _, lat in measured), requests, _split_bursts(measured)


def _split_bursts(measured: list[tuple[int, float]]) -> str:
    """How many bursts went as more than one request (their records' latencies spread over more than 0.5 ms:
    the later request waited for the earlier one's answer), and how many of the records at or over the p99 are
    theirs."""
    spread: dict[int, tuple[float, float]] = {}
    for burst_index, lat in measured:
        low, high = spread.get(burst_index, (lat, lat))
        spread[burst_index] = (min(low, lat), max(high, lat))
    split = {b for b, (low, high) in spread.items() if high - low > 0.0005}
    p99 = sorted(lat for _, lat in measured)[int(len(measured) * 0.99)]
    slow = [b for b, lat in measured if lat >= p99]
    return (f"{len(split)} of {len(spread)} bursts cut into more than one request, {sum(b in split for b in slow)} "
            f"of the {len(slow)} records at or over the p99 in them")


def _produce_requests(producer: object, stats: list[dict[str, object]]) -> int:
    """ProduceRequests sent so far, from librdkafka's statistics (one emitted now)."""
    stats.clear()
    deadline = time.monotonic() + 3
    while not stats and time.monotonic() < deadline:
        producer.poll(0.05)  # type: ignore[attr-defined]
    if not stats:
        return 0
    brokers = stats[-1].get("brokers", {})
    return sum(int(b.get("req", {}).get("Produce", 0)) for b in brokers.values())  # type: ignore[union-attr]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=10_000, help="records per second")
    ap.add_argument("--burst", type=int, default=50, help="records produced at once")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--transports", default="kafka", help="replica fetch transports, one cluster each")
    ap.add_argument("--linger-ms", type=int, default=0)
    ap.add_argument("--no-idempotence", action="store_true",
                    help="librdkafka's own default: up to 1,000,000 requests in flight per connection instead of 5")
    ap.add_argument("--spread", action="store_true",
                    help="each burst's records over the partitions by key (default: a burst to one partition, the "
                         "partitions in turn, as bench/rest_bench.py's requests)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="odradek-kafka-latency-", dir=ROOT) as d:
        for transport in args.transports.split(","):
            with rf1_rf3(Path(d) / transport, transport) as (cluster, _, pids):
                bootstrap = cluster.kafka_bootstrap
                assert bootstrap is not None
                for _ in range(args.runs):
                    for topic, acks in (("rf1", "1"), ("rf3", "1"), ("rf3", "all")):
                        marks: list[int] = []
                        lat, requests, split = run(bootstrap, topic, acks, args.rate, args.burst, args.seconds,
                                            args.linger_ms, not args.spread, not args.no_idempotence,
                                            lambda: marks.append(ticks(pids)))  # noqa: B023
                        n = len(lat)
                        cpu = (ticks(pids) - marks[0]) / HZ
                        print(f"{transport:5} {topic.upper()} acks={acks:3} {args.rate:,} records/s: {n:,} records "
                              f"in {requests:,} requests, p50 {lat[n // 2] * 1000:.2f} ms, p90 "
                              f"{lat[int(n * 0.9)] * 1000:.2f}, p99 {lat[int(n * 0.99)] * 1000:.2f}, p99.9 "
                              f"{lat[int(n * 0.999)] * 1000:.2f} ms; brokers' CPU {cpu / n * 1e6:,.1f} µs per "
                              f"record; {split}", flush=True)

if __name__ == "__main__":
    main()
