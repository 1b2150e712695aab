"""Kafka's idempotence and transaction APIs (broker/kafka/transactions.py) over the real transaction router and
coordinator, whose ZooKeeper store is an in-memory stand-in: what each API answers, by version, for the cases
clients rely on (fencing, KIP-360 bumps, all-or-nothing AddPartitionsToTxn, offsets riding on a transaction,
describing and listing), and the produce path's KIP-890 verification."""

from __future__ import annotations

import asyncio
import datetime
import io
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from broker.kafka import codec
from broker.kafka.authorization import KafkaAuthorizer
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import Connection
from broker.kafka.transactions import KafkaTransactions
from broker.metadata.cache import MetadataCache
from broker.produce.txn_verification import unverified_producers
from broker.replication.producer_state import ProducerStateManager
from broker.transaction_router import TransactionRouter
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    NotEnoughReplicasError,
    TransactionalIdAuthorizationFailedError,
)
from odradek.protocol.model import TopicAssignment
from odradek.protocol.records import encode_batch, set_base_offset
from odradek.protocol.records.control import encode_marker
from tests.unit.fakes.interbroker import FakeInterBroker, reply
from transaction_coordinator.coordinator import TxnCoordinator
from transaction_coordinator.state import TxnState

PLAINTEXT = KafkaListener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
CONN = Connection("c", PLAINTEXT, "127.0.0.1", 50000)
ME = 1
INIT, ADD_PARTITIONS, ADD_OFFSETS, END, TXN_COMMIT = 22, 24, 25, 26, 28
DESCRIBE_PRODUCERS, DESCRIBE_TXNS, LIST_TXNS = 61, 65, 66
# Kafka's codes
NONE, UNKNOWN_TOPIC, COORD_NOT_AVAILABLE, NOT_COORDINATOR, CLUSTER_AUTH, INVALID_REQUEST = 0, 3, 15, 16, 31, 42
ILLEGAL_GENERATION, INVALID_EPOCH, INVALID_TXN_STATE, INVALID_MAPPING = 22, 47, 48, 49
TXN_ID_AUTH, NOT_ATTEMPTED, PRODUCER_FENCED, TXN_ID_NOT_FOUND = 53, 55, 90, 105


class MemoryTxnStore:
    """``zk.transactions.TxnStore``'s verbs over dicts, with zkVersions (conditional writes)."""

    def __init__(self) -> None:
        self.states: dict[str, tuple[dict[str, Any], int]] = {}
        self.coordinators: dict[str, int] = {}
        self.generations: dict[str, int] = {}
        self.fresh_reads = 0

    def get_coordinator(self, tid: str) -> int | None:
        return self.coordinators.get(tid)

    def claim_coordinator(self, tid: str, broker_id: int, epoch: int) -> int:
        return self.coordinators.setdefault(tid, broker_id)

    def list_ids(self) -> list[str]:
        return sorted(self.states)

    def get_state(self, tid: str, fresh: bool = False) -> tuple[dict[str, Any] | None, int]:
        self.fresh_reads += fresh
        state, version = self.states.get(tid, (None, -1))
        return state, version

    def set_state(self, tid: str, state: dict[str, Any], version: int) -> int:
        current = self.states.get(tid, (None, -1))[1]
        assert current == version, "a stale write"
        self.states[tid] = (state, version + 1)
        return version + 1

    def group_generation(self, group: str) -> int | None:
        return self.generations.get(group)


class MemoryGroups:
    def __init__(self) -> None:
        self.committed: dict[str, dict[tuple[str, int], Any]] = {}

    def commit_offsets(self, group: str, offsets: dict[tuple[str, int], Any]) -> None:
        self.committed.setdefault(group, {}).update(offsets)


