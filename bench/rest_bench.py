"""REST Proxy v2 produce and read figures exactly as issue 15 sets them, with Redis Streams and NATS JetStream
side by side in the same run, plus the binary path, RF 3 acks=all vs RF 1, and p99 latency at 10,000 records/s.

    .venv/bin/python bench/rest_bench.py [--records 1000000] [--peer-records 200000] [--skip rf3,peers]

The setup is a new user's: distinct random 100-byte values, keys ``k<i mod 1000>``, 1,000 records per request,
4 requests in flight, one broker, 6 partitions. The REST produce goes to ``POST /topics/{t}`` so the broker's
partitioner (Kafka's murmur2 over the keys) runs as it does for a REST-proxy client; the binary embedded format
carries base64 values, the JSON one a 98-character JSON string (100 bytes stored). Request bodies are built
before timing, as the peers' payloads are. Redis gets the same records (XADD of ``k``/``v`` fields, 1,000 per
pipeline, 4 pipelines in flight, redis-py with hiredis, stream per partition); NATS JetStream gets them as
async publishes (subject per partition). Reads: REST ``GET .../records`` (default 1 MiB answers, base64 and
JSON), Redis ``XRANGE COUNT 1000``, a JetStream pull consumer fetching 1,000 at a time. The RF figures use a
3-broker cluster with an RF 1 and an RF 3 topic (min.insync.replicas 2), both acks=all on the binary path to
each partition's leader, as Kafka's own RF 1 / RF 3 comparison does. Every server is started and stopped by
this script on 127.0.0.1 (`bash scripts/bench-setup.sh` installs redis-server, nats-server and their clients);
a missing one is reported, not fatal. Prints a table; not
a test. The machine is shared: the load average is printed with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import os
import random
import shutil
import signal
import string
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek.protocol.partitioner import murmur2, to_positive
from odradek.protocol.records import encode_batch, iter_batch_headers
from odradek_local.cluster import LocalCluster
from odradek_local.processes import ManagedProcess
from tests.harness.http import create_topic, metadata
from tests.harness.ports import free_port_block

BATCHES = "application/vnd.odradek.batches.v2"
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
PARTITIONS = 6
PER_REQUEST = 1000
IN_FLIGHT = 4
KEYS = [f"k{i}".encode() for i in range(1000)]


def make_values(n: int) -> list[bytes]:
    """n distinct random 100-byte values (a counter prefix makes them distinct whatever the random bytes)."""
    rnd = random.Random(15).randbytes
    return [i.to_bytes(4, "big") + rnd(96) for i in range(n)]


def make_json_values(n: int) -> list[str]:
    letters = string.ascii_letters + string.digits
    rnd = random.Random(16)
    return [f"{i:08d}" + "".join(rnd.choices(letters, k=90)) for i in range(n)]


async def post_all(bodies: list[tuple[str, bytes, str]], in_flight: int = IN_FLIGHT) -> float:
    """POST every (url, body, content type) with ``in_flight`` requests outstanding; elapsed seconds."""
    queue = list(reversed(bodies))

    async def worker(session: aiohttp.ClientSession) -> None:
        while queue:
            url, body, ctype = queue.pop()
            async with session.post(url, data=body, headers={"Content-Type": ctype}) as resp:
                answer = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"{url}: {resp.status} {answer[:300]!r}")
                if b'"error_code":5' in answer:
                    raise RuntimeError(f"{url}: a record failed: {answer[:300]!r}")

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(in_flight)))
    return time.perf_counter() - started


async def read_rest(url: str, topic: str, accept: str) -> tuple[int, float]:
    """Every partition from 0 to its high watermark through GET .../records, 4 requests in flight."""
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(session: aiohttp.ClientSession, p: int) -> int:
        offset, count = 0, 0
        while True:
            async with gate, session.get(f"{url}/topics/{topic}/partitions/{p}/records",
                                         params={"offset": offset}, headers={"Accept": accept}) as resp:
                body = orjson.loads(await resp.read())
            count += len(body["records"])
            if body["next_offset"] >= body["high_watermark"]:
                return count
            offset = body["next_offset"]

    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        counts = await asyncio.gather(*(one(session, p) for p in range(PARTITIONS)))
    return sum(counts), time.perf_counter() - started


async def read_batches(leaders: dict[int, str], topic: str) -> tuple[int, float]:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def one(session: aiohttp.ClientSession, p: int) -> int:
        offset, count = 0, 0
        while True:
            async with gate, session.get(f"{leaders[p]}/topics/{topic}/partitions/{p}/batches",
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


def keyed_batches(values: list[bytes], now_ms: int) -> list[tuple[int, bytes]]:
    """(partition, batch of 1,000 keyed records) as a Kafka client would build them: partitioned by murmur2."""
    by_part: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for i, v in enumerate(values):
        key = KEYS[i % 1000]
        by_part[to_positive(murmur2(key)) % PARTITIONS].append((key, v))
    out = []
    for p, recs in by_part.items():
        for s in range(0, len(recs), PER_REQUEST):
            out.append((p, encode_batch([(k, v, now_ms, ()) for k, v in recs[s:s + PER_REQUEST]])))
    random.Random(3).shuffle(out)
    return out


def leaders_of(url: str, topic: str) -> dict[int, str]:
    meta = orjson.loads(__import__("urllib.request").request.urlopen(f"{url}/metadata?topics={topic}").read())
    urls = {b["id"]: b["url"] for b in meta["brokers"]}
    return {p["partition"]: urls[p["leader"]] for p in meta["topics"][0]["partitions"]}


async def latency(leaders: dict[int, str], topic: str, rate: int, seconds: float, per_request: int,
                  acks: str, *, warmup_s: float = 1.0, on_start: Callable[[], None] | None = None) -> list[float]:
    """Binary produces of ``per_request`` records at ``rate`` records/s over the partitions, round robin, for
    ``seconds``; their latencies, sorted. The first ``warmup_s`` seconds of requests go at the same pace and are
    not measured: they open the client's connections and make each broker's first requests on them (tens of
    milliseconds each, which would otherwise be the run's p99). ``on_start`` is called as the measured requests
    begin (where a caller snapshots the brokers' counters)."""
    values = make_values(per_request)
    batch = encode_batch([(KEYS[i], v, int(time.time() * 1000), ()) for i, v in enumerate(values)])
    interval = per_request / rate
    out: list[float] = []
    async with aiohttp.ClientSession() as session:
        async def one(p: int, measured: bool) -> None:
            t = time.perf_counter()
            async with session.post(f"{leaders[p]}/topics/{topic}/partitions/{p}/batches?acks={acks}", data=batch,
                                    headers={"Content-Type": BATCHES}) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            if measured:
                out.append(time.perf_counter() - t)

        tasks = []
        warm = int(warmup_s / interval)
        start = time.perf_counter()
        for i in range(warm + int(seconds / interval)):
            delay = start + i * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if i == warm and on_start is not None:
                on_start()
            tasks.append(asyncio.create_task(one(i % PARTITIONS, i >= warm)))
        await asyncio.gather(*tasks)
    return sorted(out)


def bench_redis(values: list[bytes], workdir: Path) -> tuple[float, float] | None:
    if shutil.which("redis-server") is None:
        return None
    import redis.asyncio as aredis

    port = free_port_block(1)
    proc = ManagedProcess.spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(workdir)], log_path=workdir / "redis.log")

    async def run() -> tuple[float, float]:
        client = aredis.Redis(host="127.0.0.1", port=port, max_connections=IN_FLIGHT + 2)
        for _ in range(200):
            try:
                await client.ping()
                break
            except (aredis.ConnectionError, OSError):
                await asyncio.sleep(0.05)
        n = len(values)
        chunks = [(s // PER_REQUEST % PARTITIONS, s) for s in range(0, n, PER_REQUEST)]
        queue = list(reversed(chunks))

        async def writer() -> None:
            while queue:
                p, s = queue.pop()
                pipe = client.pipeline(transaction=False)
                for i in range(s, min(s + PER_REQUEST, n)):
                    pipe.xadd(f"bench-{p}", {"k": KEYS[i % 1000], "v": values[i]})
                await pipe.execute()

        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(IN_FLIGHT)))
        produce = n / (time.perf_counter() - started)
        total = sum([await client.xlen(f"bench-{p}") for p in range(PARTITIONS)])
        assert total == n, total
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def reader(p: int) -> int:
            count, start = 0, "-"
            while True:
                async with gate:
                    got = await client.xrange(f"bench-{p}", min=start, count=PER_REQUEST)
                if not got:
                    return count
                count += len(got)
                start = "(" + got[-1][0].decode()

        started = time.perf_counter()
        counts = await asyncio.gather(*(reader(p) for p in range(PARTITIONS)))
        read = sum(counts) / (time.perf_counter() - started)
        assert sum(counts) == n
        await client.aclose()
        return produce, read

    try:
        return asyncio.run(run())
    finally:
        proc.terminate()


