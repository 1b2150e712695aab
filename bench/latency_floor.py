"""Where the acks=all latency figure starts: the same paced client against RF 1 acks=1, RF 3 acks=1 and RF 3 acks=all.

    .venv/bin/python bench/latency_floor.py [--rate 200] [--seconds 5] [--runs 2] [--records-per-request 50]

One 3-broker cluster (one ZooKeeper node), a 6-partition topic at RF 1 and one at RF 3 (min.insync.replicas 2),
and bench/rest_bench.py's latency phase (binary produce of ``--records-per-request`` records at ``--rate``
requests/s, paced, after a second of warm-up) against each in turn, ``--runs`` times. RF 1 acks=1 is what the
client and one broker's produce cost by themselves: the floor under issue 25's p50 (RF 3 acks=all at 10,000
records/s). Prints p50, p90 and p99 and the three brokers' CPU per request (utime+stime from /proc). Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.acks_all_load import three_brokers, ticks  # noqa: E402
from bench.rest_bench import PARTITIONS, _wait_isr, latency, leaders_of  # noqa: E402
from odradek_local.cluster import LocalCluster  # noqa: E402
from tests.harness.http import create_topic  # noqa: E402


@contextlib.contextmanager
def rf1_rf3(workdir: Path, transport: str | None = None) -> Iterator[tuple[LocalCluster, list[str], list[int]]]:
    """A started :func:`three_brokers` cluster with a topic of PARTITIONS partitions at RF 1 (``rf1``) and one at
    RF 3 with min.insync.replicas 2 (``rf3``, its ISR full): the cluster, its brokers' URLs and pids; stopped
    after."""
    cluster = three_brokers(workdir, transport)
    try:
        cluster.up()
        urls = [cluster.broker_url(i) for i in (1, 2, 3)]
        create_topic(urls[0], "rf1", PARTITIONS, 1, {}, seen_by=urls)
        create_topic(urls[0], "rf3", PARTITIONS, 3, {"min.insync.replicas": "2"}, seen_by=urls)
        _wait_isr(urls[0], ["rf3"], timeout=120.0)
        yield cluster, urls, [cluster.broker_pid(i) or 0 for i in (1, 2, 3)]
    finally:
        cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=200, help="requests per second")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--records-per-request", type=int, default=50)
    args = ap.parse_args()
    per = args.records_per_request
    with tempfile.TemporaryDirectory(prefix="odradek-floor-", dir=ROOT) as d, rf1_rf3(Path(d)) as (_, urls, pids):
        for _ in range(args.runs):
            for topic, acks in (("rf1", "1"), ("rf3", "1"), ("rf3", "all")):
                marks: list[int] = []
                lat = asyncio.run(latency(leaders_of(urls[0], topic), topic, args.rate * per, args.seconds, per,
                                          acks, on_start=lambda: marks.append(ticks(pids))))  # noqa: B023
                n = len(lat)
                print(f"{topic.upper()} acks={acks:3} {args.rate} req/s: {n} requests, p50 "
                      f"{lat[n // 2] * 1000:.2f} ms, p90 {lat[int(n * 0.9)] * 1000:.2f} ms, p99 "
                      f"{lat[int(n * 0.99)] * 1000:.2f} ms, brokers' CPU "
                      f"{(ticks(pids) - marks[0]) / 100 / n * 1e6:,.0f} µs per request", flush=True)


if __name__ == "__main__":
    main()
