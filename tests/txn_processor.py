"""A transactional consume-transform-produce processor in a process of its own, for crash tests (SIGKILL).

``python -m tests.txn_processor BOOTSTRAP GROUP IN_TOPIC OUT_TOPIC TRANSACTIONAL_ID [--batch N] [--delay-ms MS]``
reads IN_TOPIC with a read_committed GroupConsumer and, per poll, in ONE transaction: writes one output record
per input record (value ``"<partition> <offset> <input value>"``, same key) to OUT_TOPIC and commits the group's
offsets (send_offsets_to_transaction). A crash anywhere leaves either the whole batch (outputs and offsets) or
none of it, so the outputs a read_committed reader sees are each input's exactly once. The delay stands for
processing time and sits between the sends and the commit, so a SIGKILL usually lands inside a transaction.

A transaction that fails (a rebalance moved the group's generation, the producer was fenced by a newer
instance) is aborted and the consumer rewinds to the group's committed offsets: the aborted batch's records will
be processed again, by this process or by whoever owns the partition now.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from odradek import GroupConsumer, Producer, TopicPartition
from odradek.protocol.errors import OdradekError, ProducerFencedError


def rewind(consumer: GroupConsumer) -> None:
    """Back to the group's committed offsets (or the beginning), after an aborted transaction."""
    for tp in consumer.assignment():
        committed = consumer.committed(tp)
        if committed is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, int(committed))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    for name in ("bootstrap", "group", "in_topic", "out_topic", "transactional_id"):
        p.add_argument(name)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--session-timeout-ms", type=int, default=3000)
    args = p.parse_args(argv)
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    producer = Producer(args.bootstrap, transactional_id=args.transactional_id, linger_ms=1,
                        transaction_timeout_ms=10_000)
    producer.init_transactions()  # fences a previous instance with this id and aborts its open transaction
    consumer = GroupConsumer(args.bootstrap, group_id=args.group, enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             session_timeout_ms=args.session_timeout_ms, heartbeat_interval_ms=300,
                             fetch_max_wait_ms=200)
    consumer.subscribe([args.in_topic])
    print("ready", flush=True)
    try:
        while not stop:
            batch = consumer.poll(timeout_ms=200, max_records=args.batch)
            if not any(batch.values()):
                continue
            producer.begin_transaction()
            try:
                offsets: dict[TopicPartition, int] = {}
                for tp, records in batch.items():
                    for r in records:
                        value = f"{r.partition} {r.offset} {(r.value or b'').decode()}".encode()
                        producer.send(args.out_topic, value, key=r.key)
                    if records:
                        offsets[tp] = records[-1].offset + 1
                if args.delay_ms:
                    time.sleep(args.delay_ms / 1000.0)  # "processing", inside the transaction
                producer.send_offsets_to_transaction(offsets, consumer)
                producer.commit_transaction()
            except ProducerFencedError:
                raise  # a newer instance owns this transactional id: this one is a zombie
            except OdradekError as exc:
                print(f"aborting: {exc!r}", file=sys.stderr, flush=True)
                try:
                    producer.abort_transaction()
                except ProducerFencedError:
                    raise
                except OdradekError as abort_exc:  # e.g. the commit's own failure left it decided: re-init
                    print(f"abort failed: {abort_exc!r}; re-initialising", file=sys.stderr, flush=True)
                    producer.init_transactions()
                rewind(consumer)
    finally:
        consumer.close(autocommit=False)
        producer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
