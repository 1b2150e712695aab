"""The Kafka front door with librdkafka (confluent-kafka) beside the REST path and Redis Streams, in one run, with
the server's CPU-seconds per million records for each (issue 23, point 6).

    .venv/bin/python bench/kafka_bench.py [--records 1000000] [--rest-records 300000] [--skip rf3,rest,redis,raw,tool]

Rows, each a produce phase then a consume phase over the same records (distinct random 100-byte values,
``bench.rest_bench.make_values``; 6 partitions):

* librdkafka, 1 broker, RF 1, acks=1, and 3 brokers, RF 3 (min.insync.replicas 2), acks=all:
  ``confluent_kafka.Producer`` with its default configuration except ``acks`` (and ``--producer-config``),
  ``produce(topic, value)`` in a loop with ``poll(0)`` and a final ``flush()``, keyless values (librdkafka's sticky
  partitioner, its own batching). The consumer ``assign()``s every partition from the beginning and calls
  ``consume(num_messages=10000)`` until every record was read; only ``len()`` of each list is Python's work.
* rdkafka_performance, 1 broker acks=1 and 3 brokers RF 3 acks=all: librdkafka's own benchmark tool
  (examples/rdkafka_performance.c, built unchanged by ``scripts/build-rdkafka-performance.sh`` against Debian's
  librdkafka) with librdkafka's default configuration: the same client library with no Python binding, whose
  per-record work (``produce()``, ``poll()``, ``Message`` objects) sets the confluent-kafka rows. Its 100-byte
  values are the tool's pattern, not random (no compression, so the broker's work is the same). The rate is the
  tool's own clock, from the first record to the last (``--tool-records``, 2M by default).
* raw Fetch (1 broker): the same records read by a minimal client of this script, one Fetch v4 for all six
  partitions at a time (8 MiB per partition), counting records from the batch headers: the broker's Fetch path
  without any per-message work on the client's side, so a figure librdkafka's Python binding cannot show.
* REST v2 produce and read, binary (base64) and JSON embedded, exactly as ``bench/rest_bench.py`` does them
  (its ``post_all`` and ``read_rest``: 1,000 records per request, 4 in flight).
* Redis Streams: XADD pipelines of 1,000 (4 in flight) and XRANGE COUNT 1000, as ``rest_bench.bench_redis``.

CPU: the server's (every broker's, or redis-server's) utime+stime from ``/proc/<pid>/stat`` before and after each
phase, per million records; ZooKeeper is not counted. The client's own CPU share (this process's CPU-seconds over
the phase's wall seconds; near 1.0 means the Python client, not the server, sets the figure) is printed with each
row. The machine is shared and has 2 cores: the load average is printed; compare runs interleaved. Every server
is started and stopped by this script (by pid, also on Ctrl-C or SIGTERM). Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import os
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rest_bench import (
    BINARY_V2,
    IN_FLIGHT,
    JSON_V2,
    KEYS,
    PARTITIONS,
    PER_REQUEST,
    _wait_isr,
    load,
    make_json_values,
    make_values,
    post_all,
    read_rest,
)
from odradek.protocol.records import iter_batch_headers
from odradek_local.cluster import LocalCluster
from odradek_local.processes import ManagedProcess
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """utime+stime of every pid (all its threads), from /proc/<pid>/stat."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of stat(5), counted after the ")"
    return total / _CLK_TCK


@dataclass
class Phase:
    records: int = 0
    seconds: float = 0.0
    server_cpu: float = 0.0
    client_cpu: float = 0.0

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def cpu_per_million(self) -> float:
        return self.server_cpu / self.records * 1e6 if self.records else 0.0

    @property
    def client_share(self) -> float:
        return self.client_cpu / self.seconds if self.seconds else 0.0


@dataclass
class Row:
    name: str
    produce: Phase | None = None
    consume: Phase | None = None


@contextmanager
def measured(phase: Phase, pids: list[int]) -> Iterator[Phase]:
    """Wall, server CPU and this process's CPU over the block; the block sets ``phase.records``."""
    cpu0, own0, t0 = cpu_seconds(pids), time.process_time(), time.perf_counter()
    yield phase
    phase.seconds = time.perf_counter() - t0
    phase.client_cpu = time.process_time() - own0
    phase.server_cpu = cpu_seconds(pids) - cpu0


