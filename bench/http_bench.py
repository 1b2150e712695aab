"""HTTP produce/read figures for one broker (replication factor 1, 6 partitions, 100-byte values), side by side
with Redis Streams (XADD pipelined from redis-py) and NATS JetStream (async publish from nats-py) on the same
record count and size. Every server is started and stopped by this script, on 127.0.0.1.

    .venv/bin/python bench/http_bench.py [--records 1000000]

Client-side batch encoding is done before timing for Odradek (as the peers' payloads are prepared before
timing); the broker still validates every batch's CRC and rewrites its header. Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek.protocol.records import encode_batch, iter_batch_headers
from odradek_local.cluster import LocalCluster
from odradek_local.processes import ManagedProcess
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block

BATCHES = "application/vnd.odradek.batches.v2"
JSON_V2 = "application/vnd.kafka.json.v2+json"
PARTITIONS = 6
VALUE = b"x" * 100


async def run_requests(make: list[tuple[str, str, bytes, str]], concurrency: int) -> float:
    """POST every (method, url, body, content type) with ``concurrency`` in flight; returns elapsed seconds."""
    queue = list(reversed(make))

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            _method, url, body, ctype = queue.pop()
            async with session.post(url, data=body, headers={"Content-Type": ctype}) as resp:
                await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{url}: {resp.status}")

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return time.perf_counter() - started


async def read_all(url: str, topic: str, json_path: bool) -> tuple[int, float]:
    async def one(session: aiohttp.ClientSession, p: int) -> int:
        offset, count = 0, 0
        while True:
            if json_path:
                async with session.get(f"{url}/topics/{topic}/partitions/{p}/records",
                                       params={"offset": offset, "max_bytes": 4 << 20}) as resp:
                    body = orjson.loads(await resp.read())
                count += len(body["records"])
                if body["next_offset"] >= body["high_watermark"]:
                    return count
                offset = body["next_offset"]
            else:
                async with session.get(f"{url}/topics/{topic}/partitions/{p}/batches",
                                       params={"offset": offset, "max_bytes": 8 << 20}) as resp:
                    data = await resp.read()
                    hw = int(resp.headers["Odradek-High-Watermark"])
                for _, h in iter_batch_headers(data):
                    count += h.record_count
                    offset = h.next_offset
                if offset >= hw:
                    return count

    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        counts = await asyncio.gather(*(one(session, p) for p in range(PARTITIONS)))
    return sum(counts), time.perf_counter() - started


async def latency(url: str, topic: str, rate: int, seconds: float, per_request: int) -> list[float]:
    batch = encode_batch([(None, VALUE, int(time.time() * 1000), ()) for _ in range(per_request)])
    interval = per_request / rate
    out: list[float] = []
    async with aiohttp.ClientSession() as session:
        async def one(p: int) -> None:
            t = time.perf_counter()
            async with session.post(f"{url}/topics/{topic}/partitions/{p}/batches?acks=1", data=batch,
                                    headers={"Content-Type": BATCHES}) as resp:
                await resp.read()
            out.append(time.perf_counter() - t)

        tasks = []
        start = time.perf_counter()
        for i in range(int(seconds / interval)):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i % PARTITIONS)))
        await asyncio.gather(*tasks)
    return sorted(out)


def bench_redis(records: int, workdir: Path) -> float | None:
    if shutil.which("redis-server") is None:
        return None
    import redis

    port = free_port_block(1)
    proc = ManagedProcess.spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(workdir)], log_path=workdir / "redis.log")
    try:
        client = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        started = time.perf_counter()
        for start in range(0, records, 1000):
            pipe = client.pipeline(transaction=False)
            for _ in range(min(1000, records - start)):
                pipe.xadd("bench", {"v": VALUE})
            pipe.execute()
        elapsed = time.perf_counter() - started
        assert client.xlen("bench") == records
        return records / elapsed
    finally:
        proc.terminate()


def bench_nats(records: int, workdir: Path) -> float | None:
    if shutil.which("nats-server") is None:
        return None
    import nats

    port = free_port_block(1)
    proc = ManagedProcess.spawn(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd",
                                 str(workdir / "js")], log_path=workdir / "nats.log")

    async def run() -> float:
        for _ in range(200):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream(publish_async_max_pending=20000)
        await js.add_stream(name="bench", subjects=["bench"])
        started = time.perf_counter()
        for _ in range(records):
            await js.publish_async("bench", VALUE)
        await js.publish_async_completed()
        elapsed = time.perf_counter() - started
        info = await js.stream_info("bench")
        assert info.state.messages == records
        await nc.close()
        return records / elapsed

    try:
        return asyncio.run(run())
    finally:
        proc.terminate()


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--latency-seconds", type=float, default=8.0)
    args = ap.parse_args()
    n, per = args.records, args.batch
    root = Path(__file__).resolve().parent.parent
    rows: list[tuple[str, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="odradek-http-", dir=root) as d:
        workdir = Path(d)
        cluster = LocalCluster(workdir / "cluster", brokers=1, base_port=free_port_block(1), zookeepers=1,
                               zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000)
        try:
            cluster.up()
            url = cluster.broker_url(1)
            for topic in ("bin", "json", "lat"):
                create_topic(url, topic, PARTITIONS, 1, seen_by=[url])
            now = int(time.time() * 1000)
            batch = encode_batch([(None, VALUE, now, ()) for _ in range(per)])
            reqs = [("POST", f"{url}/topics/bin/partitions/{i % PARTITIONS}/batches?acks=1", batch, BATCHES)
                    for i in range(n // per)]
            elapsed = asyncio.run(run_requests(reqs, 2 * PARTITIONS))
            rows.append(("produce, binary batches", n / elapsed, n * len(VALUE) / elapsed / 1e6))

            body = orjson.dumps({"records": [{"value": "x" * 98} for _ in range(per)]})
            reqs = [("POST", f"{url}/topics/json/partitions/{i % PARTITIONS}?acks=1", body, JSON_V2)
                    for i in range(n // per)]
            elapsed = asyncio.run(run_requests(reqs, 2 * PARTITIONS))
            rows.append(("produce, JSON (v2)", n / elapsed, n * len(VALUE) / elapsed / 1e6))

            count, elapsed = asyncio.run(read_all(url, "bin", json_path=False))
            assert count == n, count
            rows.append(("read, binary batches", count / elapsed, count * len(VALUE) / elapsed / 1e6))
            count, elapsed = asyncio.run(read_all(url, "json", json_path=True))
            assert count == n, count
            rows.append(("read, JSON records", count / elapsed, count * len(VALUE) / elapsed / 1e6))
            lat = asyncio.run(latency(url, "lat", 10_000, args.latency_seconds, per_request=50))
        finally:
            cluster.down()
        redis_rate = bench_redis(n, workdir)
        nats_rate = bench_nats(n, workdir)

    print(f"{n:,} records of {len(VALUE)} bytes, 1 broker, RF 1, {PARTITIONS} partitions, batches of {per}, acks=1")
    print(f"{'operation':28} {'records/s':>12} {'MB/s':>8}")
    for name, rate, mbs in rows:
        print(f"{name:28} {rate:>12,.0f} {mbs:>8.1f}")
    p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
    print(f"produce latency at 10,000 records/s (50 records/request): p50 {p50:.2f} ms, p99 {p99:.2f} ms, "
          f"mean {statistics.mean(lat) * 1000:.2f} ms over {len(lat)} requests")
    binary = rows[0][1]
    for name, rate in (("Redis Streams XADD (pipelined)", redis_rate), ("NATS JetStream (async publish)", nats_rate)):
        if rate is None:
            print(f"{name:32} not installed")
        else:
            print(f"{name:32} {rate:>12,.0f} records/s; Odradek binary / this = {binary / rate:.2f}x")
    faster = max(r for r in (redis_rate, nats_rate) if r is not None) if (redis_rate or nats_rate) else None
    if faster:
        print(f"Odradek binary produce vs the faster peer: {binary / faster:.2f}x")


if __name__ == "__main__":
    main()
