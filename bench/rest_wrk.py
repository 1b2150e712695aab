"""REST v2 produce and read driven by wrk (a C load generator), so the figures are the broker's and not the
Python client's JSON work (issue 27, point 3), with the broker's CPU-seconds per million records in every row.

    .venv/bin/python bench/rest_wrk.py [--seconds 8] [--records 300000] [--connections 4] [--rounds 1]
                                       [--brokers 1] [--skip-redis]

One broker, 6 partitions, the requests of bench/rest_bench.py: 1,000 records per request (distinct random 100-byte
values, keys ``k<i mod 1000>``), ``POST /topics/{t}`` with acks=1 in the binary (base64) and JSON embedded formats,
and ``GET /topics/{t}/partitions/{p}/records`` answers of the default 1 MiB in both formats. ``--connections``
requests are in flight (one per connection, 4 by default as rest_bench's client keeps) from one wrk thread.

* produce: ``--records`` records are made into request bodies before timing; wrk sends them in turn for
  ``--seconds`` (the bodies repeat once all were sent: the broker's work per request is the same).
* read: after the produce phases, every partition's chain of reads from offset 0 (each read's offset is where the
  previous answer ended: walked first over ``GET .../batches``, which reads the same range for the same
  ``max_bytes``) becomes wrk's list of paths, taken in turn for ``--seconds`` (page cache warm, as for a consumer
  at the tail). Records per read are the chain's average.

``--brokers N`` runs N brokers on this host with the partitions' leaders spread over them (how a deployment uses
more cores than one broker's event loop): each broker gets its own wrk with ``--connections`` of its own, its
partitions' reads, and produce bodies that hold one partition's records each (``POST /topics/{t}/partitions/{p}``
at the leader, partitioned by the keys' murmur2 as the broker would; with one broker the bodies go to
``POST /topics/{t}`` instead, unless ``--per-partition``). Rates add up over the wrk processes; CPU over every broker.

Every wrk answer must be 200 (a non-2xx count is an error). CPU: the broker's utime+stime from /proc over the
phase, per million records; "client" is wrk's own CPU share (RUSAGE_CHILDREN over the phase). Redis Streams runs
beside it with its own C client, redis-benchmark (XADD pipelines of 1,000 on as many connections, 3x ``--records``
records; XRANGE COUNT 1000), with redis-server's CPU per million records. ``bash scripts/bench-setup.sh`` installs
wrk and Redis (Debian's packages). Prints a table, and what a page-cache write cost before and after the run
(bench/page_cache_probe.py: on our VMs it moves the produce rows by up to 0.2 CPU-s/M); not a test.

``--pin`` runs the broker on the last CPU (``--cpu-affinity``) and wrk on the others, and Redis the same way
(redis-server on that CPU, redis-benchmark on the others): on our VMs a wake-up across CPUs (the event loop
handing an append to a storage thread and taking its result back) costs several times one on the same CPU.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka_bench import cpu_seconds
from bench.page_cache_probe import probe
from bench.rest_bench import (
    BINARY_V2,
    JSON_V2,
    KEYS,
    PARTITIONS,
    PER_REQUEST,
    leaders_of,
    load,
    make_json_values,
    make_values,
)
from odradek.protocol.partitioner import murmur2, to_positive
from odradek.protocol.records import iter_batch_headers
from odradek_local.cluster import LocalCluster
from odradek_local.processes import ManagedProcess
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block

READ_MAX_BYTES = 1024 * 1024  # the REST read's default answer size (broker/fetch/service.py DEFAULT_MAX_BYTES)

# wrk's Lua side: the paths (and for produce the body files) are read once per thread, then taken in turn.
_LUA = """
local reqs, i = {}, 0
for line in io.lines(os.getenv("WRK_LIST")) do
  local method, path, file = line:match("^(%S+) (%S+) ?(%S*)$")
  local body = nil
  if file ~= "" then local f = assert(io.open(file, "rb")); body = f:read("*a"); f:close() end
  reqs[#reqs + 1] = {method, path, body}
end
wrk.headers[os.getenv("WRK_HEADER")] = os.getenv("WRK_TYPE")
request = function()
  i = i % #reqs + 1
  return wrk.format(reqs[i][1], reqs[i][2], nil, reqs[i][3])
end
done = function(summary, latency, requests)
  io.write(string.format("WRK_RESULT %d %d %d %d %d\\n", summary.requests, summary.duration,
    summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write,
    summary.errors.timeout))
end
"""


@dataclass
class Result:
    name: str
    records_per_s: float
    cpu_per_million: float
    wrk_share: float
    requests: int


@dataclass
class Load:
    """One wrk process's share of a phase: its broker, its request lines ("METHOD path [body file]") and the
    records each request carries on average."""
    url: str
    lines: list[str]
    records_per_request: float


def _on_cpus(cpus: set[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` running the child on ``cpus`` (None: anywhere)."""
    return None if cpus is None else (lambda: os.sched_setaffinity(0, cpus))


def run_wrk(loads: list[Load], seconds: int, connections: int, header: str, ctype: str, workdir: Path,
            pids: list[int], name: str, client_cpus: set[int] | None = None) -> Result:
    """One wrk per load, all at once for ``seconds`` (on ``client_cpus``, if given); records/s and CPU summed
    over them and every broker."""
    script = workdir / "bench.lua"
    script.write_text(_LUA)
    own0, cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(pids)
    procs = []
    for i, load_ in enumerate(loads):
        listing = workdir / f"wrk-{i}.txt"
        listing.write_text("\n".join(load_.lines) + "\n")
        env = {"WRK_LIST": str(listing), "WRK_HEADER": header, "WRK_TYPE": ctype, "PATH": "/usr/bin:/bin"}
        procs.append(subprocess.Popen(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s",
                                       "-s", str(script), load_.url], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env,
                                      preexec_fn=_on_cpus(client_cpus)))
    outs = [p.communicate(timeout=seconds + 60) for p in procs]
    cpu = cpu_seconds(pids) - cpu0
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    records, rate, total_requests, wall_max = 0.0, 0.0, 0, 0.0
    for load_, proc, (out, err) in zip(loads, procs, outs, strict=True):
        found = re.search(r"WRK_RESULT (\d+) (\d+) (\d+) (\d+) (\d+)", out)
        if proc.returncode or found is None:
            raise RuntimeError(f"wrk failed ({proc.returncode}): {out[-500:]} {err[-500:]}")
        requests, micros, bad_status, socket_errors, timeouts = map(int, found.groups())
        if bad_status or socket_errors or timeouts or requests == 0:
            raise RuntimeError(f"{name}: {requests} requests, {bad_status} not 2xx, {socket_errors} socket "
                               f"errors, {timeouts} timeouts")
        n = requests * load_.records_per_request
        records += n
        rate += n / (micros / 1e6)
        total_requests += requests
        wall_max = max(wall_max, micros / 1e6)
    wrk_cpu = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
    return Result(name, rate, cpu / records * 1e6, wrk_cpu / wall_max, total_requests)