# --------------------------------------------------------------------------------------------- librdkafka


def librdkafka_produce(bootstrap: str, topic: str, values: list[bytes], acks: str,
                       extra: dict[str, str] | None = None) -> None:
    from confluent_kafka import Producer

    config: dict[str, object] = {"bootstrap.servers": bootstrap, "acks": acks, **(extra or {})}
    failed: list[object] = []
    config["error_cb"] = failed.append
    producer = Producer(config)
    produce, poll = producer.produce, producer.poll
    for v in values:
        while True:
            try:
                produce(topic, v)
                break
            except BufferError:  # the local queue is full (queue.buffering.max.messages): let librdkafka send
                poll(0.005)
        poll(0)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} records not delivered within 120 s (errors: {failed[:3]})")


def librdkafka_consume(bootstrap: str, topic: str, n: int, extra: dict[str, str] | None = None) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-bench", "enable.auto.commit": False,
                         **(extra or {})})
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        count = 0
        deadline = time.monotonic() + 300
        while count < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {count} of {n} in 300 s")
            count += len(consumer.consume(num_messages=10_000, timeout=1.0))
        return count
    finally:
        consumer.close()


def check_delivered(bootstrap: str, topic: str, n: int) -> None:
    """Every record produced is in the log: the partitions' high watermarks add up to n."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafka-bench-check"})
    try:
        total = sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(PARTITIONS))
    finally:
        c.close()
    if total != n:
        raise RuntimeError(f"{topic}: {total} records in the log, {n} produced")


# -------------------------------------------------------------------- librdkafka's own C tool, no Python client

RDKAFKA_PERFORMANCE = Path(__file__).resolve().parent.parent / ".bench" / "bin" / "rdkafka_performance"
_TOOL_RATE = re.compile(rb"(\d+) messages .*?(?:produced|consumed).*? in (\d+)ms: (\d+) msgs/s")


def rdkafka_tool(phase: Phase, mode: str, bootstrap: str, topic: str, n: int, acks: str, pids: list[int]) -> None:
    """One run of librdkafka's examples/rdkafka_performance (scripts/build-rdkafka-performance.sh) as producer
    (``-P``: n records of 100 bytes, keyless, librdkafka's partitioner and batching) or consumer (``-C``: every
    partition from the beginning, queue mode, until n records were read). The tool overrides two of librdkafka's
    defaults for itself (linger.ms=1000, queued.min.messages=1000000); both are set back to the library's (5 ms,
    100,000) so the figure is librdkafka's default configuration. The rate is the tool's own (from the first
    record to the last delivery report or record, as it prints it); the server's CPU is counted over the whole
    run, the tool's CPU (all its threads) from ``RUSAGE_CHILDREN``, both over the tool's span."""
    if mode == "P":
        cmd = ["-P", "-s", "100", "-a", acks, "-X", "linger.ms=5"]
    else:
        cmd = ["-C", "-o", "beginning", "-X", "queued.min.messages=100000"]
        cmd += [a for p in range(PARTITIONS) for a in ("-p", str(p))]
    cmd = [str(RDKAFKA_PERFORMANCE), *cmd, "-t", topic, "-b", bootstrap, "-c", str(n), "-q"]
    own0, cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(pids)
    done = subprocess.run(cmd, capture_output=True, timeout=300)
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    phase.server_cpu = cpu_seconds(pids) - cpu0
    found = _TOOL_RATE.search(done.stdout)
    if done.returncode or found is None or int(found[1]) != n:
        raise RuntimeError(f"rdkafka_performance -{mode} {topic}: exit {done.returncode}: "
                           f"{(done.stdout + done.stderr).decode(errors='replace')[-400:]}")
    phase.records, phase.seconds = n, int(found[2]) / 1000
    phase.client_cpu = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime


# ----------------------------------------------------------------------------- a raw Fetch, no per-record work

_HEADER = struct.Struct(">hhih")  # api key, api version, correlation id, client id length (request header v1)


def _fetch_v4(correlation: int, topic: bytes, offsets: dict[int, int], max_bytes: int) -> bytes:
    body = [_HEADER.pack(1, 4, correlation, 5), b"bench",
            struct.pack(">iiiibi", -1, 500, 1, 64 << 20, 0, 1), struct.pack(">h", len(topic)), topic,
            struct.pack(">i", len(offsets))]
    body += [struct.pack(">iqi", p, o, max_bytes) for p, o in offsets.items()]
    frame = b"".join(body)
    return struct.pack(">i", len(frame)) + frame


def _recv_exactly(sock: socket.socket, n: int) -> memoryview:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        r = sock.recv_into(view[got:])
        if not r:
            raise ConnectionError("the broker closed the connection")
        got += r
    return view


def raw_fetch(address: str, topic: str, n: int) -> int:
    """Read every partition from 0 to its high watermark with Fetch v4 (8 MiB per partition); records counted
    from the batch headers. Returns the count."""
    host, port = address.rsplit(":", 1)
    name = topic.encode()
    offsets = dict.fromkeys(range(PARTITIONS), 0)
    done: set[int] = set()
    count = 0
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        correlation = 0
        while len(done) < PARTITIONS:
            correlation += 1
            sock.sendall(_fetch_v4(correlation, name, {p: o for p, o in offsets.items() if p not in done}, 8 << 20))
            (size,) = struct.unpack(">i", _recv_exactly(sock, 4))
            resp = _recv_exactly(sock, size)
            pos = 8  # correlation id, throttle time
            (topics,) = struct.unpack_from(">i", resp, pos)
            pos += 4
            for _ in range(topics):
                (tlen,) = struct.unpack_from(">h", resp, pos)
                pos += 2 + tlen
                (parts,) = struct.unpack_from(">i", resp, pos)
                pos += 4
                for _ in range(parts):
                    p, error, hw, _lso, aborted = struct.unpack_from(">ihqqi", resp, pos)
                    pos += 26 + max(0, aborted) * 16
                    if error:
                        raise RuntimeError(f"raw fetch of {topic}-{p}: error code {error}")
                    (rlen,) = struct.unpack_from(">i", resp, pos)
                    pos += 4
                    records = resp[pos:pos + max(0, rlen)]
                    pos += max(0, rlen)
                    last = offsets[p]
                    for _, h in iter_batch_headers(records):
                        count += h.record_count
                        last = h.next_offset
                    offsets[p] = last
                    if last >= hw:
                        done.add(p)
    if count != n:
        raise RuntimeError(f"raw fetch read {count} records of {n}")
    return count


# ------------------------------------------------------------------------------------------- Redis Streams


def redis_rows(values: list[bytes], workdir: Path) -> Row | None:
    """rest_bench.bench_redis's workload, with redis-server's CPU measured per phase."""
    if shutil.which("redis-server") is None:
        return None
    try:
        import redis.asyncio as aredis
    except ImportError:
        return None
    port = free_port_block(1)
    proc = ManagedProcess.spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(workdir)], log_path=workdir / "redis.log")
    row = Row("Redis Streams XADD / XRANGE")
    n = len(values)

    async def run() -> None:
        client = aredis.Redis(host="127.0.0.1", port=port, max_connections=IN_FLIGHT + 2)
        for _ in range(200):
            try:
                await client.ping()
                break
            except (aredis.ConnectionError, OSError):
                await asyncio.sleep(0.05)
        queue = list(reversed([(s // PER_REQUEST % PARTITIONS, s) for s in range(0, n, PER_REQUEST)]))

        async def writer() -> None:
            while queue:
                p, s = queue.pop()
                pipe = client.pipeline(transaction=False)
                for i in range(s, min(s + PER_REQUEST, n)):
                    pipe.xadd(f"bench-{p}", {"k": KEYS[i % 1000], "v": values[i]})
                await pipe.execute()

        async def reader(p: int, gate: asyncio.Semaphore) -> int:
            count, start = 0, "-"
            while True:
                async with gate:
                    got = await client.xrange(f"bench-{p}", min=start, count=PER_REQUEST)
                if not got:
                    return count
                count += len(got)
                start = "(" + got[-1][0].decode()

        with measured(Phase(), [proc.pid]) as row.produce:
            await asyncio.gather(*(writer() for _ in range(IN_FLIGHT)))
            row.produce.records = n
        assert sum([await client.xlen(f"bench-{p}") for p in range(PARTITIONS)]) == n
        gate = asyncio.Semaphore(IN_FLIGHT)
        with measured(Phase(), [proc.pid]) as row.consume:
            row.consume.records = sum(await asyncio.gather(*(reader(p, gate) for p in range(PARTITIONS))))
        assert row.consume.records == n
        await client.aclose()

    try:
        asyncio.run(run())
    finally:
        proc.terminate()
    return row


# -------------------------------------------------------------------------------------------------- main


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally blocks stop the servers
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000, help="records for librdkafka and Redis")
    ap.add_argument("--rf-records", type=int, default=None, help="records for the 3-broker row (--records)")
    ap.add_argument("--rest-records", type=int, default=300_000, help="records for the REST rows (slower)")
    ap.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka producer setting beyond the defaults (repeatable), e.g. linger.ms=20")
    ap.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka consumer setting (repeatable), e.g. fetch.queue.backoff.ms=0")
    ap.add_argument("--tool-records", type=int, default=2_000_000,
                    help="records for the rdkafka_performance rows (the C tool; 1M lasts half a second)")
    ap.add_argument("--skip", default="", help="comma list of: kafka, raw, tool, rf3, rest, redis")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    n, m, r, t = args.records, args.rf_records or args.records, args.rest_records, args.tool_records
    if "tool" not in skip and not RDKAFKA_PERFORMANCE.exists():
        skip.add("tool")
        print(f"{RDKAFKA_PERFORMANCE} is not built (scripts/bench-setup.sh): its rows are left out")
    pconf = dict(kv.split("=", 1) for kv in args.producer_config)
    cconf = dict(kv.split("=", 1) for kv in args.consumer_config)
    root = Path(__file__).resolve().parent.parent
    values = make_values(max(n, m, r))
    rows: list[Row] = []
    notes = [f"start: {load()}"]
    gc.collect()
    gc.freeze()  # the inputs stay out of the client's collections (as rest_bench does)

    with tempfile.TemporaryDirectory(prefix="odradek-kafka-bench-", dir=root) as d:
        workdir = Path(d)

        def cluster_of(brokers: int, name: str) -> LocalCluster:
            return LocalCluster(workdir / name, brokers=brokers, base_port=free_port_block(brokers),
                                kafka_base_port=free_port_block(brokers), zookeepers=1,
                                zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000)

        def tool_row(name: str, bootstrap: str, topic: str, acks: str, pids: list[int]) -> Row:
            row = Row(name, Phase(), Phase())
            assert row.produce is not None and row.consume is not None
            rdkafka_tool(row.produce, "P", bootstrap, topic, t, acks, pids)
            check_delivered(bootstrap, topic, t)
            rdkafka_tool(row.consume, "C", bootstrap, topic, t, acks, pids)
            return row

        if not {"kafka", "raw", "tool", "rest"} <= skip:
            cluster = cluster_of(1, "one")
            try:
                cluster.up()
                url, bootstrap = cluster.broker_url(1), cluster.kafka_bootstrap
                assert bootstrap is not None
                pids = [cluster.broker_pid(1) or 0]
                for topic in ("k1", "c1", "rb", "rj"):
                    create_topic(url, topic, PARTITIONS, 1, seen_by=[url])
                if "tool" not in skip:
                    rows.append(tool_row("rdkafka_performance (C), 1 broker, acks=1", bootstrap, "c1", "1", pids))
                if not {"kafka", "raw"} <= skip:
                    row = Row("librdkafka, 1 broker, acks=1")
                    with measured(Phase(), pids) as row.produce:
                        librdkafka_produce(bootstrap, "k1", values[:n], "1", pconf)
                        row.produce.records = n
                    check_delivered(bootstrap, "k1", n)
                    if "kafka" not in skip:
                        with measured(Phase(), pids) as row.consume:
                            row.consume.records = librdkafka_consume(bootstrap, "k1", n, cconf)
                    rows.append(row)
                    if "raw" not in skip:
                        raw = Row("raw Fetch v4 (no per-record work), 1 broker")
                        with measured(Phase(), pids) as raw.consume:
                            raw.consume.records = raw_fetch(bootstrap, "k1", n)
                        rows.append(raw)
                if "rest" not in skip:
                    b64_values = [base64.b64encode(v).decode() for v in values[:r]]
                    b64_keys = [base64.b64encode(k).decode() for k in KEYS]
                    for topic, keys, vals, ctype, label in (
                            ("rb", b64_keys, b64_values, BINARY_V2, "binary (base64)"),
                            ("rj", [k.decode() for k in KEYS], make_json_values(r), JSON_V2, "JSON embedded")):
                        bodies = [(f"{url}/topics/{topic}?acks=1",
                                   orjson.dumps({"records": [{"key": keys[i % 1000], "value": vals[i]}
                                                             for i in range(s, min(s + PER_REQUEST, r))]}), ctype)
                                  for s in range(0, r, PER_REQUEST)]
                        row = Row(f"REST v2 {label}, 1 broker, acks=1")
                        with measured(Phase(), pids) as row.produce:
                            asyncio.run(post_all(bodies))
                            row.produce.records = r
                        del bodies
                        with measured(Phase(), pids) as row.consume:
                            count, _ = asyncio.run(read_rest(url, topic, ctype))
                            row.consume.records = count
                        assert count == r, count
                        rows.append(row)
            finally:
                cluster.down()
            notes.append(f"after the one-broker rows: {load()}")

        if "rf3" not in skip:
            cluster = cluster_of(3, "three")
            try:
                cluster.up()
                urls = [cluster.broker_url(i) for i in (1, 2, 3)]
                bootstrap = cluster.kafka_bootstrap
                assert bootstrap is not None
                pids = [cluster.broker_pid(i) or 0 for i in (1, 2, 3)]
                for topic in ("k3", "c3"):
                    create_topic(urls[0], topic, PARTITIONS, 3, {"min.insync.replicas": "2"}, seen_by=urls)
                _wait_isr(urls[0], ["k3", "c3"])
                if "tool" not in skip:
                    rows.append(tool_row("rdkafka_performance (C), 3 brokers, RF 3, acks=all", bootstrap, "c3",
                                         "-1", pids))
                row = Row("librdkafka, 3 brokers, RF 3, acks=all")
                with measured(Phase(), pids) as row.produce:
                    librdkafka_produce(bootstrap, "k3", values[:m], "all", pconf)
                    row.produce.records = m
                check_delivered(bootstrap, "k3", m)
                with measured(Phase(), pids) as row.consume:
                    row.consume.records = librdkafka_consume(bootstrap, "k3", m, cconf)
                rows.append(row)
            finally:
                cluster.down()
            notes.append(f"after the three-broker row: {load()}")

        if "redis" not in skip:
            redis = redis_rows(values[:n], workdir)
            if redis is None:
                notes.append("Redis Streams: not run (redis-server or redis-py missing; scripts/bench-setup.sh)")
            else:
                rows.append(redis)
        notes.append(f"end: {load()}")

    print(f"distinct random 100-byte values, {PARTITIONS} partitions; librdkafka and Redis {n:,} records "
          f"(3 brokers {m:,}), rdkafka_performance {t:,}, REST {r:,}; librdkafka defaults except acks"
          + "".join(f", {k}={v}" for k, v in {**pconf, **cconf}.items()))
    print("CPU-s/M: the server's CPU-seconds (all brokers, or redis-server) per million records; client: the "
          "client's CPU share of the phase (1.0 = a core; this process, or the C tool with its threads)")
    head = (f"{'path':44} {'produce/s':>11} {'CPU-s/M':>8} {'client':>6}   {'consume/s':>11} {'CPU-s/M':>8} "
            f"{'client':>6}")
    print(head)
    print("-" * len(head))

    def cells(p: Phase | None) -> str:
        if p is None:
            return f"{'-':>11} {'-':>8} {'-':>6}"
        return f"{p.rate:>11,.0f} {p.cpu_per_million:>8.2f} {p.client_share:>6.2f}"

    for row in rows:
        print(f"{row.name:44} {cells(row.produce)}   {cells(row.consume)}")
    for note in notes:
        print(note)


if __name__ == "__main__":
    main()
