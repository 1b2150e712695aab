"""Storage isolation figures: does a topic that fsyncs every append slow down or destabilise the others?

On a local 3-broker cluster (3 ZooKeeper nodes), one acks=all RF3 partition is produced to at a steady
10,000 records/s (50 records per request) and its latency measured, twice:

* alone;
* while a ``flush.messages=1`` topic (3 partitions, RF3, so every broker leads one and follows two) is produced
  to at full speed (several concurrent senders per partition, small requests: one fsync each).

It prints p50/p99/max latency of both runs, the fsync'd topic's throughput, and the leader-epoch changes of the
measured partition (a broker whose loop stalls on the disk fences its leaderships: an epoch bump).

    .venv/bin/python bench/storage_bench.py [--seconds 10] [--session-timeout-ms 3000]

Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek.protocol.records import encode_batch
from odradek_local.cluster import LocalCluster
from tests.harness.http import create_topic, partition_state
from tests.harness.ports import free_port_block

BATCHES = "application/vnd.odradek.batches.v2"


def _batch(n: int) -> bytes:
    return encode_batch([(None, b"x" * 100, int(time.time() * 1000), ()) for _ in range(n)])


async def latency(url: str, topic: str, rate: int, seconds: float, per_request: int) -> tuple[list[float], int]:
    """Open-loop: a request every ``per_request / rate`` s whatever the answers; returns (latencies, errors)."""
    batch = _batch(per_request)
    interval = per_request / rate
    latencies: list[float] = []
    errors = 0
    target = f"{url}/topics/{topic}/partitions/0/batches?acks=all&timeout_ms=10000"
    async with aiohttp.ClientSession() as session:
        tasks = []

        async def one() -> None:
            nonlocal errors
            t = time.perf_counter()
            async with session.post(target, data=batch, headers={"Content-Type": BATCHES}) as resp:
                await resp.read()
                if resp.status == 200:
                    latencies.append(time.perf_counter() - t)
                else:
                    errors += 1

        start = time.perf_counter()
        for i in range(int(seconds / interval)):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
    return latencies, errors


async def flood(leaders: dict[int, str], topic: str, stop: asyncio.Event, senders: int = 4,
                per_request: int = 10) -> int:
    """Closed-loop at full speed: ``senders`` concurrent small acks=1 requests per partition."""
    batch = _batch(per_request)
    sent = 0

    async def sender(session: aiohttp.ClientSession, partition: int, url: str) -> None:
        nonlocal sent
        target = f"{url}/topics/{topic}/partitions/{partition}/batches?acks=1"
        while not stop.is_set():
            try:
                async with session.post(target, data=batch, headers={"Content-Type": BATCHES}) as resp:
                    await resp.read()
                    if resp.status == 200:
                        sent += per_request
            except aiohttp.ClientError:
                await asyncio.sleep(0.05)

    async with aiohttp.ClientSession() as session:
        await asyncio.gather(*(sender(session, p, u) for p, u in leaders.items() for _ in range(senders)))
    return sent


async def measure(url: str, topic: str, seconds: float, flood_leaders: dict[int, str] | None,
                  flood_topic: str) -> tuple[list[float], int, float]:
    stop = asyncio.Event()
    flooder = None
    if flood_leaders:
        flooder = asyncio.create_task(flood(flood_leaders, flood_topic, stop))
        await asyncio.sleep(1.0)  # let the flood reach full speed before measuring
    started = time.monotonic()
    lat, errors = await latency(url, topic, 10_000, seconds, per_request=50)
    stop.set()
    flooded = (await flooder) / (time.monotonic() - started + 1.0) if flooder is not None else 0.0
    return sorted(lat), errors, flooded


def leaders_of(cluster: LocalCluster, topic: str, partitions: int) -> dict[int, str]:
    url = cluster.broker_url(1)
    return {p: cluster.broker_url(int(partition_state(url, topic, p)["leader"])) for p in range(partitions)}


def cpu_seconds(cluster: LocalCluster) -> float:
    """CPU time (user + system) the brokers have used so far: a cost figure that the machine's load does not
    distort as much as latency."""
    total = 0
    for b in cluster.slots:
        pid = cluster.broker_pid(b)
        if pid is not None:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def report(name: str, lat: list[float], errors: int, cpu_s: float) -> None:
    if not lat:
        print(f"{name}: no successful request ({errors} errors)")
        return
    p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
    print(f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {lat[-1] * 1000:.1f} ms over {len(lat)} requests, "
          f"{errors} errors; brokers' CPU {cpu_s:.1f} s; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: end what we started
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--session-timeout-ms", type=int, default=3000)
    ap.add_argument("--tick-ms", type=int, default=500)
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="odradek-storage-", dir=root) as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=3,
                               zk_base_port=free_port_block(3, span=106), tick_ms=args.tick_ms,
                               session_timeout_ms=args.session_timeout_ms)
        try:
            cluster.up()
            url = cluster.broker_url(1)
            seen = [cluster.broker_url(b) for b in cluster.slots]
            create_topic(url, "latency", 1, 3, {"min.insync.replicas": "2"}, seen_by=seen)
            create_topic(url, "fsynced", 3, 3, {"flush.messages": "1"}, seen_by=seen)
            leader_url = leaders_of(cluster, "latency", 1)[0]
            flood_leaders = leaders_of(cluster, "fsynced", 3)
            epoch0 = int(partition_state(url, "latency")["leader_epoch"])
            cpu0 = cpu_seconds(cluster)
            lat, errors, _ = asyncio.run(measure(leader_url, "latency", args.seconds, None, "fsynced"))
            report("acks=all RF3 at 10,000 records/s, alone", lat, errors, cpu_seconds(cluster) - cpu0)
            cpu0 = cpu_seconds(cluster)
            lat, errors, flooded = asyncio.run(measure(leader_url, "latency", args.seconds, flood_leaders, "fsynced"))
            report("acks=all RF3 at 10,000 records/s, with a flush.messages=1 topic at full speed", lat, errors,
                   cpu_seconds(cluster) - cpu0)
            epochs = [int(partition_state(url, "fsynced", p)["leader_epoch"]) for p in range(3)]
            print(f"flush.messages=1 topic (acks=1, 10 records per request): {flooded:,.0f} records/s; "
                  f"its leader epochs now {epochs}")
            print(f"leader epoch changes of the measured partition: "
                  f"{int(partition_state(url, 'latency')['leader_epoch']) - epoch0}")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
