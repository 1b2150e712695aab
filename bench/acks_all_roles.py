"""acks=all RF 3 with one leader: what each role costs per request, the leader's event loop against a follower's.

    .venv/bin/python bench/acks_all_roles.py [--rate 200] [--seconds 5] [--runs 3] [--records-per-request 50]

A 3-broker cluster (one ZooKeeper node) and a 6-partition RF 3 topic (min.insync.replicas 2) whose partitions
broker 1 all leads (replica assignments 1,2,3 and 1,3,2), so broker 1 does only a leader's work and brokers 2 and
3 only a follower's. Binary produce of ``--records-per-request`` records at ``--rate`` requests/s, acks=all, paced
as bench/acks_all_load.py's (bench/rest_bench.py's latency phase), after a warm-up phase. Prints per run: p50 and
p99, and for each broker the CPU of its event-loop thread and of its other threads (ZooKeeper's, the storage
threads') in microseconds per request, from ``/proc/<pid>/task``. The loop's share is issue 25's chain: the
leader's is the produce and its two followers' fetches; a follower's, one fetch answer, its append and its next
fetch. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rest_bench import PARTITIONS, _wait_isr, latency, leaders_of  # noqa: E402
from odradek_local.cluster import LocalCluster  # noqa: E402
from tests.harness.http import request  # noqa: E402
from tests.harness.ports import free_port_block  # noqa: E402

USER_HZ = 100


def thread_ticks(pid: int) -> dict[str, int]:
    """utime + stime of each thread of ``pid``, by thread id."""
    out: dict[str, int] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue  # a thread that ended meanwhile
        out[task.name] = int(fields[11]) + int(fields[12])
    return out


def create_led_by_one(url: str, topic: str) -> None:
    status, clusters, _ = request("GET", f"{url}/v3/clusters")
    assert status == 200, clusters
    cid = clusters["data"][0]["cluster_id"]
    body = {"topic_name": topic,
            "replicas_assignments": [{"partition_id": p, "broker_ids": [1, 2, 3] if p % 2 == 0 else [1, 3, 2]}
                                     for p in range(PARTITIONS)],
            "configs": [{"name": "min.insync.replicas", "value": "2"}]}
    status, created, _ = request("POST", f"{url}/v3/clusters/{cid}/topics", body)
    assert status == 201, created


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=200, help="requests per second")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records-per-request", type=int, default=50)
    args = ap.parse_args()
    per = args.records_per_request
    with tempfile.TemporaryDirectory(prefix="odradek-acks-roles-", dir=ROOT) as d:
        cluster = LocalCluster(Path(d) / "c", brokers=3, base_port=free_port_block(3), zookeepers=1,
                               zk_base_port=free_port_block(1, span=106), tick_ms=500, session_timeout_ms=4000,
                               broker_args=["--replica-fetch-transport", "kafka"])
        try:
            cluster.up()
            urls = [cluster.broker_url(i) for i in (1, 2, 3)]
            create_led_by_one(urls[0], "lat")
            time.sleep(2)
            _wait_isr(urls[0], ["lat"], timeout=120.0)
            leaders = leaders_of(urls[0], "lat")
            assert set(leaders.values()) == {urls[0]}, leaders
            pids = [cluster.broker_pid(i) or 0 for i in (1, 2, 3)]
            asyncio.run(latency(leaders, "lat", args.rate * per, 3.0, per, "all"))  # warm-up
            leader_loops: list[float] = []
            for _ in range(args.runs):
                before = [thread_ticks(p) for p in pids]
                lat = asyncio.run(latency(leaders, "lat", args.rate * per, args.seconds, per, "all",
                                          warmup_s=0.01))
                after = [thread_ticks(p) for p in pids]
                n = len(lat)
                parts = []
                for i, pid in enumerate(pids):
                    main_thread = str(pid)
                    loop_us = (after[i].get(main_thread, 0) - before[i].get(main_thread, 0)) * 1e6 / USER_HZ / n
                    all_us = (sum(after[i].values()) - sum(before[i].values())) * 1e6 / USER_HZ / n
                    parts.append(f"broker {i + 1} ({'leader' if i == 0 else 'follower'}): loop {loop_us:,.0f}, "
                                 f"other threads {all_us - loop_us:,.0f}")
                    if i == 0:
                        leader_loops.append(loop_us)
                print(f"{n} requests, p50 {lat[n // 2] * 1000:.2f} ms, p99 {lat[int(n * 0.99)] * 1000:.2f} ms; "
                      f"µs of CPU per request: " + "; ".join(parts), flush=True)
            print(f"the leader's loop: median {statistics.median(leader_loops):,.0f} µs per request")
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
