"""A transactional id's requests on its coordinator, wherever it is (the routing step of every transaction call).

Who coordinates transactional id T is whoever holds T's coordinator znode (``TxnCoordinator.locate``, which
claims it when nobody does). Front doors call the typed methods here with decoded arguments: the call runs on the
coordinator service in-process when this broker coordinates T, else it is sent once over the inter-broker client
to the coordinator's transactions API (the rules of broker/coordinator_routing.py: marked as forwarded, never
forwarded again, NOT_COORDINATOR when the coordinator moved in between). The value is the same either way, and
so are errors (the inter-broker client raises a remote's typed error as that type). ``describe`` reads ZooKeeper
and needs no coordinator; marker writes go to partition leaders (transaction_coordinator/marker_writer.py).
Each call takes its ticket (its place in line on this broker) as it arrives, before the coordinator is located:
the coordinator refuses a call overtaken on the way by a later one (transaction_coordinator/coordinator.py).

Concurrency: one instance per broker, used from the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

import orjson

from broker.coordinator_routing import CoordinatorRouter, Forward, Routed
from odradek.protocol.errors import (
    ConcurrentTransactionsError,
    CoordinationUnavailableError,
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotCoordinatorError,
    NotEnoughReplicasError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
)

if TYPE_CHECKING:
    from broker.interbroker import InterBrokerClient, Reply
    from transaction_coordinator.coordinator import TxnCoordinator
    from transaction_coordinator.state import TxnOffsets, TxnState

__all__ = ["ProducerIdAndEpoch", "TransactionRouter"]

T = TypeVar("T")

# An end waits for its markers at every partition leader (LeaderMarkerWriter's attempts), so a forward may take
# longer than a plain request's bound.
FORWARD_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    """InitProducerId's answer for a transactional id: the producer id and its bumped epoch."""

    producer_id: int
    producer_epoch: int


def _number(reply: Reply) -> int:
    return int(reply.json()["transaction"])


def _pid_epoch(reply: Reply) -> ProducerIdAndEpoch:
    body = reply.json()
    return ProducerIdAndEpoch(int(body["producer_id"]), int(body["producer_epoch"]))


def _state(reply: Reply) -> str:
    return str(reply.json()["state"])


