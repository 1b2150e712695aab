"""Replication figures (issue 25), the HTTP replica transport and Kafka's Fetch side by side, interleaved.

    .venv/bin/python bench/replication_bench.py [--rounds 3] [--records 600000] [--kafka-records 300000]
                                                [--latency-seconds 8] [--transports http,kafka]
                                                [--baseline /path/to/other/checkout]

Each round starts one 3-broker cluster per transport (``--replica-fetch-transport``; the order alternates by round,
so neither transport always runs on a warmer or cooler machine) with one ZooKeeper node, and measures on it:

* binary produce acks=all to each partition's leader, RF 1 and RF 3 (min.insync.replicas 2), as
  ``bench/rest_bench.py`` does it (``--records`` distinct 100-byte keyed records, 1,000 per batch, 12 in flight,
  6 partitions), and the brokers' CPU-seconds per million records of the RF 3 phase (all three brokers'
  utime+stime from /proc: the leader's produce and both followers' replication);
* the Kafka front door: librdkafka (``confluent_kafka.Producer``, acks=all, default batching) producing
  ``--kafka-records`` to an RF 1 and an RF 3 topic, as ``bench/kafka_bench.py`` does;
* librdkafka's own C tool (rdkafka_performance, bench/kafka_bench.py's ``rdkafka_tool``, librdkafka's defaults,
  acks=all) producing ``--tool-records`` to another RF 1 and RF 3 pair of topics, with the brokers' CPU per
  million records of the RF 3 phase: the Kafka front door's ratio without the Python client's ceiling;
* acks=all RF 3 latency at 10,000 records/s (50-record batches, paced), p50 and p99.

``--baseline CHECKOUT`` adds the pseudo-transport ``baseline``: the same round on brokers run from another
checkout (with its compiled codec; its default transport), interleaved with the others, for an A/B.

Prints one line per round and transport, then each figure's range per transport. Not a test: the machine has
2 cores shared by three brokers, ZooKeeper and this client, so compare the two transports within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka_bench import RDKAFKA_PERFORMANCE, Phase, librdkafka_produce, measured, rdkafka_tool
from bench.rest_ab import python_for
from bench.rest_bench import (
    BATCHES,
    PARTITIONS,
    _wait_isr,
    keyed_batches,
    latency,
    leaders_of,
    load,
    make_values,
    post_all,
)
from odradek_local.cluster import LocalCluster
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block


@dataclass
class Round:
    transport: str
    rf1: float = 0.0
    rf3: float = 0.0
    rf3_cpu_per_million: float = 0.0
    kafka_rf1: float = 0.0
    kafka_rf3: float = 0.0
    tool_rf1: float = 0.0
    tool_rf3: float = 0.0
    tool_rf3_cpu_per_million: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.rf3 / self.rf1 if self.rf1 else 0.0

    @property
    def kafka_ratio(self) -> float:
        return self.kafka_rf3 / self.kafka_rf1 if self.kafka_rf1 else 0.0

    @property
    def tool_ratio(self) -> float:
        return self.tool_rf3 / self.tool_rf1 if self.tool_rf1 else 0.0


def one_round(workdir: Path, transport: str, values: list[bytes], kafka_values: list[bytes],
              latency_seconds: float, tool_records: int, baseline: Path | None = None) -> Round:
    """``transport`` "baseline": the brokers run from the ``baseline`` checkout, with its default transport."""
    out = Round(transport)
    (workdir / transport).mkdir(parents=True, exist_ok=True)
    python = {} if transport != "baseline" else {"python": python_for(baseline, workdir / transport)}
    cluster = LocalCluster(workdir / f"{transport}", brokers=3, base_port=free_port_block(3), zookeepers=1,
                           zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                           broker_args=[] if transport == "baseline" else ["--replica-fetch-transport", transport],
                           **python)
    try:
        cluster.up()
        url = cluster.broker_url(1)
        urls = [cluster.broker_url(i) for i in (1, 2, 3)]
        for topic, rf in (("rf1", 1), ("rf3", 3), ("krf1", 1), ("krf3", 3), ("crf1", 1), ("crf3", 3), ("lat", 3)):
            create_topic(url, topic, PARTITIONS, rf, {"min.insync.replicas": "2"} if rf == 3 else None,
                         seen_by=urls)
        _wait_isr(url, ["rf3", "krf3", "crf3", "lat"])
        pids = [cluster.broker_pid(i) or 0 for i in (1, 2, 3)]
        batches = keyed_batches(values, int(time.time() * 1000))
        for topic in ("rf1", "rf3"):
            leaders = leaders_of(url, topic)
            reqs = [(f"{leaders[p]}/topics/{topic}/partitions/{p}/batches?acks=all", b, BATCHES) for p, b in batches]
            with measured(Phase(), pids) as phase:
                asyncio.run(post_all(reqs, 2 * PARTITIONS))
                phase.records = len(values)
            if topic == "rf1":
                out.rf1 = phase.rate
            else:
                out.rf3, out.rf3_cpu_per_million = phase.rate, phase.cpu_per_million
        bootstrap = cluster.kafka_bootstrap
        assert bootstrap is not None
        for topic in ("krf1", "krf3"):
            with measured(Phase(), pids) as phase:
                librdkafka_produce(bootstrap, topic, kafka_values, "all")
                phase.records = len(kafka_values)
            if topic == "krf1":
                out.kafka_rf1 = phase.rate
            else:
                out.kafka_rf3 = phase.rate
        if tool_records and RDKAFKA_PERFORMANCE.exists():
            for topic in ("crf1", "crf3"):
                phase = Phase()
                rdkafka_tool(phase, "P", bootstrap, topic, tool_records, "-1", pids)
                if topic == "crf1":
                    out.tool_rf1 = phase.rate
                else:
                    out.tool_rf3, out.tool_rf3_cpu_per_million = phase.rate, phase.cpu_per_million
        lat = asyncio.run(latency(leaders_of(url, "lat"), "lat", 10_000, latency_seconds, 50, "all"))
        out.p50_ms, out.p99_ms = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
        out.notes.append(load())
    finally:
        cluster.down()
    return out


def span(xs: list[float], fmt: str) -> str:
    return f"{min(xs):{fmt}}-{max(xs):{fmt}}" if len(xs) > 1 else f"{xs[0]:{fmt}}"


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=600_000)
    ap.add_argument("--kafka-records", type=int, default=300_000)
    ap.add_argument("--latency-seconds", type=float, default=8.0)
    ap.add_argument("--transports", default="http,kafka",
                    help="comma list of http, kafka, and baseline (the --baseline checkout's brokers)")
    ap.add_argument("--baseline", type=Path, help="another checkout (with its compiled codec), for an A/B")
    ap.add_argument("--tool-records", type=int, default=1_000_000,
                    help="records for librdkafka's C tool (rdkafka_performance) per phase; 0 leaves it out")
    args = ap.parse_args()
    transports = args.transports.split(",")
    if "baseline" in transports and args.baseline is None:
        ap.error("the baseline transport needs --baseline")
    if args.baseline is not None and "baseline" not in transports:
        transports.append("baseline")
    values = make_values(args.records)
    kafka_values = values[:args.kafka_records]
    gc.collect()
    gc.freeze()
    rounds: list[Round] = []
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="odradek-repl-", dir=root) as d:
        for r in range(args.rounds):
            order = transports if r % 2 == 0 else transports[::-1]
            for transport in order:
                result = one_round(Path(d) / f"r{r}", transport, values, kafka_values, args.latency_seconds,
                                   args.tool_records, args.baseline and args.baseline.resolve())
                rounds.append(result)
                print(f"round {r + 1} {transport:8}: binary RF1 {result.rf1:,.0f}/s RF3 {result.rf3:,.0f}/s "
                      f"ratio {result.ratio:.2f}, RF3 broker CPU {result.rf3_cpu_per_million:.2f} s/M; librdkafka "
                      f"RF1 {result.kafka_rf1:,.0f}/s RF3 {result.kafka_rf3:,.0f}/s ratio {result.kafka_ratio:.2f}; "
                      f"rdkafka_performance RF1 {result.tool_rf1:,.0f}/s RF3 {result.tool_rf3:,.0f}/s ratio "
                      f"{result.tool_ratio:.2f} ({result.tool_rf3_cpu_per_million:.2f} CPU-s/M); "
                      f"10k/s acks=all RF3 p50 {result.p50_ms:.2f} ms p99 {result.p99_ms:.2f} ms "
                      f"({'; '.join(result.notes)})", flush=True)
    print(f"\n{args.rounds} rounds, {args.records:,} binary records and {args.kafka_records:,} librdkafka records "
          f"per phase, {PARTITIONS} partitions")
    print(f"{'transport':10} {'binary RF3/RF1':>15} {'RF3 CPU s/M':>12} {'librdkafka RF3/RF1':>19} "
          f"{'C tool RF3/RF1':>15} {'C RF3 CPU s/M':>14} {'p50 ms':>11} {'p99 ms':>11} {'binary RF3/s':>19}")
    for t in transports:
        rs = [x for x in rounds if x.transport == t]
        print(f"{t:10} {span([x.ratio for x in rs], '.2f'):>15} {span([x.rf3_cpu_per_million for x in rs], '.2f'):>12} "
              f"{span([x.kafka_ratio for x in rs], '.2f'):>19} {span([x.tool_ratio for x in rs], '.2f'):>15} "
              f"{span([x.tool_rf3_cpu_per_million for x in rs], '.2f'):>14} {span([x.p50_ms for x in rs], '.2f'):>11} "
              f"{span([x.p99_ms for x in rs], '.2f'):>11} {span([x.rf3 for x in rs], ',.0f'):>19}")


if __name__ == "__main__":
    main()
