"""What one replication round with data costs the leader, back to back and spaced as a paced load spaces them.

    .venv/bin/python bench/replica_round_bench.py [--rounds 1500] [--gaps-ms 0,5] [--passes 3]

In process, through the real services (the unit tests' harness, tests/unit/kafka/test_replica_fetch.py): broker 1
leads 6 partitions; each round appends one 50-record batch of 100-byte values to partition 0 (acks=1, on the event
loop as a small append is) and then answers broker 2's incremental Fetch at the old log end through
``KafkaApis.handle`` (decode, session, acknowledgement and high watermark, read, encode). Prints the CPU
microseconds of the append and of the fetch, the median over the rounds of each pass, for each gap between rounds.

Why the gap: on our VMs the same code costs two to four times as much CPU when it runs a few milliseconds after
its process last ran (``--gaps-ms 5``: one round every 5 ms, as a broker's at 10,000 records/s in 50-record
batches) as back to back (``0``), whether the process slept or spun on the clock meanwhile. A cluster's
acks=all round is the cold figure on every broker; compare checkouts by running this from each. Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.rest_bench import KEYS, make_values
from odradek.protocol.records import encode_batch
from tests.unit.kafka.test_apis import CONN
from tests.unit.kafka.test_replica_fetch import EPOCH, Leader, ask, fetch_body, frame


async def rounds(workdir: Path, n: int, gap_s: float) -> tuple[float, float]:
    leader = Leader(workdir, partitions=6)
    apis = await leader.start()
    values = make_values(50)
    data = encode_batch([(KEYS[i], v, int(time.time() * 1000), ()) for i, v in enumerate(values)])
    opened = await ask(apis, 15, fetch_body(15, {p: 0 for p in range(6)}, replica=2, broker_epoch=EPOCH[2],
                                            leader_epoch=4, session=(0, 0)))
    session = leader.sessions.get(opened.session_id)
    assert session is not None
    epoch = session.epoch
    part = leader.parts[0]
    appends, fetches = [], []
    for i in range(n):
        end = part.log_end_offset
        request = frame(15, fetch_body(15, {0: end}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4,
                                       session=(opened.session_id, epoch)))
        if gap_s:
            await asyncio.sleep(gap_s)
        t0 = time.process_time()
        await part.append(bytearray(data), 1, 1000)
        t1 = time.process_time()
        answer = await apis.handle(CONN, request)
        t2 = time.process_time()
        assert answer is not None and len(answer) > len(data), "the fetch did not answer the round's records"
        epoch += 1
        if i >= n // 10:  # the first rounds warm the allocator and the caches of a new process
            appends.append(t1 - t0)
            fetches.append(t2 - t1)
    return statistics.median(appends) * 1e6, statistics.median(fetches) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--gaps-ms", default="0,5")
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    for gap in (float(g) for g in args.gaps_ms.split(",")):
        n = args.rounds if gap == 0 else max(200, args.rounds // 5)
        for p in range(args.passes):
            with tempfile.TemporaryDirectory() as d:
                append_us, fetch_us = asyncio.run(rounds(Path(d), n, gap / 1000))
            print(f"gap {gap:g} ms, pass {p + 1}: append {append_us:.1f} µs, fetch {fetch_us:.1f} µs of CPU "
                  f"(medians of {n - n // 10} rounds)", flush=True)


if __name__ == "__main__":
    main()