class TransactionRouter:
    def __init__(self, coordinator: TxnCoordinator, interbroker: InterBrokerClient) -> None:
        self.coordinator = coordinator
        self._router = CoordinatorRouter(coordinator.broker_id, coordinator.locate, interbroker)

    async def init(self, tid: str, timeout_ms: int, *, expected: ProducerIdAndEpoch | None = None,
                   forwarded: bool = False) -> Routed[ProducerIdAndEpoch]:
        """InitProducerId with a transactional id (fences the previous instance: its epoch is bumped).
        ``expected``: the producer id and epoch a recovering producer holds (KIP-360), checked by the coordinator."""

        ticket = self.coordinator.ticket()

        async def local() -> ProducerIdAndEpoch:
            held = None if expected is None else (expected.producer_id, expected.producer_epoch)
            return ProducerIdAndEpoch(*await self.coordinator.init(tid, timeout_ms, held, ticket=ticket))

        body: dict[str, Any] = {"transaction_timeout_ms": timeout_ms}
        if expected is not None:
            body |= {"producer_id": expected.producer_id, "producer_epoch": expected.producer_epoch}
        return await self._router.run(tid, local, _forward(tid, "init", body, _pid_epoch), forwarded=forwarded)

    async def init_idempotent(self) -> ProducerIdAndEpoch:
        """InitProducerId without a transactional id: a fresh producer id at epoch 0, from any broker (no
        coordinator owns it). A KIP-360 bump of an idempotent producer gets a fresh id too, as on Kafka."""
        return ProducerIdAndEpoch(*await self.coordinator.init_producer_id())

    async def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                             partitions: list[tuple[str, int]], *, txn: int | None = None,
                             forwarded: bool = False) -> Routed[int]:
        """AddPartitionsToTxn to transaction ``txn`` (None: the open one, or a new one; transaction_coordinator/
        state.py "Transaction numbers"); the number of the transaction they are in."""
        body: dict[str, Any] = {"producer_id": producer_id, "producer_epoch": producer_epoch,
                                "partitions": [[t, p] for t, p in partitions]}
        if txn is not None:
            body["transaction"] = txn
        ticket = self.coordinator.ticket()
        return await self._router.run(
            tid, lambda: self.coordinator.add_partitions(tid, producer_id, producer_epoch, partitions, txn,
                                                         ticket=ticket),
            _forward(tid, "partitions", body, _number), forwarded=forwarded)

    async def add_offsets(self, tid: str, producer_id: int, producer_epoch: int, offsets: TxnOffsets, *,
                          txn: int | None = None, forwarded: bool = False) -> Routed[int]:
        """AddOffsetsToTxn with the offsets themselves (TxnOffsetCommit), checked against the group's generation;
        the number of the transaction they ride on."""
        body: dict[str, Any] = {"producer_id": producer_id, "producer_epoch": producer_epoch,
                                "group": offsets.group, "generation": offsets.generation,
                                "offsets": [list(o) for o in offsets.offsets]}
        if txn is not None:
            body["transaction"] = txn
        ticket = self.coordinator.ticket()
        return await self._router.run(
            tid, lambda: self.coordinator.add_offsets(tid, producer_id, producer_epoch, offsets, txn,
                                                      ticket=ticket),
            _forward(tid, "offsets", body, _number), forwarded=forwarded)

    async def end(self, tid: str, producer_id: int, producer_epoch: int, commit: bool, *, txn: int | None = None,
                  forwarded: bool = False) -> Routed[str]:
        """EndTxn of transaction ``txn`` (None: the open one): commit or abort; the transaction's final state's
        name."""
        body: dict[str, Any] = {"producer_id": producer_id, "producer_epoch": producer_epoch, "commit": commit}
        if txn is not None:
            body["transaction"] = txn
        ticket = self.coordinator.ticket()
        return await self._router.run(
            tid, lambda: self.coordinator.end(tid, producer_id, producer_epoch, commit, txn, ticket=ticket),
            _forward(tid, "end", body, _state), forwarded=forwarded)

    async def verify(self, tid: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]]) -> list[tuple[str, int]]:
        """KIP-890's verification before a transaction's first batch on a partition: which of ``partitions`` are
        not in the producer's ongoing transaction. Read from ZooKeeper where the coordinator wrote it, on any
        broker (no hop); raises as Kafka's coordinator answers a verification."""
        return await self.coordinator.verify(tid, producer_id, producer_epoch, partitions)

    async def verify_produce(self, tid: str | None, topic: str, partition: int, producer_id: int,
                             producer_epoch: int) -> None:
        """The produce path's verification (ProduceService's ``verify_txn``), with the errors Kafka gives a
        producer: INVALID_TXN_STATE for a partition not in the transaction; INVALID_PRODUCER_EPOCH for another
        epoch (a produce answer never says PRODUCER_FENCED, KAFKA-10687); NOT_ENOUGH_REPLICAS (retriable, and
        retried by every client version) when the coordinator cannot answer now (a transaction being completed,
        ZooKeeper away); TRANSACTIONAL_ID_AUTHORIZATION_FAILED for transactional batches sent without a
        transactional id, as Kafka refuses them."""
        if tid is None:
            raise TransactionalIdAuthorizationFailedError(
                "transactional batches need the produce request's transactional id")
        try:
            missing = await self.verify(tid, producer_id, producer_epoch, [(topic, partition)])
        except (ConcurrentTransactionsError, CoordinatorNotAvailableError, NotCoordinatorError,
                CoordinationUnavailableError) as e:
            raise NotEnoughReplicasError(
                f"cannot verify that {topic}-{partition} is in the transaction of {tid!r} now: {e.message}") from None
        except ProducerFencedError as e:  # a produce answer says INVALID_PRODUCER_EPOCH, never PRODUCER_FENCED
            raise InvalidProducerEpochError(e.message) from None
        if missing:
            raise InvalidTxnStateError(f"{topic}-{partition} was not added to the transaction of {tid!r} "
                                       f"(producer {producer_id} epoch {producer_epoch})")

    async def state_of(self, tid: str) -> TxnState | None:
        """DescribeTransactions: the id's state from ZooKeeper (any broker; None when no producer initialized it)."""
        return await self.coordinator.state_of(tid)

    async def list_states(self, include_unclaimed: bool) -> list[tuple[str, TxnState]]:
        """ListTransactions: the ids this broker coordinates (and, with ``include_unclaimed``, those nobody does)."""
        return await self.coordinator.list_states(include_unclaimed)


def _forward(tid: str, action: str, body: dict[str, Any], decode: Callable[[Reply], T]) -> Forward[T]:
    return Forward("POST", f"/transactions/{quote(tid, safe='')}/{action}", orjson.dumps(body), decode,
                   timeout_s=FORWARD_TIMEOUT_S)
