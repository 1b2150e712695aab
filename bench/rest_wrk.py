"""REST v2 produce and read driven by wrk (a C load generator), so the figures are the broker's and not the
Python client's JSON work (issue 27, point 3), with the broker's CPU-seconds per million records in every row.

    .venv/bin/python bench/rest_wrk.py [--seconds 8] [--records 300000] [--connections 4] [--rounds 1]

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

Every wrk answer must be 200 (a non-2xx count is an error). CPU: the broker's utime+stime from /proc over the
phase, per million records; "client" is wrk's own CPU share (RUSAGE_CHILDREN over the phase). Redis Streams runs
beside it with its own C client, redis-benchmark (XADD pipelines of 1,000 on as many connections, 3x ``--records``
records; XRANGE COUNT 1000), with redis-server's CPU per million records. ``bash scripts/bench-setup.sh`` installs
wrk and Redis (Debian's packages). Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import base64
import gc
import json
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.kafka_bench import cpu_seconds
from bench.rest_bench import BINARY_V2, JSON_V2, KEYS, PARTITIONS, PER_REQUEST, load, make_json_values, make_values
from odradek.protocol.records import iter_batch_headers
from odradek_local.cluster import LocalCluster
from odradek_local.processes import ManagedProcess
from tests.harness.http import create_topic
from tests.harness.ports import free_port_block

READ_MAX_BYTES = 1024 * 1024  # the REST read's default answer size (broker/fetch/service.py DEFAULT_MAX_BYTES)

# wrk's Lua side: the paths (and for produce the body files) are read once per thread, then taken in turn.
_LUA = """
local list, bodies, i = {}, {}, 0
for line in io.lines(os.getenv("WRK_LIST")) do list[#list + 1] = line end
local method = os.getenv("WRK_METHOD")
if method == "POST" then
  for n, name in ipairs(list) do
    local f = assert(io.open(name, "rb")); bodies[n] = f:read("*a"); f:close()
  end
end
wrk.headers[os.getenv("WRK_HEADER")] = os.getenv("WRK_TYPE")
request = function()
  i = i % #list + 1
  if method == "POST" then return wrk.format("POST", os.getenv("WRK_PATH"), nil, bodies[i]) end
  return wrk.format("GET", list[i])
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


def run_wrk(url: str, seconds: int, connections: int, env: dict[str, str], workdir: Path, pid: int,
            records_per_request: float, name: str) -> Result:
    script = workdir / "bench.lua"
    script.write_text(_LUA)
    own0, cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds([pid])
    done = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "30s", "-s", str(script),
                           url], capture_output=True, text=True, timeout=seconds + 60, env=env)
    cpu = cpu_seconds([pid]) - cpu0
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = re.search(r"WRK_RESULT (\d+) (\d+) (\d+) (\d+) (\d+)", done.stdout)
    if done.returncode or found is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout[-500:]} {done.stderr[-500:]}")
    requests, micros, bad_status, socket_errors, timeouts = map(int, found.groups())
    if bad_status or socket_errors or timeouts or requests == 0:
        raise RuntimeError(f"{name}: {requests} requests, {bad_status} not 2xx, {socket_errors} socket errors, "
                           f"{timeouts} timeouts")
    wall = micros / 1e6
    records = requests * records_per_request
    wrk_cpu = own1.ru_utime + own1.ru_stime - own0.ru_utime - own0.ru_stime
    return Result(name, records / wall, cpu / records * 1e6, wrk_cpu / wall, requests)


def read_chain(url: str, topic: str) -> list[tuple[int, int, int]]:
    """(partition, offset, records) of each 1 MiB read from offset 0 to the high watermark, in order."""
    chain = []
    for p in range(PARTITIONS):
        offset = 0
        while True:
            with urllib.request.urlopen(f"{url}/topics/{topic}/partitions/{p}/batches?offset={offset}"
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


def redis_rows(workdir: Path, records: int, connections: int) -> list[Result]:
    """Redis Streams with its own C client, redis-benchmark: XADD of ``k``/``v`` fields (a 100-byte value) in
    pipelines of 1,000 on ``connections`` connections, then ``XRANGE - + COUNT 1000`` on as many; redis-server's
    CPU per million records from /proc. No persistence (``--save "" --appendonly no``)."""
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        return []
    port = free_port_block(1)
    proc = ManagedProcess.spawn(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
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
                                   *command], capture_output=True, text=True, timeout=600)
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
    args = ap.parse_args()
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
        cluster = LocalCluster(workdir / "one", brokers=1, base_port=free_port_block(1), zookeepers=1,
                               zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000)
        try:
            cluster.up()
            url = cluster.broker_url(1)
            pid = cluster.broker_pid(1) or 0
            for topic, _ctype, _keys, _vals in formats.values():
                create_topic(url, topic, PARTITIONS, 1, seen_by=[url])
            for label, (topic, ctype, keys, vals) in formats.items():
                files = []
                for i, s in enumerate(range(0, n, PER_REQUEST)):
                    body = orjson.dumps({"records": [{"key": keys[j % 1000], "value": vals[j]}
                                                     for j in range(s, min(s + PER_REQUEST, n))]})
                    f = workdir / f"{topic}-{i}.json"
                    f.write_bytes(body)
                    files.append(str(f))
                listing = workdir / f"{topic}-bodies.txt"
                listing.write_text("\n".join(files) + "\n")
                env = {"WRK_LIST": str(listing), "WRK_METHOD": "POST", "WRK_PATH": f"/topics/{topic}?acks=1",
                       "WRK_HEADER": "Content-Type", "WRK_TYPE": ctype, "PATH": "/usr/bin:/bin"}
                for _ in range(args.rounds):
                    results.append(run_wrk(url, args.seconds, args.connections, env, workdir, pid, PER_REQUEST,
                                           f"REST v2 produce, {label}, acks=1"))
            for label, (topic, ctype, _keys, _vals) in formats.items():
                chain = read_chain(url, topic)
                listing = workdir / f"{topic}-reads.txt"
                listing.write_text("".join(f"/topics/{topic}/partitions/{p}/records?offset={o}\n"
                                           for p, o, _ in chain))
                per_read = sum(c for _, _, c in chain) / len(chain)
                env = {"WRK_LIST": str(listing), "WRK_METHOD": "GET", "WRK_HEADER": "Accept", "WRK_TYPE": ctype,
                       "PATH": "/usr/bin:/bin"}
                for _ in range(args.rounds):
                    results.append(run_wrk(url, args.seconds, args.connections, env, workdir, pid, per_read,
                                           f"REST v2 read, {label} ({per_read:,.0f} records per read)"))
        finally:
            cluster.down()
        redis = redis_rows(workdir, args.records * 3, args.connections)
        if not redis:
            notes.append("Redis Streams: not run (redis-server or redis-benchmark missing; scripts/bench-setup.sh)")
        results += redis
    notes.append(f"end: {load()}")
    print(f"wrk, one thread, {args.connections} connections, {args.seconds:g} s per phase; one broker, "
          f"{PARTITIONS} partitions, 1,000 records per produce request")
    head = f"{'phase':56} {'records/s':>11} {'CPU-s/M':>8} {'client':>6} {'requests':>9}"
    print(head)
    print("-" * len(head))
    for r in results:
        print(f"{r.name:56} {r.records_per_s:>11,.0f} {r.cpu_per_million:>8.2f} {r.wrk_share:>6.2f} "
              f"{r.requests:>9,}")
    for note in notes:
        print(note)
    print(json.dumps([r.__dict__ for r in results]))


if __name__ == "__main__":
    main()
