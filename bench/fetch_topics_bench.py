"""What a replica's Fetch costs the leader: per topic in the cluster, and per partition in its session.

    .venv/bin/python bench/fetch_topics_bench.py [--topics 0,1000,10000] [--partitions 2] [--requests 2000]
                                                 [--max-wait-ms 0]

Replicas fetch by topic id (Fetch v15) every round, so any per-request work over all the cluster's topics, or over
all the partitions of the session, is paid on every replication round. This runs the leader side of one replica
fetch session in process, through ``KafkaApis.handle`` with the real fetch, follower-fetch and partition services
on real logs (the unit tests' harness, tests/unit/kafka/test_replica_fetch.py): broker 1 leads ``--partitions``
partitions of t (all idle after the first fetch), the cache holds ``--topics`` other topics as well, and broker 2
sends ``--requests`` incremental fetches at the log end. Their max wait is 0 unless ``--max-wait-ms``: then each
also waits that long on its idle partitions, as a follower's long-poll does, and its CPU includes the wait's
bookkeeping. Prints the event loop's CPU microseconds per request for each topic count and session size. Not a
test: compare checkouts by running it from each.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.unit.kafka.test_apis import CONN
from tests.unit.kafka.test_replica_fetch import EPOCH, Leader, ask, fetch_body, frame, other_topics
from tests.unit.replication.fakes import batch


async def per_request_us(workdir: Path, topics: int, requests: int, partitions: int = 2,
                         max_wait_ms: int = 0) -> float:
    leader = Leader(workdir, partitions=partitions)
    apis = await leader.start()
    leader.cache.topics = {**other_topics(topics), "t": leader.cache.topics["t"]}
    await leader.parts[0].append(batch(3), acks=1, timeout_ms=1000)
    offsets = {0: 3} | {p: 0 for p in range(1, partitions)}  # each at its log end: every partition idle after
    opened = await ask(apis, 15, fetch_body(15, offsets, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                            session=(0, 0)))
    session = leader.sessions.get(opened.session_id)
    assert session is not None
    first = session.epoch
    frames = [frame(15, fetch_body(15, {}, replica=2, broker_epoch=EPOCH[2], session=(opened.session_id, epoch),
                                   max_wait_ms=max_wait_ms) | {"topics": ()})
              for epoch in range(first, first + 3 * requests)]
    best = float("inf")
    for i in range(3):
        started = time.process_time()
        for request in frames[i * requests:(i + 1) * requests]:
            assert await apis.handle(CONN, request) is not None
        best = min(best, (time.process_time() - started) / requests * 1e6)
    assert session.epoch == first + 3 * requests, "a request was refused (the session's epoch did not move)"
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", default="0,1000,10000")
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--partitions", default="2", help="the session's partitions (all idle), one figure each")
    ap.add_argument("--max-wait-ms", type=int, default=0,
                    help="each fetch's max wait: above 0 it waits on all its (idle) partitions for that long")
    args = ap.parse_args()
    for parts in (int(x) for x in args.partitions.split(",")):
        for n in (int(x) for x in args.topics.split(",")):
            with tempfile.TemporaryDirectory() as d:
                us = asyncio.run(per_request_us(Path(d), n, args.requests, parts, args.max_wait_ms))
            print(f"{n:>6} other topics in the cluster, {parts:>5} partitions in the session: {us:8.1f} µs of CPU "
                  f"per replica fetch request (best of 3 x {args.requests})", flush=True)


if __name__ == "__main__":
    main()