def bench_nats(values: list[bytes], workdir: Path) -> tuple[float, float] | None:
    if shutil.which("nats-server") is None:
        return None
    import nats

    port = free_port_block(1)
    proc = ManagedProcess.spawn(["nats-server", "-js", "-a", "127.0.0.1", "-p", str(port), "-sd",
                                 str(workdir / "js")], log_path=workdir / "nats.log")

    async def run() -> tuple[float, float]:
        for _ in range(200):
            try:
                _, w = await asyncio.open_connection("127.0.0.1", port)
                w.close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        js = nc.jetstream(publish_async_max_pending=IN_FLIGHT * PER_REQUEST)
        await js.add_stream(name="bench", subjects=["bench.*"])
        n = len(values)
        started = time.perf_counter()
        for i, v in enumerate(values):
            await js.publish_async(f"bench.{i // PER_REQUEST % PARTITIONS}", v, headers={"k": KEYS[i % 1000].decode()})
        await js.publish_async_completed()
        produce = n / (time.perf_counter() - started)
        info = await js.stream_info("bench")
        assert info.state.messages == n
        sub = await js.pull_subscribe("bench.*", durable="reader")
        count = 0
        started = time.perf_counter()
        while count < n:
            msgs = await sub.fetch(PER_REQUEST, timeout=5)
            count += len(msgs)
            await msgs[-1].ack()  # AckAll is not the default policy: ack each, the way a reader must
            for m in msgs[:-1]:
                await m.ack()
        read = count / (time.perf_counter() - started)
        await nc.close()
        return produce, read

    try:
        return asyncio.run(run())
    finally:
        proc.terminate()


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--peer-records", type=int, default=200_000, help="records for NATS (it is slow); Redis "
                    "gets --records")
    ap.add_argument("--rf-records", type=int, default=600_000)
    ap.add_argument("--latency-seconds", type=float, default=8.0)
    ap.add_argument("--skip", default="", help="comma list of: rest, binary, rf3, latency, redis, nats")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    n = args.records
    root = Path(__file__).resolve().parent.parent
    rows: list[tuple[str, float]] = []
    notes: list[str] = [f"start: {load()}"]
    values = make_values(n)
    b64_values = [base64.b64encode(v).decode() for v in values]
    json_values = make_json_values(n)
    b64_keys = [base64.b64encode(k).decode() for k in KEYS]
    json_keys = [k.decode() for k in KEYS]
    # The inputs (millions of objects, alive all run) go to the permanent generation: otherwise every full
    # collection of this process walks them, and the client's GC, not the servers, set the read figures.
    gc.collect()
    gc.freeze()
    with tempfile.TemporaryDirectory(prefix="odradek-rest-", dir=root) as d:
        workdir = Path(d)

        def cluster_of(brokers: int, name: str) -> LocalCluster:
            return LocalCluster(workdir / name, brokers=brokers, base_port=free_port_block(brokers), zookeepers=1,
                                zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000)

        def rest_bodies(url: str, topic: str, keys: list[str], vals: list[str], ctype: str
                        ) -> list[tuple[str, bytes, str]]:
            return [(f"{url}/topics/{topic}?acks=1",
                     orjson.dumps({"records": [{"key": keys[i % 1000], "value": vals[i]}
                                               for i in range(s, min(s + PER_REQUEST, n))]}), ctype)
                    for s in range(0, n, PER_REQUEST)]

        if not {"rest", "binary"} <= skip:
            cluster = cluster_of(1, "one")
            try:
                cluster.up()
                url = cluster.broker_url(1)
                for topic in ("rb", "rj", "bin"):
                    create_topic(url, topic, PARTITIONS, 1, seen_by=[url])
                if "rest" not in skip:
                    bodies = rest_bodies(url, "rb", b64_keys, b64_values, BINARY_V2)
                    rows.append(("REST produce, binary (base64)", n / asyncio.run(post_all(bodies))))
                    bodies = rest_bodies(url, "rj", json_keys, json_values, JSON_V2)
                    rows.append(("REST produce, JSON embedded", n / asyncio.run(post_all(bodies))))
                    del bodies
                    count, elapsed = asyncio.run(read_rest(url, "rb", BINARY_V2))
                    assert count == n, count
                    rows.append(("REST read, binary (base64)", count / elapsed))
                    count, elapsed = asyncio.run(read_rest(url, "rj", JSON_V2))
                    assert count == n, count
                    rows.append(("REST read, JSON embedded", count / elapsed))
                if "binary" not in skip:
                    batches = keyed_batches(values, int(time.time() * 1000))
                    reqs = [(f"{url}/topics/bin/partitions/{p}/batches?acks=1", b, BATCHES) for p, b in batches]
                    rows.append(("binary produce (acks=1)", n / asyncio.run(post_all(reqs, 2 * PARTITIONS))))
                    count, elapsed = asyncio.run(read_batches({p: url for p in range(PARTITIONS)}, "bin"))
                    assert count == n, count
                    rows.append(("binary read", count / elapsed))
            finally:
                cluster.down()
            notes.append(f"after one-broker runs: {load()}")
        rf: dict[int, float] = {}
        lat: list[float] = []
        if not {"rf3", "latency"} <= skip:
            cluster = cluster_of(3, "three")
            try:
                cluster.up()
                url = cluster.broker_url(1)
                urls = [cluster.broker_url(i) for i in (1, 2, 3)]
                create_topic(url, "rf1", PARTITIONS, 1, seen_by=urls)
                create_topic(url, "rf3", PARTITIONS, 3, {"min.insync.replicas": "2"}, seen_by=urls)
                create_topic(url, "lat", PARTITIONS, 3, {"min.insync.replicas": "2"}, seen_by=urls)
                _wait_isr(url, ["rf3", "lat"])
                if "rf3" not in skip:
                    m = args.rf_records
                    batches = keyed_batches(values[:m], int(time.time() * 1000))
                    for topic, factor in (("rf1", 1), ("rf3", 3)):
                        leaders = leaders_of(url, topic)
                        reqs = [(f"{leaders[p]}/topics/{topic}/partitions/{p}/batches?acks=all", b, BATCHES)
                                for p, b in batches]
                        rf[factor] = m / asyncio.run(post_all(reqs, 2 * PARTITIONS))
                if "latency" not in skip:
                    lat = asyncio.run(latency(leaders_of(url, "lat"), "lat", 10_000, args.latency_seconds, 50, "all"))
            finally:
                cluster.down()
            notes.append(f"after three-broker runs: {load()}")
        redis_rates = None if "redis" in skip else bench_redis(values, workdir)
        nats_rates = None if "nats" in skip else bench_nats(values[:args.peer_records], workdir)
        notes.append(f"end: {load()}")

    print(f"{n:,} records: distinct random 100-byte values, keys k<i mod 1000>, {PER_REQUEST} records/request, "
          f"{IN_FLIGHT} in flight, 1 broker, RF 1, {PARTITIONS} partitions, acks=1")
    print(f"{'operation':36} {'records/s':>12}  vs Redis  vs NATS")

    def ratio(rate: float, peer: tuple[float, float] | None, pick: Callable[[tuple[float, float]], float]) -> str:
        return f"{rate / pick(peer):>7.2f}x" if peer else "      -"

    for name, rate in rows:
        pick = (lambda t: t[1]) if "read" in name else (lambda t: t[0])
        print(f"{name:36} {rate:>12,.0f} {ratio(rate, redis_rates, pick)} {ratio(rate, nats_rates, pick)}")
    if redis_rates:
        print(f"{'Redis Streams XADD (pipelined)':36} {redis_rates[0]:>12,.0f}")
        print(f"{'Redis Streams XRANGE':36} {redis_rates[1]:>12,.0f}")
    else:
        print("Redis Streams: not run (redis-server or redis-py missing, or --skip)")
    if nats_rates:
        print(f"{'NATS JetStream publish_async':36} {nats_rates[0]:>12,.0f}  ({args.peer_records:,} records)")
        print(f"{'NATS JetStream pull fetch':36} {nats_rates[1]:>12,.0f}")
    else:
        print("NATS JetStream: not run (nats-server or nats-py missing, or --skip)")
    if rf:
        print(f"binary produce acks=all, 3 brokers: RF 1 {rf[1]:,.0f}/s, RF 3 {rf[3]:,.0f}/s, "
              f"RF3/RF1 = {rf[3] / rf[1]:.2f} ({args.rf_records:,} records)")
    if lat:
        p50, p99 = lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000
        print(f"produce latency at 10,000 records/s, acks=all RF 3 (50 records/request): p50 {p50:.2f} ms, "
              f"p99 {p99:.2f} ms over {len(lat)} requests")
    for note in notes:
        print(note)


def _wait_isr(url: str, topics: list[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    for topic in topics:
        while not all(len(p["isr"]) == 3 for p in metadata(url, topic)["partitions"]):
            assert time.monotonic() < deadline, f"{topic}: ISR not full"
            time.sleep(0.1)


if __name__ == "__main__":
    main()