class Env:
    def __init__(self, allow: Any = None) -> None:
        self.markers: list[tuple[Any, ...]] = []
        self.pids = iter(range(1000, 2000))

        async def write_marker(*args: Any) -> None:
            self.markers.append(args)

        self.coordinator = TxnCoordinator(ME, None, lambda: 7, lambda: next(self.pids), write_marker)  # type: ignore[arg-type]
        self.store = MemoryTxnStore()
        self.groups = MemoryGroups()
        self.coordinator.store = self.store  # type: ignore[assignment]
        self.coordinator.groups = self.groups  # type: ignore[assignment]
        self.router = TransactionRouter(self.coordinator, FakeInterBroker())  # type: ignore[arg-type]
        self.leaders: dict[tuple[str, int], Any] = {}
        cache = MetadataCache()
        cache.topics = {"t": TopicAssignment({0: [1], 1: [1]}), "u": TopicAssignment({0: [1]})}
        leaders = self.leaders

        class Router:
            def leader(self, topic: str, partition: int) -> Any:
                return leaders[(topic, partition)]

        cluster = SimpleNamespace(broker_id=ME, controller_id=ME, txn_router=self.router, router=Router())
        security = None if allow is None else SimpleNamespace(allowed=lambda p, h, op, rt, name: allow(op, rt, name))
        self.apis = KafkaTransactions(cluster, cache, KafkaAuthorizer(security))  # type: ignore[arg-type]

    def call(self, api_key: int, version: int, **fields: Any) -> Any:
        """Encode the request as a client would, decode it, run the handler, and read its encoded answer back."""
        request_cls = load_request_schema(api_key, version)
        out = io.BytesIO()
        header_cls = HeaderV2 if request_cls.__flexible__ else HeaderV1
        entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                                  correlation_id=5, client_id="unit"))
        entity_writer(request_cls)(out, codec.make(request_cls, **fields))
        request = codec.decode_request(out.getvalue())
        body = asyncio.run(self.apis.handlers()[api_key](CONN, request))
        frame = codec.encode_response(api_key, version, 5, body)
        response_cls = load_response_schema(api_key, version)
        _, size = entity_reader(response_cls.__header_schema__)(frame, 4)
        decoded, _ = entity_reader(response_cls)(frame, 4 + size)
        return decoded

    def init(self, version: int = 4, tid: str | None = "tx", pid: int = -1, epoch: int = -1) -> Any:
        return self.call(INIT, version, transactional_id=tid, transaction_timeout=datetime.timedelta(seconds=60),
                         producer_id=pid, producer_epoch=epoch)

    def add_partitions(self, version: int, pid: int, epoch: int, parts: dict[str, tuple[int, ...]],
                       tid: str = "tx") -> dict[tuple[str, int], int]:
        topic_cls = codec.nested(load_request_schema(ADD_PARTITIONS, version), "AddPartitionsToTxnTopic")
        body = self.call(ADD_PARTITIONS, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
                         v3_and_below_producer_epoch=epoch,
                         v3_and_below_topics=tuple(codec.make(topic_cls, name=t, partitions=ps)
                                                   for t, ps in parts.items()))
        return {(t.name, p.partition_index): p.partition_error_code
                for t in body.results_by_topic_v3_and_below for p in t.results_by_partition}

    def state(self, tid: str = "tx") -> TxnState:
        return TxnState.from_json(self.store.states[tid][0])


