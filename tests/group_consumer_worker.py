"""A group consumer in a process of its own, for tests where crashes matter (SIGKILL mid-stream).

``python -m tests.group_consumer_worker BOOTSTRAP GROUP TOPIC OUT [--batch N] [--delay-ms MS]`` appends
``partition offset value`` per record to OUT (one ``os.write`` per batch, O_APPEND) and commits after each batch
has been written: at-least-once, so a crash can repeat at most the batch written but not yet committed. A commit
the group refuses because it moved to a new generation meanwhile (CommitFailedError, a rebalance while the batch
was processed) is what a Kafka application meets too: the batch may come again, to whichever member owns its
partition next; the worker counts it in ``OUT.fenced`` (a line each) and goes on polling. The delay stands for
processing time, so a test can kill the process while it is part-way through the topic.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from odradek import CommitFailedError, GroupConsumer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("out")
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--session-timeout-ms", type=int, default=3000)
    args = p.parse_args(argv)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    consumer = GroupConsumer(args.bootstrap, group_id=args.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", session_timeout_ms=args.session_timeout_ms,
                             heartbeat_interval_ms=300, fetch_max_wait_ms=200)
    consumer.subscribe([args.topic])
    fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    print("ready", flush=True)
    try:
        while not stop:
            batch = consumer.poll(timeout_ms=200, max_records=args.batch)
            lines = [f"{r.partition} {r.offset} {(r.value or b'').decode()}\n" for recs in batch.values()
                     for r in recs]
            if not lines:
                continue
            if args.delay_ms:
                time.sleep(args.delay_ms / 1000.0)  # "processing"
            os.write(fd, "".join(lines).encode())
            try:
                consumer.commit()
            except CommitFailedError as e:
                with open(f"{args.out}.fenced", "a") as fenced:
                    fenced.write(f"{e}\n")
    finally:
        os.close(fd)
        consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
