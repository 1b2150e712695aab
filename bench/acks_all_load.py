"""acks=all RF 3 at a steady request rate: latency and the brokers' CPU per request, per replica transport.

    .venv/bin/python bench/acks_all_load.py [--transports http,kafka] [--rates 200,600] [--seconds 5]
                                            [--records-per-request 50] [--runs 2]

A 3-broker cluster (one ZooKeeper node) per transport, a 6-partition RF 3 topic with min.insync.replicas 2;
binary produce of ``--records-per-request`` records at each rate (requests/s, spread over the partitions'
leaders, paced as bench/rest_bench.py's latency phase), ``--runs`` times each. Prints per run: requests, p50 and
p99, the three brokers' utime+stime per request (from /proc) and the replica fetch rounds (Kafka's Fetch; the http
transport counts none). At 10,000 records/s (200 requests/s of 50) this is issue 25's latency figure; a rate near
what the machine can take shows the CPU per request turning into queueing. Not a test.

``--idle-partitions N``: an RF 3 topic of N partitions beside it, never written: a follower's fetch session then
holds hundreds of idle partitions per leader, and what a replication round costs per partition of its session
shows, first in the three brokers' CPU while everything is idle (over ``--idle-seconds``), then in the latency.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rest_bench import PARTITIONS, _wait_isr, latency, leaders_of  # noqa: E402
from odradek_local.cluster import LocalCluster  # noqa: E402
from tests.harness.http import create_topic  # noqa: E402
from tests.harness.ports import free_port_block  # noqa: E402


def ticks(pids: list[int]) -> int:
    return sum(sum(int(x) for x in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[11:13])
               for p in pids)


def three_brokers(workdir: Path, transport: str | None = None) -> LocalCluster:
    """The latency benches' cluster (not started): 3 brokers over one ZooKeeper node, short ticks and sessions;
    ``transport``: the replica fetch transport (the broker's default when None)."""
    return LocalCluster(workdir, brokers=3, base_port=free_port_block(3), zookeepers=1,
                        zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                        broker_args=[] if transport is None else ["--replica-fetch-transport", transport])


def fetch_rounds(urls: list[str]) -> float:
    total = 0.0
    for u in urls:
        for line in urllib.request.urlopen(f"{u}/metrics").read().decode().splitlines():
            if line.startswith("odradek_replica_fetcher_requests_total"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transports", default="http,kafka")
    ap.add_argument("--rates", default="200,600", help="requests per second")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--records-per-request", type=int, default=50)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--idle-partitions", type=int, default=0, help="an idle RF 3 topic of this many partitions")
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    args = ap.parse_args()
    hz = 100  # USER_HZ
    per = args.records_per_request
    with tempfile.TemporaryDirectory(prefix="odradek-acks-all-", dir=ROOT) as d:
        for transport in args.transports.split(","):
            cluster = three_brokers(Path(d) / transport, transport)
            try:
                cluster.up()
                urls = [cluster.broker_url(i) for i in (1, 2, 3)]
                create_topic(urls[0], "lat", PARTITIONS, 3, {"min.insync.replicas": "2"}, seen_by=urls)
                topics = ["lat"]
                if args.idle_partitions:
                    create_topic(urls[0], "idle", args.idle_partitions, 3, {"min.insync.replicas": "2"},
                                 seen_by=urls, timeout_ms=15_000)
                    topics.append("idle")
                _wait_isr(urls[0], topics, timeout=120.0)
                pids = [cluster.broker_pid(i) or 0 for i in (1, 2, 3)]
                if args.idle_partitions:
                    time.sleep(3)  # the sessions settle after the creation's rounds
                    t0 = ticks(pids)
                    time.sleep(args.idle_seconds)
                    print(f"{transport:5} idle, {args.idle_partitions} idle partitions beside {PARTITIONS}: brokers' "
                          f"CPU {(ticks(pids) - t0) / hz / args.idle_seconds * 1000:,.0f} ms per second", flush=True)
                leaders = leaders_of(urls[0], "lat")
                for rate in (int(r) for r in args.rates.split(",")):
                    for _ in range(args.runs):
                        marks: list[float] = []  # the fetch rounds and CPU ticks as the measured requests begin

                        def mark() -> None:
                            marks.extend((fetch_rounds(urls), ticks(pids)))  # noqa: B023 (called within the loop)

                        lat = asyncio.run(latency(leaders, "lat", rate * per, args.seconds, per, "all",
                                                  on_start=mark))
                        t1, r1 = ticks(pids), fetch_rounds(urls)
                        r0, t0 = marks
                        n = len(lat)
                        print(f"{transport:5} {rate:5} req/s ({rate * per:,} records/s): {n} requests, p50 "
                              f"{lat[n // 2] * 1000:.2f} ms, p99 {lat[int(n * 0.99)] * 1000:.2f} ms, brokers' CPU "
                              f"{(t1 - t0) / hz / n * 1e6:,.0f} µs per request, {r1 - r0:,.0f} fetch rounds",
                              flush=True)
            finally:
                cluster.down()


if __name__ == "__main__":
    main()