def read_chain(leaders: dict[int, str], topic: str) -> list[tuple[int, int, int]]:
    """(partition, offset, records) of each 1 MiB read from offset 0 to the high watermark, in order."""
    chain = []
    for p in range(PARTITIONS):
        offset = 0
        while True:
            with urllib.request.urlopen(f"{leaders[p]}/topics/{topic}/partitions/{p}/batches?offset={offset}"
                                        f"&max_bytes={READ_MAX_BYTES}") as resp:
                data, hw = resp.read(), int(resp.headers["Odradek-High-Watermark"])
            end = offset
            for _, h in iter_batch_headers(data):
                end = min(h.next_offset, hw)
            if end <= offset:
                break
            chain.append((p, offset, end - offset))
            offset = end
            if offset >= hw:
                break
    return chain


def produce_loads(workdir: Path, topic: str, keys: list[str], vals: list[str], leaders: dict[int, str],
                  per_partition: bool = False) -> list[Load]:
    """The produce requests of bodies of 1,000 records. One broker: ``POST /topics/{t}`` (the broker partitions
    by key, as for a REST Proxy client). Several: each body holds one partition's records (partitioned by the
    keys' murmur2, as the broker would) and goes to ``POST /topics/{t}/partitions/{p}`` at that partition's
    leader, as a partition-aware client sends them (no broker forwards another's records)."""
    n = len(vals)
    brokers = sorted(set(leaders.values()))
    if len(brokers) == 1 and not per_partition:
        lines = []
        for i, s in enumerate(range(0, n, PER_REQUEST)):
            f = workdir / f"{topic}-{i}.json"
            f.write_bytes(orjson.dumps({"records": [{"key": keys[j % 1000], "value": vals[j]}
                                                    for j in range(s, min(s + PER_REQUEST, n))]}))
            lines.append(f"POST /topics/{topic}?acks=1 {f}")
        return [Load(brokers[0], lines, PER_REQUEST)]
    by_part: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for j in range(n):
        by_part[to_positive(murmur2(KEYS[j % 1000])) % PARTITIONS].append(j)
    per_broker: dict[str, list[str]] = {b: [] for b in brokers}
    counts: dict[str, list[int]] = {b: [] for b in brokers}
    for p, rows in by_part.items():
        for i, s in enumerate(range(0, len(rows), PER_REQUEST)):
            chunk = rows[s:s + PER_REQUEST]
            f = workdir / f"{topic}-p{p}-{i}.json"
            f.write_bytes(orjson.dumps({"records": [{"key": keys[j % 1000], "value": vals[j]} for j in chunk]}))
            per_broker[leaders[p]].append(f"POST /topics/{topic}/partitions/{p}?acks=1 {f}")
            counts[leaders[p]].append(len(chunk))
    return [Load(b, per_broker[b], sum(counts[b]) / len(counts[b])) for b in brokers]


