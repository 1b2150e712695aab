"""What a read_committed read returns: batches below the last stable offset, minus aborted transactions.

Why the broker filters (Kafka returns the aborted-transactions list and lets the client filter): our reads are
plain HTTP, and three kinds of readers (the Python consumer, curl on the JSON read, the Spark connector) would
each have to re-implement the filter. Dropping whole batches is enough, because a batch belongs to exactly one
producer and one transaction. Control batches are kept: clients already skip them, and they carry the consumer
past an aborted transaction whose data was dropped (otherwise an answer made only of aborted batches would be
empty and the reader would fetch the same offset forever).

Per batch, never per record: one header parse per batch, and the bytes of kept batches are sliced, not copied
one by one, when nothing is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.records import CONTROL_MASK, TRANSACTIONAL_MASK, iter_batch_headers

READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"
ISOLATION_LEVELS = (READ_UNCOMMITTED, READ_COMMITTED)


def isolation_level(raw: str) -> str:
    """A client's isolation level, checked: read_uncommitted or read_committed (INVALID_REQUEST otherwise)."""
    if raw not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {raw[:40]!r}")
    return raw


def drop_aborted(data: bytes, aborted: Sequence[tuple[int, int, int]]) -> bytes:
    """``data`` without the batches of aborted transactions: a transactional, non-control batch of producer
    P at offset o is dropped when an aborted transaction of P spans o (first <= o < marker)."""
    if not aborted or not data:
        return data
    by_producer: dict[int, list[tuple[int, int]]] = {}
    for pid, first, marker in aborted:
        by_producer.setdefault(pid, []).append((first, marker))
    view = memoryview(data)
    kept: list[memoryview] = []
    run_start = 0
    dropped = False
    for pos, h in iter_batch_headers(data):
        spans = by_producer.get(h.producer_id)
        if (spans is not None and h.attributes & TRANSACTIONAL_MASK and not h.attributes & CONTROL_MASK
                and any(first <= h.base_offset < marker for first, marker in spans)):
            if pos > run_start:
                kept.append(view[run_start:pos])
            run_start = pos + h.size
            dropped = True
    if not dropped:
        return data
    if run_start < len(data):
        kept.append(view[run_start:])
    return b"".join(kept)
