"""Which transactional batches of a produce need the coordinator's word first (KIP-890's first half).

Why: a transactional batch opens a transaction on its partition (the producer state's ``ongoing``), which only
the coordinator's marker closes. A batch that arrives after its transaction ended (a late retry, a zombie whose
epoch is still current) or for a partition the producer never added would open a transaction no marker will
ever end, and the partition's last stable offset would stop there for good: read_committed readers stall.
So before a transaction's *first* batch on a partition the leader asks whether the coordinator has the
partition in that producer's ongoing transaction (``TxnVerifier``, given by the front door with the request's
transactional id); later batches of the same transaction find it open here and need no question.

Not asked: a batch whose epoch is older than the producer's here (the append itself refuses it as
INVALID_PRODUCER_EPOCH, Kafka's order of checks since KAFKA-19690), and non-transactional batches.

Window left open (Kafka closes it with a verification guard): a marker written between the question and the
append. Only a batch racing its own transaction's end can meet it; a client sends EndTxn after its produce
answers, and a retried batch already written is a duplicate, answered from the producer state without writing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from odradek.protocol.records import iter_batch_headers

# (producer id, producer epoch) -> None once the partition is in that producer's ongoing transaction; raises else.
TxnVerifier = Callable[[int, int], Awaitable[None]]


def unverified_producers(data: bytes | bytearray, producer_state: Any) -> list[tuple[int, int]]:
    """(producer id, epoch) of the transactional batches in ``data`` whose producer has no transaction open on
    this partition at that epoch, in request order, each once. ``producer_state`` is the leader replica's
    (``ProducerStateManager``; None: no idempotence state, every transactional producer is asked about)."""
    out: list[tuple[int, int]] = []
    for _, h in iter_batch_headers(data):
        if not h.is_transactional or h.is_control or h.producer_id < 0:
            continue
        key = (h.producer_id, h.producer_epoch)
        if key in out:
            continue
        if producer_state is not None:
            entry = producer_state.producers.get(h.producer_id)
            if entry is not None and h.producer_epoch < entry.epoch:
                continue  # fenced: the append answers INVALID_PRODUCER_EPOCH
            if entry is not None and entry.epoch == h.producer_epoch and h.producer_id in producer_state.ongoing:
                continue  # its transaction is open here already: verified when it began
        out.append(key)
    return out


async def verify_transactional(part: Any, data: bytes | bytearray, verify: TxnVerifier) -> None:
    """Ask ``verify`` about every producer :func:`unverified_producers` names, before ``part`` appends ``data``."""
    for producer_id, epoch in unverified_producers(data, part.producer_state):
        await verify(producer_id, epoch)