def read_loads(leaders: dict[int, str], topic: str) -> tuple[list[Load], float]:
    """Each partition's chain of 1 MiB reads, at its leader (one wrk per broker); and records per read overall."""
    chain = read_chain(leaders, topic)
    loads = []
    for b in sorted(set(leaders.values())):
        mine = [(p, o, c) for p, o, c in chain if leaders[p] == b]
        loads.append(Load(b, [f"GET /topics/{topic}/partitions/{p}/records?offset={o}" for p, o, _ in mine],
                          sum(c for _, _, c in mine) / len(mine)))
    return loads, sum(c for _, _, c in chain) / len(chain)


def redis_rows(workdir: Path, records: int, connections: int, server_cpu: int | None = None,
               client_cpus: set[int] | None = None) -> list[Result]:
    """Redis Streams with its own C client, redis-benchmark: XADD of ``k``/``v`` fields (a 100-byte value) in
    pipelines of 1,000 on ``connections`` connections, then ``XRANGE - + COUNT 1000`` on as many; redis-server's
    CPU per million records from /proc. No persistence (``--save "" --appendonly no``). With ``server_cpu``,
    redis-server runs on that CPU and redis-benchmark on ``client_cpus``, as ``--pin`` places the broker and wrk."""
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        return []
    port = free_port_block(1)
    pinned = [] if server_cpu is None else ["taskset", "-c", str(server_cpu)]
    proc = ManagedProcess.spawn([*pinned, "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", str(workdir)], log_path=workdir / "redis.log")
    out = []
    try:
        for _ in range(200):
            if subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
        value = "x" * 88 + "__rand_int__"  # 100 bytes: redis-benchmark puts 12 random digits in the placeholder
        for name, n, per_request, command in (
                ("Redis Streams XADD, pipelines of 1,000 (redis-benchmark)", records, 1,
                 ["-r", "100000000", "-P", str(PER_REQUEST), "XADD", "bench", "*", "k", "k__rand_int__", "v", value]),
                ("Redis Streams XRANGE COUNT 1000 (redis-benchmark)", max(1, records // PER_REQUEST), PER_REQUEST,
                 ["XRANGE", "bench", "-", "+", "COUNT", str(PER_REQUEST)])):
            own0, cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds([proc.pid])
            done = subprocess.run(["redis-benchmark", "-p", str(port), "-q", "-c", str(connections), "-n", str(n),
                                   *command], capture_output=True, text=True, timeout=600,
                                  preexec_fn=_on_cpus(client_cpus))
            cpu = cpu_seconds([proc.pid]) - cpu0
            own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            found = re.search(r"([\d.]+) requests per second", done.stdout.rsplit("\r", 1)[-1])
            if done.returncode or found is None:
                raise RuntimeError(f"redis-benchmark failed: {done.stdout[-300:]} {done.stderr[-300:]}")
            rate = float(found[1]) * per_request
            wall = n * per_request / rate
            client = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
            out.append(Result(name, rate, cpu / (n * per_request) * 1e6, client / wall, n))
    finally:
        proc.terminate()
    return out


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--records", type=int, default=300_000, help="distinct records made into produce bodies")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=1, help="each phase this many times (one cluster)")
    ap.add_argument("--brokers", type=int, default=1,
                    help="brokers on this host; the partitions' leaders spread over them, one wrk per broker")
    ap.add_argument("--per-partition", action="store_true",
                    help="produce bodies of one partition's records to its leader even with one broker")
    ap.add_argument("--skip-redis", action="store_true")
    ap.add_argument("--pin", action="store_true",
                    help="one broker on the last CPU (--cpu-affinity) and wrk on the others; Redis the same way")
    args = ap.parse_args()
    if args.pin and args.brokers != 1:
        ap.error("--pin places one broker (--brokers 1)")
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[-1] if args.pin and len(cpus) > 1 else None
    client_cpus = set(cpus[:-1]) if server_cpu is not None else None
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (bash scripts/bench-setup.sh)")
    n = args.records
    values = make_values(n)
    formats = {
        "binary (base64)": ("rb", BINARY_V2, [base64.b64encode(k).decode() for k in KEYS],
                            [base64.b64encode(v).decode() for v in values]),
        "JSON embedded": ("rj", JSON_V2, [k.decode() for k in KEYS], make_json_values(n)),
    }
    gc.collect()
    gc.freeze()
    root = Path(__file__).resolve().parent.parent
    results: list[Result] = []
    notes = [f"start: {load()}"]
    with tempfile.TemporaryDirectory(prefix="odradek-wrk-", dir=root) as d:
        workdir = Path(d)
        notes.append(f"before: {probe(workdir, 512)}")
        b = args.brokers
        cluster = LocalCluster(workdir / "cluster", brokers=b, base_port=free_port_block(b), zookeepers=1,
                               zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                               broker_args=[] if server_cpu is None else ["--cpu-affinity", str(server_cpu)])
        where = ("one broker" if b == 1 else f"{b} brokers (one wrk each)") + \
            (", per partition" if b > 1 or args.per_partition else "") + \
            (f", broker on CPU {server_cpu}" if server_cpu is not None else "")
        try:
            cluster.up()
            urls = [cluster.broker_url(i) for i in range(1, b + 1)]
            pids = [cluster.broker_pid(i) or 0 for i in range(1, b + 1)]
            for topic, _ctype, _keys, _vals in formats.values():
                create_topic(urls[0], topic, PARTITIONS, 1, seen_by=urls)
            for label, (topic, ctype, keys, vals) in formats.items():
                loads = produce_loads(workdir, topic, keys, vals, leaders_of(urls[0], topic), args.per_partition)
                for _ in range(args.rounds):
                    results.append(run_wrk(loads, args.seconds, args.connections, "Content-Type", ctype, workdir,
                                           pids, f"REST v2 produce, {label}, acks=1, {where}", client_cpus))
            for label, (topic, ctype, _keys, _vals) in formats.items():
                loads, per_read = read_loads(leaders_of(urls[0], topic), topic)
                for _ in range(args.rounds):
                    results.append(run_wrk(loads, args.seconds, args.connections, "Accept", ctype, workdir, pids,
                                           f"REST v2 read, {label}, {where} ({per_read:,.0f} per read)",
                                           client_cpus))
        finally:
            cluster.down()
        if not args.skip_redis:
            redis = redis_rows(workdir, args.records * 3, args.connections, server_cpu, client_cpus)
            if not redis:
                notes.append("Redis Streams: not run (redis-server or redis-benchmark missing; "
                             "scripts/bench-setup.sh)")
            results += redis
        notes.append(f"after: {probe(workdir, 512)}")
    notes.append(f"end: {load()}")
    print(f"wrk, one thread and {args.connections} connections per broker, {args.seconds:g} s per phase; "
          f"{args.brokers} broker(s), {PARTITIONS} partitions, 1,000 records per produce request")
    head = f"{'phase':64} {'records/s':>11} {'CPU-s/M':>8} {'client':>6} {'requests':>9}"
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r.name:64} {r.records_per_s:>11,.0f} {r.cpu_per_million:>8.2f} {r.wrk_share:>6.2f} "
              f"{r.requests:>9,}")
    for note in notes:
        print(note)
    print(json.dumps([r.__dict__ for r in results]))


if __name__ == "__main__":
    main()
