"""Kafka's idempotence and transaction APIs (KIP-98, KIP-360, KIP-664): one handler per API over the transaction
router (broker/transaction_router.py) and the leaders' producer states (broker/produce/producers.py).

Served: InitProducerId, AddPartitionsToTxn (the client form v0-v3 and the broker form v4), AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, DescribeProducers, DescribeTransactions, ListTransactions. Each handler decodes,
authorizes with Kafka's operations (the broker's one authorizer), calls one service and answers in the request's
version. The rules themselves (epochs, fencing, states) are the transaction coordinator's, the same ones the HTTP
API's transactions follow, so a transaction begun through either door is the same transaction to both.

Where a request goes: Kafka clients send InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn to the
transactional id's coordinator (FindCoordinator); another broker answers NOT_COORDINATOR, as Kafka's do, and the
client looks the coordinator up again. Never forwarding them keeps a client's retry from overtaking its first
attempt held up on another broker: these requests name no transaction (EndTxn before KIP-890's second part), so
a late EndTxn would end whichever transaction is open then. TxnOffsetCommit goes to the group's coordinator; its
offsets ride on the transaction (the coordinator writes them to the group when it commits), so it is routed by
transactional id, here or one hop away, as for HTTP. DescribeProducers is the leader's (NOT_LEADER_OR_FOLLOWER
elsewhere); DescribeTransactions reads ZooKeeper (any broker); ListTransactions lists the ids this broker
coordinates (an admin client asks every broker and merges), plus, on the controller, those nobody coordinates
right now, so every id is listed once.

Errors, as Kafka answers them:

* a fenced producer is PRODUCER_FENCED from the versions that know it (InitProducerId v4, AddPartitionsToTxn,
  AddOffsetsToTxn and EndTxn v2) and INVALID_PRODUCER_EPOCH before; TxnOffsetCommit always answers
  INVALID_PRODUCER_EPOCH, which every client takes as fencing there;
* ZooKeeper out of reach is COORDINATOR_NOT_AVAILABLE (retriable, the client looks the coordinator up again);
* AddPartitionsToTxn is all or nothing: a refused or unknown partition fails the request, and the partitions
  that were fine answer OPERATION_NOT_ATTEMPTED;
* an exception that is not a typed error is UNKNOWN_SERVER_ERROR (and logged), never a dropped connection.

Not enforced as Kafka's group coordinator does: TxnOffsetCommit's member id and group instance id (the generation
is checked, when one is given, now and again at commit).
"""

from __future__ import annotations

import datetime
import functools
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.kafka import codec
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, GROUP, TOPIC, TRANSACTIONAL_ID, KafkaAuthorizer
from broker.kafka.codec import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    LIST_TRANSACTIONS,
    TXN_OFFSET_COMMIT,
    Request,
    make,
    nested,
)
from broker.kafka.errors import code, coordinator_typed
from broker.kafka.network import Connection
from broker.produce.producers import ProducerStates
from broker.transaction_router import ProducerIdAndEpoch
from odradek.protocol.errors import (
    ClusterAuthorizationFailedError,
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    InvalidGroupIdError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidTxnStateError,
    OdradekError,
    OperationNotAttemptedError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    TransactionalIdNotFoundError,
    UnknownTopicError,
)
from transaction_coordinator import state as txn_state
from transaction_coordinator.state import TxnOffsets, TxnState

if TYPE_CHECKING:
    from broker.metadata.cache import MetadataCache
    from broker.produce.routing import LeaderRouter
    from broker.transaction_router import TransactionRouter

log = logging.getLogger(__name__)

NONE = ErrorCode(0)
NO_THROTTLE = datetime.timedelta(0)
NO_ID = -1
# The router's ``forwarded`` flag set on the transactional id's own requests: run here, or NOT_COORDINATOR, never
# forwarded (the module docstring's "Where a request goes"), as GroupRouter.here does for groups.
HERE_ONLY = True
# Kafka's transaction states, as DescribeTransactions and ListTransactions name them (its state filters).
KAFKA_STATES = frozenset({txn_state.EMPTY, txn_state.ONGOING, txn_state.PREPARE_COMMIT, txn_state.PREPARE_ABORT,
                          txn_state.COMPLETE_COMMIT, txn_state.COMPLETE_ABORT, "Dead", "PrepareEpochFence"})
MAX_METADATA = 4096  # offset.metadata.max.bytes, as the HTTP API keeps it
# The ids the HTTP API names in its paths (a forward to another broker's coordinator takes that path).
_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")