def test_idempotent_init_gives_a_fresh_producer_id_even_for_a_kip360_bump() -> None:
    env = Env()
    first = env.init(tid=None)
    assert (first.error_code, first.producer_id, first.producer_epoch) == (NONE, 1000, 0)
    bumped = env.init(tid=None, pid=1000, epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (NONE, 1001, 0)
    assert env.init(tid=None, pid=1000).error_code == INVALID_REQUEST  # an id without its epoch
    assert env.init(pid=1000, epoch=-5).error_code == INVALID_REQUEST
    assert env.call(INIT, 0, transactional_id=None, transaction_timeout=datetime.timedelta(0)).producer_id == 1002


def test_transactional_init_bumps_the_epoch_and_kip360_checks_the_named_one() -> None:
    env = Env()
    assert (env.init().producer_id, env.init().producer_epoch) == (1000, 1)  # two instances: epochs 0, then 1
    recovered = env.init(pid=1000, epoch=1)  # the current instance recovering (KIP-360): bumped again
    assert (recovered.error_code, recovered.producer_epoch) == (NONE, 2)
    retried = env.init(pid=1000, epoch=1)  # the same init again, its answer lost: the same answer, no bump
    assert (retried.error_code, retried.producer_epoch) == (NONE, 2)
    assert env.init(pid=1000, epoch=0).error_code == PRODUCER_FENCED  # a zombie's epoch
    assert env.init(version=3, pid=1000, epoch=0).error_code == INVALID_EPOCH  # before PRODUCER_FENCED existed
    assert env.init(pid=999, epoch=2).error_code == PRODUCER_FENCED
    assert env.init(tid="").error_code == INVALID_REQUEST
    assert env.call(INIT, 4, transactional_id="tx", transaction_timeout=datetime.timedelta(0)).error_code == 50


def test_a_transaction_through_every_api_and_its_markers_and_offsets() -> None:
    env = Env()
    init = env.init()
    pid, epoch = init.producer_id, init.producer_epoch
    assert env.add_partitions(3, pid, epoch, {"t": (0, 1), "u": (0,)}) == {("t", 0): 0, ("t", 1): 0, ("u", 0): 0}
    assert env.state().state == "Ongoing"
    assert env.call(ADD_OFFSETS, 3, transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                    group_id="g").error_code == NONE
    env.store.generations["g"] = 4
    commit = env.call(TXN_COMMIT, 3, **txn_offsets(3, pid, epoch, "g", {("t", 0): 10, ("t", 1): 20}, generation=4))
    assert {(t.name, p.partition_index): p.error_code for t in commit.topics for p in t.partitions} == {
        ("t", 0): 0, ("t", 1): 0}
    stale = env.call(TXN_COMMIT, 3, **txn_offsets(3, pid, epoch, "g", {("t", 0): 11}, generation=3))
    assert stale.topics[0].partitions[0].error_code == ILLEGAL_GENERATION
    assert env.call(END, 3, transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                    committed=True).error_code == NONE
    assert sorted((m[0], m[1], m[4]) for m in env.markers) == [("t", 0, True), ("t", 1, True), ("u", 0, True)]
    assert {k: v[0] for k, v in env.groups.committed["g"].items()} == {("t", 0): 10, ("t", 1): 20}
    assert env.state().state == "CompleteCommit"
    # the retry of a commit that happened is answered as it was; an abort of it is INVALID_TXN_STATE
    assert env.call(END, 3, transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                    committed=True).error_code == NONE
    assert env.call(END, 3, transactional_id="tx", producer_id=pid, producer_epoch=epoch,
                    committed=False).error_code == INVALID_TXN_STATE


def txn_offsets(version: int, pid: int, epoch: int, group: str, offsets: dict[tuple[str, int], int],
                generation: int = -1) -> dict[str, Any]:
    cls = load_request_schema(TXN_COMMIT, version)
    by_topic: dict[str, list[Any]] = {}
    for (t, p), o in offsets.items():
        by_topic.setdefault(t, []).append(codec.make(codec.nested(cls, "TxnOffsetCommitRequestPartition"),
                                                     partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                     committed_metadata="m"))
    topics = tuple(codec.make(codec.nested(cls, "TxnOffsetCommitRequestTopic"), name=t, partitions=tuple(ps))
                   for t, ps in by_topic.items())
    return {"transactional_id": "tx", "group_id": group, "producer_id": pid, "producer_epoch": epoch,
            "generation_id": generation, "member_id": "", "group_instance_id": None, "topics": topics}


def test_a_second_instance_fences_the_first_and_aborts_its_transaction() -> None:
    env = Env()
    old = env.init()
    assert env.add_partitions(3, old.producer_id, old.producer_epoch, {"t": (0,)}) == {("t", 0): 0}
    new = env.init()
    assert new.producer_epoch == old.producer_epoch + 2  # one bump for the abort's markers, one for the instance
    assert [(m[0], m[1], m[3], m[4]) for m in env.markers] == [("t", 0, old.producer_epoch + 1, False)]
    for version, fenced in ((1, INVALID_EPOCH), (2, PRODUCER_FENCED), (4, PRODUCER_FENCED)):
        assert env.call(END, version, transactional_id="tx", producer_id=old.producer_id,
                        producer_epoch=old.producer_epoch, committed=True).error_code == fenced
    assert env.add_partitions(1, old.producer_id, old.producer_epoch, {"t": (1,)}) == {("t", 1): INVALID_EPOCH}
    assert env.add_partitions(3, old.producer_id, old.producer_epoch, {"t": (1,)}) == {("t", 1): PRODUCER_FENCED}
    zombie = env.call(TXN_COMMIT, 0, **txn_offsets(0, old.producer_id, old.producer_epoch, "g", {("t", 0): 1}))
    assert zombie.topics[0].partitions[0].error_code == INVALID_EPOCH
    assert env.add_partitions(3, 77, 0, {"t": (0,)}) == {("t", 0): INVALID_MAPPING}
    assert env.add_partitions(3, 77, 0, {"t": (0,)}, tid="never") == {("t", 0): INVALID_MAPPING}


def test_add_partitions_is_all_or_nothing() -> None:
    env = Env(allow=lambda op, rt, name: not (rt == "Topic" and name == "u"))
    init = env.init()
    answer = env.add_partitions(3, init.producer_id, init.producer_epoch, {"t": (0, 9), "u": (0,)})
    assert answer == {("t", 0): NOT_ATTEMPTED, ("t", 9): UNKNOWN_TOPIC, ("u", 0): 29}
    assert env.state().state == "Empty"
    denied = Env(allow=lambda op, rt, name: rt != "TransactionalId")
    assert denied.init().error_code == TXN_ID_AUTH
    assert denied.add_partitions(3, 1, 0, {"t": (0,)}) == {("t", 0): TXN_ID_AUTH}
    no_idempotence = Env(allow=lambda op, rt, name: op != "IdempotentWrite")
    assert no_idempotence.init(tid=None).error_code == CLUSTER_AUTH


def test_add_partitions_v4_is_for_brokers_and_verifies() -> None:
    env = Env()
    init = env.init()
    env.add_partitions(3, init.producer_id, init.producer_epoch, {"t": (0,)})
    cls = load_request_schema(ADD_PARTITIONS, 4)
    txn = codec.make(codec.nested(cls, "AddPartitionsToTxnTransaction"), transactional_id="tx",
                     producer_id=init.producer_id, producer_epoch=init.producer_epoch, verify_only=True,
                     topics=(codec.make(codec.nested(cls, "AddPartitionsToTxnTopic"), name="t", partitions=(0, 1)),))
    body = env.call(ADD_PARTITIONS, 4, transactions=(txn,))
    [result] = body.results_by_transaction
    assert {p.partition_index: p.partition_error_code for p in result.topic_results[0].results_by_partition} == {
        0: NONE, 1: INVALID_TXN_STATE}
    assert env.state().partitions == (("t", 0),)  # verify_only added nothing
    not_a_broker = Env(allow=lambda op, rt, name: op != "ClusterAction")
    assert not_a_broker.call(ADD_PARTITIONS, 4, transactions=(txn,)).error_code == CLUSTER_AUTH


def test_describe_and_list_transactions() -> None:
    env = Env()
    init = env.init()
    env.add_partitions(3, init.producer_id, init.producer_epoch, {"t": (1, 0)})
    env.store.coordinators["other"] = 2  # coordinated elsewhere: another broker lists it
    env.store.states["other"] = (TxnState(5, 0).to_json(), 0)
    [described, missing] = env.call(DESCRIBE_TXNS, 0, transactional_ids=("tx", "nope")).transaction_states
    assert (described.error_code, described.transaction_state, described.producer_id) == (0, "Ongoing", 1000)
    assert [(t.topic, t.partitions) for t in described.topics] == [("t", (0, 1))]
    assert described.transaction_timeout == datetime.timedelta(seconds=60)
    assert missing.error_code == TXN_ID_NOT_FOUND
    listed = env.call(LIST_TXNS, 1, state_filters=(), producer_id_filters=(), duration_filter=-1)
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [("tx", "Ongoing")]
    filtered = env.call(LIST_TXNS, 0, state_filters=("CompleteCommit", "Bogus"), producer_id_filters=())
    assert filtered.transaction_states == () and filtered.unknown_state_filters == ("Bogus",)
    assert env.call(LIST_TXNS, 1, state_filters=(), producer_id_filters=(), duration_filter=3_600_000
                    ).transaction_states == ()


def test_describe_producers_reads_the_leaders_state() -> None:
    env = Env()
    state = ProducerStateManager()
    batch = bytearray(encode_batch([(None, b"a", 1, ()), (None, b"b", 2, ())], producer_id=42, producer_epoch=3,
                                   base_sequence=0, is_transactional=True))
    set_base_offset(batch, 0, 10, 0)
    state.apply(bytes(batch))
    env.leaders[("t", 0)] = SimpleNamespace(producer_state=state)
    cls = load_request_schema(DESCRIBE_PRODUCERS, 0)
    body = env.call(DESCRIBE_PRODUCERS, 0, topics=(
        codec.make(codec.nested(cls, "TopicRequest"), name="t", partition_indexes=(0, 1)),))
    [p0, p1] = body.topics[0].partitions
    [producer] = p0.active_producers
    assert (producer.producer_id, producer.producer_epoch, producer.last_sequence,
            producer.current_txn_start_offset) == (42, 3, 1, 10)
    assert p1.error_code != NONE  # no leader here: an error for that partition, not a dropped connection


def test_the_produce_path_asks_the_coordinator_about_a_transactions_first_batch_only() -> None:
    env = Env()
    init = env.init()
    pid, epoch = init.producer_id, init.producer_epoch
    txn = encode_batch([(None, b"x", 1, ())], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                       is_transactional=True)
    state = ProducerStateManager()
    assert unverified_producers(txn, state) == [(pid, epoch)]
    verify = env.router.verify_produce
    with pytest.raises(InvalidTxnStateError):  # not added to the transaction
        asyncio.run(verify("tx", "t", 0, pid, epoch))
    assert env.store.fresh_reads == 1  # a negative answer is read again after a sync
    env.add_partitions(3, pid, epoch, {"t": (0,)})
    asyncio.run(verify("tx", "t", 0, pid, epoch))  # added: verified
    with pytest.raises(InvalidProducerEpochError):  # produce answers never say PRODUCER_FENCED
        asyncio.run(verify("tx", "t", 0, pid, epoch - 1 if epoch else epoch + 1))
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        asyncio.run(verify(None, "t", 0, pid, epoch))
    # once its transaction is open on the partition, later batches are not asked about; a marker closes it
    stamped = bytearray(txn)
    set_base_offset(stamped, 0, 0, 0)
    state.apply(bytes(stamped))
    assert unverified_producers(txn, state) == []
    marker = bytearray(encode_marker(pid, epoch, True, 0, 1))
    set_base_offset(marker, 0, 1, 0)
    state.apply(bytes(marker))
    assert unverified_producers(txn, state) == [(pid, epoch)]
    older = encode_batch([(None, b"x", 1, ())], producer_id=pid, producer_epoch=epoch - 1 if epoch else 0,
                         base_sequence=0, is_transactional=True)
    if epoch:
        assert unverified_producers(older, state) == []  # the append refuses it: INVALID_PRODUCER_EPOCH
    plain = encode_batch([(None, b"x", 1, ())], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert unverified_producers(plain, state) == []
    # a transaction being completed: retriable for the producer
    st = env.state()
    env.store.states["tx"] = (TxnState(st.producer_id, st.producer_epoch, "PrepareCommit", st.partitions).to_json(),
                              env.store.states["tx"][1])
    with pytest.raises(NotEnoughReplicasError):
        asyncio.run(verify("tx", "t", 0, pid, epoch))


def test_odd_requests_get_error_codes_not_exceptions() -> None:
    """What a client should not send is answered with a code (the connection handler never sees an exception)."""
    env = Env()
    assert env.add_partitions(3, 1, 0, {"t": (-1,), "nope": (0,)}) == {("t", -1): UNKNOWN_TOPIC,
                                                                        ("nope", 0): UNKNOWN_TOPIC}
    assert env.add_partitions(3, 1, 0, {"t": (0,)}, tid="bad id") == {("t", 0): INVALID_REQUEST}
    assert env.call(ADD_OFFSETS, 0, transactional_id="tx", producer_id=1, producer_epoch=0,
                    group_id="bad group").error_code == 24  # INVALID_GROUP_ID
    assert env.call(END, 0, transactional_id="", producer_id=-1, producer_epoch=-1,
                    committed=True).error_code == INVALID_REQUEST
    answer = env.call(TXN_COMMIT, 0, **{**txn_offsets(0, 1, 0, "g", {("t", 0): 1, ("gone", 0): 2}),
                                        "transactional_id": "never"})
    assert {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions} == {
        ("t", 0): INVALID_MAPPING, ("gone", 0): UNKNOWN_TOPIC}
    cls = load_request_schema(DESCRIBE_PRODUCERS, 0)
    body = env.call(DESCRIBE_PRODUCERS, 0, topics=(
        codec.make(codec.nested(cls, "TopicRequest"), name="nope", partition_indexes=(0, -3)),))
    assert all(p.error_code != NONE for p in body.topics[0].partitions)
    assert env.call(DESCRIBE_TXNS, 0, transactional_ids=("", "x" * 300)).transaction_states[0].error_code \
        == TXN_ID_NOT_FOUND


def test_an_unreachable_coordinator_is_coordinator_not_available_not_broker_not_available() -> None:
    """The transaction's coordinator one hop away and out of reach: Kafka clients must be told to look the
    coordinator up again and retry (librdkafka takes BROKER_NOT_AVAILABLE in TxnOffsetCommit as abortable)."""
    env = Env()

    async def unreachable(*args: Any) -> None:
        raise BrokerNotAvailableError("broker 2 is not reachable")

    env.router.add_offsets = unreachable  # type: ignore[method-assign]
    answer = env.call(TXN_COMMIT, 3, **txn_offsets(3, 1, 0, "g", {("t", 0): 1, ("t", 1): 4}))
    assert {p.error_code for t in answer.topics for p in t.partitions} == {COORD_NOT_AVAILABLE}


def test_the_transactional_ids_requests_are_not_coordinator_on_another_broker_and_never_forwarded() -> None:
    """Kafka's brokers answer a transactional id's InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn
    only where it is coordinated: forwarding one would let a late copy of an EndTxn (held up on this broker while
    the client retried elsewhere) end the client's next transaction. TxnOffsetCommit, which the client sends to the
    group's coordinator, still reaches the transaction's coordinator one hop away."""
    env = Env()
    ib = FakeInterBroker(urls={2: "http://b2"}, answer=lambda sent: reply({"transaction": 3}))
    env.router = TransactionRouter(env.coordinator, ib)  # type: ignore[arg-type]
    env.apis._cluster.txn_router = env.router  # type: ignore[attr-defined]
    env.store.coordinators["tx"] = 2
    assert env.init().error_code == NOT_COORDINATOR
    assert env.add_partitions(3, 1000, 0, {"t": (0,)}) == {("t", 0): NOT_COORDINATOR}
    assert env.call(ADD_OFFSETS, 3, transactional_id="tx", producer_id=1000, producer_epoch=0,
                    group_id="g").error_code == NOT_COORDINATOR
    assert env.call(END, 3, transactional_id="tx", producer_id=1000, producer_epoch=0,
                    committed=True).error_code == NOT_COORDINATOR
    assert ib.sent == []
    commit = env.call(TXN_COMMIT, 3, **txn_offsets(3, 1000, 0, "g", {("t", 0): 10}))
    assert commit.topics[0].partitions[0].error_code == NONE
    assert [s.request.path for s in ib.sent] == ["/transactions/tx/offsets"]


def test_an_endtxn_overtaken_by_its_retry_cannot_end_the_next_transaction() -> None:
    """A client's EndTxn waits on ZooKeeper to locate the coordinator (a connection loss, retried) while the client
    times out, retries it, is answered, and begins its next transaction. Reaching the id's lock last, the first
    attempt is CONCURRENT_TRANSACTIONS: it arrived before requests already served, so the next transaction stays
    open with its partition and no COMMIT marker is written for it."""
    env = Env()
    init = env.init()
    pid, epoch = init.producer_id, init.producer_epoch
    assert env.add_partitions(3, pid, epoch, {"t": (0,)}) == {("t", 0): NONE}
    real_locate = env.router._router._locate  # type: ignore[attr-defined]
    held = asyncio.Event()
    holding: list[bool] = [True]

    async def slow_first_locate(tid: str) -> int:
        if holding[0]:
            holding[0] = False
            await held.wait()
        return await real_locate(tid)

    env.router._router._locate = slow_first_locate  # type: ignore[attr-defined]

    async def scenario() -> tuple[BaseException | str, str]:
        first = asyncio.create_task(env.router.end("tx", pid, epoch, True))
        await asyncio.sleep(0.01)  # the first attempt has its ticket and waits on "ZooKeeper"
        retried = await env.router.end("tx", pid, epoch, True)
        await env.router.add_partitions("tx", pid, epoch, [("t", 1)])
        held.set()
        try:
            late: BaseException | str = (await first).value
        except ConcurrentTransactionsError as e:
            late = e
        return late, retried.value

    late, retried = asyncio.run(scenario())
    assert retried == "CompleteCommit"
    assert isinstance(late, ConcurrentTransactionsError), late
    st = env.state()
    assert st.state == "Ongoing" and st.partitions == (("t", 1),)
    assert [(m[0], m[1], m[4]) for m in env.markers] == [("t", 0, True)]  # the first transaction's commit only
