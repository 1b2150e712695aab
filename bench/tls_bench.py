"""Security figures: produce and read throughput with TLS (+ authentication + ACLs) vs plaintext, in one run, on
the REST path (JSON v2 over HTTP, curl-style clients) and on the binary path (the Python client's record batches).

    .venv/bin/python bench/tls_bench.py [--records 20000] [--record-bytes 100] [--brokers 1]

Two clusters on one ZooKeeper node (each in its own chroot): a plaintext one, and a ``--tls`` one (SASL_SSL
listeners, a throwaway CA in a temporary directory, ZooKeeper ACLs). The TLS REST client authenticates with HTTP
Basic (a SCRAM-SHA-256 user; the broker remembers a checked password for a minute, so this is the steady state),
the binary client with its certificate (User:CN=admin). Every process it starts is ended by pid. Prints a table;
it is not a test.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek_local.cluster import LocalCluster
from odradek_local.security import admin_files
from odradek_local.zookeeper import ZkEnsemble
from tests.harness.ports import free_port_block

ROOT = Path(__file__).resolve().parent.parent
DIGEST = "bench:" + uuid.uuid4().hex
V2 = "application/vnd.kafka.json.v2+json"


def connection(url: str, ctx: ssl.SSLContext | None) -> http.client.HTTPConnection:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    if url.startswith("https"):
        return http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    return http.client.HTTPConnection(host, int(port), timeout=60)


def call(conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None,
         headers: dict[str, str]) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def rest_round(url: str, ctx: ssl.SSLContext | None, auth: dict[str, str], topic: str, records: int,
               size: int, per_request: int) -> tuple[float, float | None]:
    """Records/s producing with JSON v2 POSTs of ``per_request`` records, then reading them back by offset."""
    conn = connection(url, ctx)
    value = "x" * size
    body = json.dumps({"records": [{"value": value} for _ in range(per_request)]}).encode()
    headers = {**auth, "Content-Type": V2, "Accept": V2}
    started = time.perf_counter()
    for _ in range(records // per_request):
        status, raw = call(conn, "POST", f"/topics/{topic}/partitions/0?acks=1", body, headers)
        if status != 200:
            raise RuntimeError(f"REST produce: {status} {raw[:200]!r}")
    produce = records / (time.perf_counter() - started)
    started, offset, read = time.perf_counter(), 0, 0
    while read < records:
        status, raw = call(conn, "GET", f"/topics/{topic}/partitions/0/records?offset={offset}&max_bytes=1048576"
                           "&isolation_level=read_uncommitted", None, headers)
        if status != 200:
            conn.close()
            print(f"  (REST read unavailable on this build: {status} {raw[:120]!r})")
            return produce, None
        body = json.loads(raw)
        got = body["records"] if isinstance(body, dict) else body  # {"records": [...], ...} or a bare list
        if not got:
            break
        read += len(got)
        offset = got[-1]["offset"] + 1
    conn.close()
    return produce, read / (time.perf_counter() - started)


def binary_round(bootstrap: str, security: dict[str, str], topic: str, records: int, size: int) -> tuple[float, float]:
    from odradek import Consumer, Producer, TopicPartition

    value = b"x" * size
    with Producer(bootstrap, acks=1, linger_ms=5, batch_size=256 * 1024, enable_idempotence=False,
                  **security) as p:
        started = time.perf_counter()
        futures = [p.send(topic, value, partition=0) for _ in range(records)]
        p.flush()
        for f in futures:
            f.result()
        produce = records / (time.perf_counter() - started)
    consumer = Consumer(bootstrap, fetch_max_bytes=4 << 20, **security)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    started, read = time.perf_counter(), 0
    deadline = time.monotonic() + 120
    while read < records and time.monotonic() < deadline:
        read += sum(len(r) for r in consumer.poll(timeout_ms=1000).values())
    consumer.close()
    return produce, read / (time.perf_counter() - started)


def setup_tls_user(cluster: LocalCluster) -> None:
    env = dict(os.environ, ODRADEK_ZK_DIGEST=DIGEST, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "odradek_tools", "configs", "--zookeeper", cluster.zk_connect, "--alter",
                    "--entity-type", "users", "--entity-name", "bench", "--add-config",
                    "SCRAM-SHA-256=[password=bench-pw]"], env=env, check=True, capture_output=True, timeout=60)
    for op in ("Write", "Read", "Describe"):
        subprocess.run([sys.executable, "-m", "odradek_tools", "acls", "--zookeeper", cluster.zk_connect, "--add",
                        "--allow-principal", "User:bench", "--operation", op, "--topic", "rest-",
                        "--resource-pattern-type", "prefixed"], env=env, check=True, capture_output=True,
                       timeout=60)


def create_topics(cluster: LocalCluster, ctx: ssl.SSLContext | None, names: list[str]) -> None:
    from odradek import AdminClient

    security: dict[str, Any] = admin_files(cluster) if cluster.tls else {}
    admin = AdminClient(cluster.broker_url(1), **security)
    for name in names:
        admin.create_topic(name, partitions=1, replication_factor=1)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: end what we started
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--per-request", type=int, default=500, help="records per REST produce request")
    ap.add_argument("--brokers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2, help="measured rounds per cluster (best kept)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="odradek-tls-bench-") as d:
        ensemble = ZkEnsemble(Path(d) / "zk", size=1, client_port_base=free_port_block(1, span=106))
        clusters: list[LocalCluster] = []
        try:
            ensemble.start(timeout=60)
            for tls in (False, True):
                cluster = LocalCluster(Path(d) / ("tls" if tls else "plain"), brokers=args.brokers,
                                       base_port=free_port_block(args.brokers), ensemble=ensemble,
                                       chroot=f"/bench-{uuid.uuid4().hex[:6]}", tls=tls,
                                       zk_digest=DIGEST if tls else None)
                clusters.append(cluster)
                cluster.up(timeout=60)
            setups = []
            for cluster in clusters:
                ctx = None
                auth: dict[str, str] = {}
                security: dict[str, str] = {}
                if cluster.tls:
                    setup_tls_user(cluster)
                    files = admin_files(cluster)
                    ctx = ssl.create_default_context(cafile=files["ssl_cafile"])
                    auth = {"Authorization": "Basic " + base64.b64encode(b"bench:bench-pw").decode()}
                    security = files
                setups.append((cluster, ctx, auth, security))
            # A warm-up round (not counted), then --rounds rounds alternating the clusters; the best of each.
            best: dict[bool, list[float | None]] = {False: [None] * 4, True: [None] * 4}
            for round_ in range(args.rounds + 1):
                for cluster, ctx, auth, security in setups:
                    records = max(1000, args.records // 10) if round_ == 0 else args.records
                    suffix = f"{round_}"
                    create_topics(cluster, ctx, [f"rest-bench-{suffix}", f"bin-bench-{suffix}"])
                    figs = [*rest_round(cluster.broker_url(1), ctx, auth, f"rest-bench-{suffix}", records,
                                        args.record_bytes, args.per_request),
                            *binary_round(cluster.broker_url(1), security, f"bin-bench-{suffix}", records,
                                          args.record_bytes)]
                    if round_ > 0:
                        best[cluster.tls] = [f if b is None or (f is not None and f > b) else b
                                             for f, b in zip(figs, best[cluster.tls], strict=True)]
            rows = [("plaintext", *best[False]), ("TLS+auth+ACLs", *best[True])]
            mb = args.record_bytes / 1e6
            print(f"\n{args.records} records of {args.record_bytes} B, {args.brokers} broker(s), acks=1, best of "
                  f"{args.rounds} rounds; records/s (MB/s of values)")
            print(f"{'cluster':<15}{'REST produce':>22}{'REST read':>22}{'binary produce':>22}{'binary read':>22}")
            for name, *figs in rows:
                cells = [f"{f:,.0f} ({f * mb:.1f})" if f is not None else "n/a" for f in figs]
                print(f"{name:<15}" + "".join(f"{c:>22}" for c in cells))
            plain, tls = rows
            ratios = [f"{t / p:.2f}" if p and t else "n/a" for p, t in zip(plain[1:], tls[1:], strict=True)]
            print(f"{'TLS/plaintext':<15}" + "".join(f"{r:>22}" for r in ratios))
        finally:
            for cluster in clusters:
                cluster.down()
            ensemble.stop()


if __name__ == "__main__":
    main()