Handler = Callable[[Connection, Request], Awaitable[Any]]


class TxnCluster(Protocol):
    """What these handlers use of the broker (``broker.server.Broker`` is one)."""

    broker_id: int
    controller_id: int | None
    txn_router: TransactionRouter
    router: LeaderRouter


def _fenced_as(error: OdradekError, knows_producer_fenced: bool) -> OdradekError:
    """PRODUCER_FENCED for a request version that predates it (KIP-588) is INVALID_PRODUCER_EPOCH."""
    if isinstance(error, ProducerFencedError) and not knows_producer_fenced:
        return InvalidProducerEpochError(error.message)
    return error


def _check_id(tid: str | None, what: str) -> None:
    if not tid or not _ID.fullmatch(tid) or tid in (".", ".."):
        raise InvalidRequestError(f"{what} must be 1 to 249 characters of [A-Za-z0-9._-], not {tid!r}")


def _check_group(group: str) -> None:
    if not _ID.fullmatch(group) or group in (".", ".."):
        raise InvalidGroupIdError(f"group.id must be 1 to 249 characters of [A-Za-z0-9._-], not {group!r}")


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


class KafkaTransactions:
    def __init__(self, cluster: TxnCluster, cache: MetadataCache, authorizer: KafkaAuthorizer) -> None:
        self._cluster = cluster
        self._cache = cache
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {
            INIT_PRODUCER_ID: self.handle_init_producer_id,
            ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            END_TXN: self.handle_end_txn,
            TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
            DESCRIBE_PRODUCERS: self.handle_describe_producers,
            DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            LIST_TRANSACTIONS: self.handle_list_transactions,
        }

    # The broker's services, taken when first used: the broker builds this door before it runs.
    @property
    def _txn(self) -> TransactionRouter:
        return self._cluster.txn_router

    @functools.cached_property
    def _producers(self) -> ProducerStates:
        return ProducerStates(self._cluster.router)

    def _denied(self, conn: Connection, operation: str, resource_type: str, name: str) -> bool:
        return not self._auth.allowed(conn, operation, resource_type, name)

    def _known(self, topic: str, partition: int) -> bool:
        assignment = self._cache.topics.get(topic)
        return assignment is not None and partition in assignment.partitions

    # --------------------------------------------------------------------------------------- InitProducerId

    async def handle_init_producer_id(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(INIT_PRODUCER_ID, version)
        try:
            answer = await self._init_producer_id(conn, body)
        except Exception as e:
            error = _fenced_as(coordinator_typed(e, "InitProducerId"), version >= 4)
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), producer_id=NO_ID,
                        producer_epoch=NO_ID)
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, producer_id=answer.producer_id,
                    producer_epoch=answer.producer_epoch)

    async def _init_producer_id(self, conn: Connection, body: Any) -> ProducerIdAndEpoch:
        tid = body.transactional_id
        pid, epoch = int(getattr(body, "producer_id", NO_ID)), int(getattr(body, "producer_epoch", NO_ID))
        if (pid == NO_ID) != (epoch == NO_ID) or pid < NO_ID or epoch < NO_ID:
            raise InvalidRequestError("producer_id and producer_epoch are given together (>= 0) or not at all (-1)")
        if tid is None:
            # An idempotent producer: a fresh producer id at epoch 0, also for a KIP-360 bump (Kafka's answer).
            if self._denied(conn, "IdempotentWrite", CLUSTER, CLUSTER_NAME):
                raise ClusterAuthorizationFailedError(
                    f"{self._auth.principal(conn)} may not IdempotentWrite on the cluster")
            return await self._txn.init_idempotent()
        if self._denied(conn, "Write", TRANSACTIONAL_ID, tid):
            raise TransactionalIdAuthorizationFailedError(
                f"{self._auth.principal(conn)} may not Write transactional id {tid}")
        _check_id(tid, "transactional.id")
        expected = None if pid == NO_ID else ProducerIdAndEpoch(pid, epoch)
        routed = await self._txn.init(tid, _ms(body.transaction_timeout), expected=expected, forwarded=HERE_ONLY)
        return routed.value

    # ----------------------------------------------------------------------------------- AddPartitionsToTxn

    async def handle_add_partitions_to_txn(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        cls = codec.response_class(ADD_PARTITIONS_TO_TXN, version)
        body = request.body
        if version >= 4:  # the broker form: several transactions, each added or only verified
            return await self._add_partitions_batch(conn, cls, body)
        results = await self._add_partitions(
            conn, version, body.v3_and_below_transactional_id, int(body.v3_and_below_producer_id),
            int(body.v3_and_below_producer_epoch), body.v3_and_below_topics, verify_only=False)
        return make(cls, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=self._partition_results(cls, results))

    async def _add_partitions_batch(self, conn: Connection, cls: type[Any], body: Any) -> Any:
        if self._denied(conn, "ClusterAction", CLUSTER, CLUSTER_NAME):
            error = ClusterAuthorizationFailedError(
                f"{self._auth.principal(conn)} may not ClusterAction: AddPartitionsToTxn v4 is for brokers")
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), results_by_transaction=())
        out = []
        for txn in body.transactions:
            results = await self._add_partitions(conn, 4, txn.transactional_id, int(txn.producer_id),
                                                 int(txn.producer_epoch), txn.topics, verify_only=bool(txn.verify_only))
            out.append(make(nested(cls, "AddPartitionsToTxnResult"), transactional_id=txn.transactional_id,
                            topic_results=self._partition_results(cls, results)))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, results_by_transaction=tuple(out))

    @staticmethod
    def _partition_results(cls: type[Any], results: dict[str, dict[int, OdradekError | None]]) -> tuple[Any, ...]:
        part_cls = nested(cls, "AddPartitionsToTxnPartitionResult")
        return tuple(
            make(nested(cls, "AddPartitionsToTxnTopicResult"), name=topic,
                 results_by_partition=tuple(make(part_cls, partition_index=p, partition_error_code=code(e))
                                            for p, e in parts.items()))
            for topic, parts in results.items())

    async def _add_partitions(self, conn: Connection, version: int, tid: str, pid: int, epoch: int,
                              topics: Any, *, verify_only: bool) -> dict[str, dict[int, OdradekError | None]]:
        """Each partition's error (None: added, or verified to be in the transaction)."""
        wanted = [(str(t.name), int(p)) for t in topics for p in t.partitions]
        results: dict[str, dict[int, OdradekError | None]] = {}
        for topic, p in wanted:
            results.setdefault(topic, {})[p] = None
        if self._denied(conn, "Write", TRANSACTIONAL_ID, tid):
            denied = TransactionalIdAuthorizationFailedError(
                f"{self._auth.principal(conn)} may not Write transactional id {tid}")
            return {t: dict.fromkeys(ps, denied) for t, ps in results.items()}
        refused: dict[tuple[str, int], OdradekError] = {}
        for topic, p in wanted:
            if self._denied(conn, "Write", TOPIC, topic):
                refused[(topic, p)] = TopicAuthorizationFailedError(
                    f"{self._auth.principal(conn)} may not Write topic {topic}")
            elif not self._known(topic, p):
                refused[(topic, p)] = UnknownTopicError(f"{topic}-{p} does not exist")
        if refused:
            not_attempted = OperationNotAttemptedError("another partition of the request was refused")
            return {t: {p: refused.get((t, p), not_attempted) for p in ps} for t, ps in results.items()}
        try:
            _check_id(tid, "transactional.id")
            if verify_only:
                missing = set(await self._txn.verify(tid, pid, epoch, wanted))
                absent = InvalidTxnStateError(f"not in the transaction of {tid!r}")
                return {t: {p: absent if (t, p) in missing else None for p in ps} for t, ps in results.items()}
            await self._txn.add_partitions(tid, pid, epoch, wanted, forwarded=HERE_ONLY)
        except Exception as e:
            error = _fenced_as(coordinator_typed(e, "AddPartitionsToTxn"), version >= 2)
            return {t: dict.fromkeys(ps, error) for t, ps in results.items()}
        return results

    # -------------------------------------------------------------------------------------- AddOffsetsToTxn

    async def handle_add_offsets_to_txn(self, conn: Connection, request: Request) -> Any:
        """The group joins the transaction: its offsets (TxnOffsetCommit) are written to it at commit."""
        version = request.header.api_version
        body = request.body
        tid, group = body.transactional_id, str(body.group_id)
        error: OdradekError | None = None
        try:
            if self._denied(conn, "Write", TRANSACTIONAL_ID, tid):
                raise TransactionalIdAuthorizationFailedError(
                    f"{self._auth.principal(conn)} may not Write transactional id {tid}")
            if self._denied(conn, "Read", GROUP, group):
                raise GroupAuthorizationFailedError(f"{self._auth.principal(conn)} may not Read group {group}")
            _check_id(tid, "transactional.id")
            _check_group(group)
            await self._txn.add_offsets(tid, int(body.producer_id), int(body.producer_epoch),
                                        TxnOffsets(group, -1, ()), forwarded=HERE_ONLY)
        except Exception as e:
            error = _fenced_as(coordinator_typed(e, "AddOffsetsToTxn"), version >= 2)
        return make(codec.response_class(ADD_OFFSETS_TO_TXN, version), throttle_time=NO_THROTTLE,
                    error_code=code(error))

    # ----------------------------------------------------------------------------------------------- EndTxn

    async def handle_end_txn(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        tid = body.transactional_id
        error: OdradekError | None = None
        try:
            if self._denied(conn, "Write", TRANSACTIONAL_ID, tid):
                raise TransactionalIdAuthorizationFailedError(
                    f"{self._auth.principal(conn)} may not Write transactional id {tid}")
            _check_id(tid, "transactional.id")
            await self._txn.end(tid, int(body.producer_id), int(body.producer_epoch), bool(body.committed),
                                forwarded=HERE_ONLY)
        except Exception as e:
            error = _fenced_as(coordinator_typed(e, "EndTxn"), version >= 2)
        return make(codec.response_class(END_TXN, version), throttle_time=NO_THROTTLE, error_code=code(error),
                    producer_id=NO_ID, producer_epoch=NO_ID)

    # -------------------------------------------------------------------------------------- TxnOffsetCommit

    async def handle_txn_offset_commit(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(TXN_OFFSET_COMMIT, version)
        tid, group = body.transactional_id, str(body.group_id)
        errors: dict[tuple[str, int], OdradekError | None] = {}
        whole: OdradekError | None = None
        if self._denied(conn, "Write", TRANSACTIONAL_ID, tid):
            whole = TransactionalIdAuthorizationFailedError(
                f"{self._auth.principal(conn)} may not Write transactional id {tid}")
        elif self._denied(conn, "Read", GROUP, group):
            whole = GroupAuthorizationFailedError(f"{self._auth.principal(conn)} may not Read group {group}")
        offsets: list[tuple[str, int, int, str]] = []
        for topic in body.topics:
            name = str(topic.name)
            readable = whole is None and not self._denied(conn, "Read", TOPIC, name)
            for p in topic.partitions:
                key = (name, int(p.partition_index))
                if whole is not None:
                    errors[key] = whole
                elif not readable:
                    errors[key] = TopicAuthorizationFailedError(
                        f"{self._auth.principal(conn)} may not Read topic {name}")
                elif not self._known(*key):
                    errors[key] = UnknownTopicError(f"{name}-{key[1]} does not exist")
                else:
                    errors[key] = None
                    offsets.append((name, key[1], int(p.committed_offset), (p.committed_metadata or "")[:MAX_METADATA]))
        if offsets:
            try:
                _check_id(tid, "transactional.id")
                _check_group(group)
                await self._txn.add_offsets(tid, int(body.producer_id), int(body.producer_epoch), TxnOffsets(
                    group, int(getattr(body, "generation_id", -1)), tuple(offsets)))
            except Exception as e:
                error = _fenced_as(coordinator_typed(e, "TxnOffsetCommit"), False)
                if isinstance(error, ConcurrentTransactionsError):
                    # Not an error clients expect from a group coordinator: retriable as the coordinator moving.
                    error = CoordinatorNotAvailableError(error.message)
                for t, p, _, _ in offsets:
                    errors[(t, p)] = error
        by_topic: dict[str, list[Any]] = {}
        part_cls = nested(cls, "TxnOffsetCommitResponsePartition")
        for (t, p), e in errors.items():
            by_topic.setdefault(t, []).append(make(part_cls, partition_index=p, error_code=code(e)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(
            make(nested(cls, "TxnOffsetCommitResponseTopic"), name=t, partitions=tuple(ps))
            for t, ps in by_topic.items()))

    # ------------------------------------------------------------------------------------ DescribeProducers

    async def handle_describe_producers(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        cls = codec.response_class(DESCRIBE_PRODUCERS, version)
        part_cls, state_cls = nested(cls, "PartitionResponse"), nested(cls, "ProducerState")
        topics = []
        for topic in request.body.topics:
            name = str(topic.name)
            denied = self._denied(conn, "Read", TOPIC, name)
            entries = []
            for p in topic.partition_indexes:
                error: OdradekError | None = None
                producers: list[Any] = []
                if denied:
                    error = TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Read topic {name}")
                else:
                    try:
                        producers = [make(state_cls, producer_id=a.producer_id, producer_epoch=a.producer_epoch,
                                          last_sequence=a.last_sequence, last_timestamp=a.last_timestamp,
                                          coordinator_epoch=a.coordinator_epoch,
                                          current_txn_start_offset=a.current_txn_start_offset)
                                     for a in self._producers.describe(name, int(p))]
                    except Exception as e:
                        error = coordinator_typed(e, f"DescribeProducers of {name}-{p}")
                entries.append(make(part_cls, partition_index=int(p), error_code=code(error),
                                    error_message=None if error is None else error.message,
                                    active_producers=tuple(producers)))
            topics.append(make(nested(cls, "TopicResponse"), name=name, partitions=tuple(entries)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    # --------------------------------------------------------------------------------- DescribeTransactions

    async def handle_describe_transactions(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        cls = codec.response_class(DESCRIBE_TRANSACTIONS, version)
        state_cls, topic_cls = nested(cls, "TransactionState"), nested(cls, "TopicData")
        out = []
        for tid in request.body.transactional_ids:
            st: TxnState | None = None
            error: OdradekError | None = None
            try:
                if self._denied(conn, "Describe", TRANSACTIONAL_ID, tid):
                    raise TransactionalIdAuthorizationFailedError(
                        f"{self._auth.principal(conn)} may not Describe transactional id {tid}")
                # an id the coordinator cannot keep was never initialized (and is no ZooKeeper path to read)
                st = await self._txn.state_of(tid) if _ID.fullmatch(tid) and tid not in (".", "..") else None
                if st is None:
                    raise TransactionalIdNotFoundError(f"no producer ever initialized transactional id {tid!r}")
            except Exception as e:
                error = coordinator_typed(e, f"DescribeTransactions of {tid!r}")
            if st is None or error is not None:
                out.append(make(state_cls, error_code=code(error), transactional_id=tid, transaction_state="",
                                transaction_timeout=NO_THROTTLE, transaction_start_time=_time(0),
                                producer_id=NO_ID, producer_epoch=NO_ID, topics=()))
                continue
            partitions: dict[str, list[int]] = {}
            for t, p in st.partitions:  # Kafka leaves out the topics the caller may not Describe
                if not self._denied(conn, "Describe", TOPIC, t):
                    partitions.setdefault(t, []).append(p)
            out.append(make(state_cls, error_code=NONE, transactional_id=tid, transaction_state=st.state,
                            transaction_timeout=datetime.timedelta(milliseconds=st.timeout_ms),
                            transaction_start_time=_time(st.start_ms), producer_id=st.producer_id,
                            producer_epoch=st.producer_epoch,
                            topics=tuple(make(topic_cls, topic=t, partitions=tuple(ps))
                                         for t, ps in sorted(partitions.items()))))
        return make(cls, throttle_time=NO_THROTTLE, transaction_states=tuple(out))

    # ------------------------------------------------------------------------------------- ListTransactions

    async def handle_list_transactions(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(LIST_TRANSACTIONS, version)
        wanted_states = {s for s in body.state_filters if s in KAFKA_STATES}
        unknown = tuple(s for s in body.state_filters if s not in KAFKA_STATES)
        producer_ids = {int(p) for p in body.producer_id_filters}
        duration_ms = int(getattr(body, "duration_filter", -1))
        try:
            listed = await self._txn.list_states(self._cluster.controller_id == self._cluster.broker_id)
        except Exception as e:
            error = coordinator_typed(e, "ListTransactions")
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), unknown_state_filters=unknown,
                        transaction_states=())
        now_ms = time.time_ns() // 1_000_000
        out = []
        for tid, st in sorted(listed, key=lambda x: x[0]):
            if body.state_filters and st.state not in wanted_states:
                continue
            if producer_ids and st.producer_id not in producer_ids:
                continue
            if duration_ms >= 0 and (st.start_ms < 0 or now_ms - st.start_ms <= duration_ms):
                continue
            if self._denied(conn, "Describe", TRANSACTIONAL_ID, tid):
                continue
            out.append(make(nested(cls, "TransactionState"), transactional_id=tid, producer_id=st.producer_id,
                            transaction_state=st.state))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, unknown_state_filters=unknown,
                    transaction_states=tuple(out))


def _time(ms: int) -> datetime.datetime:
    """A wire timestamp in ms. -1 (no transaction began yet) is written as -1, as Kafka does; an error entry
    carries 0, the field's default in Kafka's answer."""
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
