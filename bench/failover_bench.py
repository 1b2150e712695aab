"""Replication figures from one run on a local 3-broker cluster (3 ZooKeeper nodes, tickTime 250 ms):

* leader failover time: SIGKILL of a partition leader to the first successful acks=all produce (median and max
  of N rounds), with the configured ZooKeeper session timeout;
* acks=all throughput with replication factor 3 against replication factor 1 (Kafka's own ratio was 0.51);
* produce latency p50/p99 at a steady 10,000 records/s with acks=all and replication factor 3.

    .venv/bin/python bench/failover_bench.py [--rounds 10] [--session-timeout-ms 1500] [--seconds 8]

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek.protocol.records import encode_batch
from odradek_local.cluster import LocalCluster
from tests.harness.http import create_topic, partition_state, produce
from tests.harness.ports import free_port_block

BATCHES = "application/vnd.odradek.batches.v2"


def live_urls(cluster: LocalCluster) -> list[str]:
    return [cluster.broker_url(b) for b in cluster.slots if cluster.broker_pid(b) is not None]


def failover_round(cluster: LocalCluster, topic: str) -> float:
    url = live_urls(cluster)[0]
    leader = int(partition_state(url, topic)["leader"])
    assert produce(cluster.broker_url(leader), topic, 0, ["warm"])[1]["offsets"][0]["error_code"] is None
    killed = time.monotonic()
    cluster.kill_broker(leader)
    others = live_urls(cluster)
    attempt = 0
    deadline = killed + 60
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no acks=all produce succeeded within 60 s of killing broker {leader}")
        try:
            status, body = produce(others[attempt % len(others)], topic, 0, ["after"], timeout_ms=2000)
            if status == 200 and body["offsets"][0]["error_code"] is None:
                elapsed = time.monotonic() - killed
                break
        except OSError:
            pass
        attempt += 1
        time.sleep(0.005)
    cluster.start_broker(leader)
    deadline = time.monotonic() + 30
    while len(partition_state(others[0], topic)["isr"]) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    return elapsed


async def throughput(leaders: dict[int, str], topic: str, seconds: float, records_per_batch: int = 1000) -> float:
    batch = encode_batch([(None, b"x" * 100, int(time.time() * 1000), ()) for _ in range(records_per_batch)])
    sent = 0
    deadline = time.monotonic() + seconds

    async def sender(session: aiohttp.ClientSession, partition: int, url: str) -> None:
        nonlocal sent
        target = f"{url}/topics/{topic}/partitions/{partition}/batches?acks=all"
        while time.monotonic() < deadline:
            async with session.post(target, data=batch, headers={"Content-Type": BATCHES}) as resp:
                if resp.status == 200:
                    sent += records_per_batch
                await resp.read()

    started = time.monotonic()
    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(sender(session, p, u) for p, u in leaders.items() for _ in range(2)))
    return sent / (time.monotonic() - started)


async def latency(url: str, topic: str, rate: int, seconds: float, per_request: int) -> list[float]:
    batch = encode_batch([(None, b"x" * 100, int(time.time() * 1000), ()) for _ in range(per_request)])
    interval = per_request / rate
    latencies: list[float] = []
    target = f"{url}/topics/{topic}/partitions/0/batches?acks=all"
    async with aiohttp.ClientSession() as session:
        tasks = []

        async def one() -> None:
            t = time.perf_counter()
            async with session.post(target, data=batch, headers={"Content-Type": BATCHES}) as resp:
                await resp.read()
                if resp.status == 200:
                    latencies.append(time.perf_counter() - t)

        start = time.perf_counter()
        n = int(seconds / interval)
        for i in range(n):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return latencies


def leaders_of(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, str]:
    url = live_urls(cluster)[0]
    return {p: cluster.broker_url(int(partition_state(url, topic, p)["leader"])) for p in range(partitions)}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: end what we started
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--session-timeout-ms", type=int, default=1500)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--tick-ms", type=int, default=250,
                    help="ZooKeeper tickTime: sessions expire in tick-sized buckets, so a smaller tick expires them "
                         "closer to the session timeout")
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="odradek-failover-", dir=root) as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=3,
                               zk_base_port=free_port_block(3, span=106), tick_ms=args.tick_ms,
                               session_timeout_ms=args.session_timeout_ms)
        try:
            cluster.up()
            url = cluster.broker_url(1)
            seen = [cluster.broker_url(b) for b in cluster.slots]
            create_topic(url, "failover", 1, 3, {"min.insync.replicas": "2"}, seen_by=seen)
            times = [failover_round(cluster, "failover") for _ in range(args.rounds)]
            print(f"leader failover (SIGKILL -> first acks=all success), session timeout {args.session_timeout_ms} ms, "
                  f"tickTime {args.tick_ms} ms:"
                  f" median {statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} rounds")

            create_topic(url, "latency", 1, 3, {"min.insync.replicas": "2"}, seen_by=seen)
            leader_url = leaders_of(cluster, "latency", 1)[0]
            lat = sorted(asyncio.run(latency(leader_url, "latency", 10_000, args.seconds, per_request=50)))
            p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
            print(f"acks=all RF3 produce latency at 10,000 records/s (50 records per request, a 5 ms linger): "
                  f"p50 {p50:.2f} ms, p99 {p99:.2f} ms over {len(lat)} requests")
            create_topic(url, "rf1", 3, 1, seen_by=seen)
            create_topic(url, "rf3", 3, 3, {"min.insync.replicas": "2"}, seen_by=seen)
            rf1 = asyncio.run(throughput(leaders_of(cluster, "rf1", 3), "rf1", args.seconds))
            rf3 = asyncio.run(throughput(leaders_of(cluster, "rf3", 3), "rf3", args.seconds))
            print(f"acks=all throughput, 100-byte records, batches of 1000, 3 partitions: RF1 {rf1:,.0f} records/s, "
                  f"RF3 {rf3:,.0f} records/s, ratio {rf3 / rf1:.2f}")

            with urllib.request.urlopen(f"{url}/health") as resp:
                resp.read()
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
