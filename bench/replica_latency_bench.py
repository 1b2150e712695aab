"""acks=all RF 3 produce latency and the brokers' CPU per produce, one transport per run (issue 25), with the Kafka
codec's encode time beside it.

    .venv/bin/python bench/replica_latency_bench.py [--transport kafka] [--produces 700] [--seconds 6]
    .venv/bin/python bench/replica_latency_bench.py --codec     # the Fetch v15 encode, kio's writer and ours

A 3-broker cluster (``--replica-fetch-transport``, one ZooKeeper node) with three 6-partition RF 3 topics
(min.insync.replicas 2, so followers fetch 18 partitions in their sessions) takes ``--produces`` binary batches of
50 records, one after the other 5 ms apart, to one partition's leader, and then 10,000 records/s (50-record
batches, paced, every partition) for ``--seconds``. Prints p50/p90/p99 of each and the three brokers'
utime+stime over the sequential produces, per produce: what one acknowledged write costs the cluster, leader and
followers together, when nothing else is going on. Runs of one checkout differ on a shared 2-core machine: compare
checkouts by running this from each in turn (it starts the brokers of the checkout it is run from). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp

from bench.rest_bench import BATCHES, KEYS, PARTITIONS, _wait_isr, latency, leaders_of, make_values
from odradek.protocol.records import encode_batch
from odradek_local.cluster import LocalCluster
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block


async def sequential(leader: str, n: int) -> list[float]:
    values = make_values(50)
    batch = encode_batch([(KEYS[i], v, int(time.time() * 1000), ()) for i, v in enumerate(values)])
    out = []
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            started = time.perf_counter()
            async with session.post(f"{leader}/topics/lat/partitions/0/batches?acks=all", data=batch,
                                    headers={"Content-Type": BATCHES}) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            out.append(time.perf_counter() - started)
            await asyncio.sleep(0.005)
    return sorted(out)


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def quantiles(xs: list[float]) -> str:
    return " ".join(f"{name} {xs[int(len(xs) * q)] * 1000:.2f} ms"
                    for name, q in (("p50", .5), ("p90", .9), ("p99", .99)))


def cluster_run(transport: str, produces: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="odradek-replat-") as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=1,
                               zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                               broker_args=["--replica-fetch-transport", transport])
        try:
            cluster.up()
            urls = [cluster.broker_url(i) for i in (1, 2, 3)]
            for topic in ("lat", "other1", "other2"):
                create_topic(urls[0], topic, PARTITIONS, 3, {"min.insync.replicas": "2"}, seen_by=urls)
            _wait_isr(urls[0], ["lat", "other1", "other2"])
            leaders = leaders_of(urls[0], "lat")
            pids = [cluster.broker_pid(i) or 0 for i in (1, 2, 3)]
            before = cpu_seconds(pids)
            seq = asyncio.run(sequential(leaders[0], produces))
            per_produce = (cpu_seconds(pids) - before) / produces * 1000
            paced = asyncio.run(latency(leaders, "lat", 10_000, seconds, 50, "all"))
            print(f"{transport}: brokers' CPU per produce {per_produce:.2f} ms; sequential {quantiles(seq)}; "
                  f"10k/s {quantiles(paced)}; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        finally:
            cluster.down()


def codec_run(n: int) -> None:
    """Fetch v15 requests of 6 partitions (a follower's round), encoded by kio's writer and by ours."""
    import io

    from kio.serial import entity_writer as kio_writer

    from broker.kafka import codec
    from broker.kafka.codec import FETCH, make, nested
    from broker.kafka.writers import entity_writer

    cls = codec.request_class(FETCH, 15)
    body = make(cls, replica_state=make(nested(cls, "ReplicaState"), replica_id=2, replica_epoch=5),
                max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=10 << 20, isolation_level=0,
                session_id=1, session_epoch=2, rack_id="", forgotten_topics_data=(), topics=(make(
                    nested(cls, "FetchTopic"), topic_id=uuid.uuid4(), partitions=tuple(make(
                        nested(cls, "FetchPartition"), partition=i, current_leader_epoch=3, fetch_offset=1000 * i,
                        last_fetched_epoch=3, log_start_offset=0, partition_max_bytes=1 << 20)
                        for i in range(6))),))
    theirs, ours = kio_writer(cls), entity_writer(cls)
    for name, write in (("kio", lambda: theirs(io.BytesIO(), body)), ("compiled", lambda: ours([], body))):
        started = time.perf_counter()
        for _ in range(n):
            write()
        print(f"Fetch v15, 6 partitions, {name} writer: {(time.perf_counter() - started) / n * 1e6:.1f} µs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transport", default="kafka", choices=("http", "kafka"))
    ap.add_argument("--produces", type=int, default=700)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--codec", action="store_true", help="only the codec's encode times")
    args = ap.parse_args()
    if args.codec:
        codec_run(2000)
    else:
        cluster_run(args.transport, args.produces, args.seconds)


if __name__ == "__main__":
    main()
