"""A confluent-kafka group consumer in a process of its own, for tests where a member must die without a word
(SIGKILL: no LeaveGroup, no commit), so the coordinator learns of it only when its session times out.

``python -m tests.kafka_consumer_worker BOOTSTRAP GROUP TOPIC [--session-timeout-ms MS]`` subscribes and polls
forever, printing ``assigned P1,P2,...`` on stdout (flushed) after every change of its assignment, so the test
sees when it has joined and what it holds.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from confluent_kafka import Consumer


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--session-timeout-ms", type=int, default=6000)
    args = p.parse_args(argv)
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group,
                         "session.timeout.ms": args.session_timeout_ms, "heartbeat.interval.ms": 500,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "partition.assignment.strategy": "range"})
    held: set[int] = set()

    def report() -> None:
        print("assigned " + ",".join(str(p) for p in sorted(held)), flush=True)

    def on_assign(c: Any, partitions: list[Any]) -> None:
        held.clear()
        held.update(tp.partition for tp in partitions)
        report()

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        held.clear()
        report()

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    while True:
        consumer.poll(0.2)


if __name__ == "__main__":
    sys.exit(main())
