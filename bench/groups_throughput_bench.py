"""Consumer-group throughput: records/s read by a group of 1, 2 and 3 members from a 6-partition topic, with the
Python ``GroupConsumer`` and with REST Proxy v2 consumer instances (binary format, one instance per broker).

    .venv/bin/python bench/groups_throughput_bench.py [--records 60000] [--value-bytes 100]

Every member is a process of its own (so members do not share a GIL) and every run uses a fresh group, reading
the topic from the beginning. The figure is records / (time of the group's last record - time of its first), so
the join and the first rebalance are left out; the time from start to first record is printed too. A 3-broker
cluster with its own ZooKeeper ensemble is started and stopped by this script. Prints a table; not a test.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import signal
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from odradek import AdminClient, GroupConsumer, Producer
from odradek_local.cluster import LocalCluster
from tests.harness.ports import free_port_block

PARTITIONS = 6
V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"


def python_member(bootstrap: str, group: str, topic: str, total: Any, first: Any, last: Any, target: int) -> None:
    c = GroupConsumer(bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=True,
                      session_timeout_ms=10_000, fetch_max_wait_ms=200)
    c.subscribe([topic])
    try:
        while total.value < target:
            n = sum(len(r) for r in c.poll(timeout_ms=200, max_records=2000).values())
            if n:
                now = time.monotonic()
                with total.get_lock():
                    total.value += n
                    if first.value == 0:
                        first.value = now
                    last.value = now
    finally:
        c.close()


def _http(method: str, url: str, body: Any = None, accept: str = V2) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": V2, "Accept": accept})
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def rest_member(broker_url: str, group: str, topic: str, total: Any, first: Any, last: Any, target: int) -> None:
    created = _http("POST", f"{broker_url}/consumers/{group}", {"format": "binary", "auto.offset.reset": "earliest"})
    base = created["base_uri"]
    _http("POST", f"{base}/subscription", {"topics": [topic]})
    try:
        while total.value < target:
            records = _http("GET", f"{base}/records?timeout=500&max_bytes=4000000", accept=BINARY_V2)
            if records:
                now = time.monotonic()
                with total.get_lock():
                    total.value += len(records)
                    if first.value == 0:
                        first.value = now
                    last.value = now
    finally:
        _http("DELETE", base)


def run_group(kind: str, members: int, urls: list[str], topic: str, target: int) -> tuple[float, float]:
    ctx = mp.get_context("fork")
    total, first, last = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Value("d", 0.0)
    group = f"bench-{kind}-{members}-{uuid.uuid4().hex[:6]}"
    procs = []
    started = time.monotonic()
    for i in range(members):
        if kind == "python":
            args = (",".join(urls), group, topic, total, first, last, target)
            procs.append(ctx.Process(target=python_member, args=args))
        else:
            procs.append(ctx.Process(target=rest_member, args=(urls[i % len(urls)], group, topic, total, first,
                                                               last, target)))
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
        if p.is_alive():
            p.kill()
            p.join()
    span = max(1e-9, last.value - first.value)
    return total.value / span, first.value - started


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally below: end what we started
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=60_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    args = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="odradek-groups-", dir=root) as d:
        cluster = LocalCluster(Path(d), brokers=3, base_port=free_port_block(3), zookeepers=1,
                               zk_base_port=free_port_block(1, span=102))
        try:
            cluster.up()
            urls = [cluster.broker_url(b) for b in cluster.slots]
            topic = "groups-bench"
            with AdminClient(urls[0]) as admin:
                admin.create_topic(topic, partitions=PARTITIONS, replication_factor=1)
                deadline = time.monotonic() + 15
                while not all(p.leader >= 0 for p in admin.describe_topic(topic).partitions):
                    assert time.monotonic() < deadline, "no leaders"
                    time.sleep(0.05)
            value = b"x" * args.value_bytes
            with Producer(",".join(urls), acks="1", linger_ms=5) as producer:
                for i in range(args.records):
                    producer.send(topic, value, partition=i % PARTITIONS)
                producer.flush()
            print(f"{args.records:,} records of {args.value_bytes} bytes on {PARTITIONS} partitions, 3 brokers")
            print(f"{'consumer':<28}{'members':>8}{'records/s':>14}{'start->first record':>22}")
            for kind in ("python", "rest"):
                for members in (1, 2, 3):
                    rate, startup = run_group(kind, members, urls, topic, args.records)
                    label = "GroupConsumer (Python)" if kind == "python" else "REST v2 instance (binary)"
                    print(f"{label:<28}{members:>8}{rate:>14,.0f}{startup:>20.2f} s", flush=True)
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
