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

The window between the question and the append is closed as Kafka closes it, with a verification guard: the
produce takes the producer's guard before asking, a marker for that producer drops it, and the append (on the
partition's storage queue, atomic with markers) opens a transaction only with its guard still in place
(``ProducerStateManager.check_guards``). So a batch that was in flight while its transaction ended (a request
held up in a paused broker, then processed) is refused, even if its producer's transaction was open here when
the produce looked, instead of opening a transaction that would swallow the producer's next one.
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


async def verify_transactional(part: Any, data: bytes | bytearray, verify: TxnVerifier) -> dict[int, object]:
    """Ask ``verify`` about every producer :func:`unverified_producers` names, before ``part`` appends ``data``;
    the guards taken before asking, by producer id, for the append (``Partition.append``'s ``txn_guards``)."""
    state = part.producer_state
    guards: dict[int, object] = {}
    for producer_id, epoch in unverified_producers(data, state):
        guard = state.verification_guard(producer_id) if state is not None else object()
        await verify(producer_id, epoch)
        guards[producer_id] = guard
    return guards
