"""``KafkaApis``: one handler per Kafka API, as Kafka's class of the same name.

Each handler decodes (kio, through :mod:`~broker.kafka.codec`), authorizes (the broker's authorizer, Kafka's
operations), calls a service (the metadata cache, the data path's services of
:mod:`~broker.kafka.partitions`, through Kafka's fetch rules in :mod:`~broker.kafka.fetch` for Fetch) and builds
the response of the request's version. No storage or ZooKeeper logic lives here.

Errors: every error code an answer carries is a typed error's ``kafka_code`` (odradek.protocol.errors), per
partition or per topic where Kafka puts them; an exception that is not a typed error
becomes UNKNOWN_SERVER_ERROR for that partition (and is logged), never a dropped connection.

Requests this broker cannot serve: an ApiVersions request at a version it does not know is answered as Kafka
answers it (a v0 response with UNSUPPORTED_VERSION and the supported versions, so the client can pick one); any
other unsupported API or version, or bytes that do not parse, close the connection (Kafka's answer too: the
client cannot be in step with a broker that did not understand it).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol, cast

from broker import eager
from broker.admin.topics import validate_topic_name
from broker.fetch.offsets import ListOffsetsRequest
from broker.fetch.service import READ_COMMITTED as FETCH_READ_COMMITTED
from broker.fetch.service import READ_UNCOMMITTED as FETCH_READ_UNCOMMITTED
from broker.fetch.service import ReplicaFetch
from broker.fetch.sessions import FINAL_EPOCH, FetchContext, PartitionFetch, PartitionOutcome, SessionEntry
from broker.kafka import codec, fetch_response
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, TOPIC, TRANSACTIONAL_ID, KafkaAuthorizer
from broker.kafka.codec import API_VERSIONS, FETCH, LIST_OFFSETS, METADATA, PRODUCE, Request, make, nested
from broker.kafka.coordinators import KafkaCoordinators
from broker.kafka.errors import NONE, code, typed
from broker.kafka.fetch import FetchAnswer, FetchWant, fetch
from broker.kafka.fetch_response import PartitionAnswer, TopicAnswer
from broker.kafka.frames import FileRecordsValue, ResponseFrame
from broker.kafka.group_offsets import KafkaGroupOffsets
from broker.kafka.groups import KafkaGroups
from broker.kafka.leader_epochs import LeaderEpochApis
from broker.kafka.network import CloseConnection, Connection
from broker.kafka.partitions import PartitionServices
from broker.kafka.sasl import SaslApis
from broker.kafka.transactions import KafkaTransactions
from broker.metadata.cache import topic_uuid
from odradek.protocol.errors import (
    CorruptRecordError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OdradekError,
    OffsetNotAvailableError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicError,
    UnknownTopicIdError,
    UnsupportedVersionError,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metadata.cache import MetadataCache

log = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)
READ_COMMITTED = 1
OFFSET_NOT_AVAILABLE_VERSION = 5  # ListOffsets v5 added OFFSET_NOT_AVAILABLE; older versions get LEADER_NOT_AVAILABLE
METADATA_READY_WAIT_S = 10.0  # a broker still loading its metadata answers once it knows (as GET /metadata)
# KIP-511: what ApiVersions v3+ accepts as a client software name or version.
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


class ClusterView(Protocol):
    """What the handlers read of the broker itself (``broker.server.Broker`` is one)."""

    broker_id: int
    cluster_id: str | None
    controller_id: int | None
    ready: asyncio.Event


Handler = Callable[[Connection, Request], Awaitable[Any]]


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


class KafkaApis:
    def __init__(self, cluster: ClusterView, cache: MetadataCache, partitions: PartitionServices,
                 authorizer: KafkaAuthorizer, config: BrokerConfig) -> None:
        self._cluster = cluster
        self._cache = cache
        self._partitions = partitions
        self._auth = authorizer
        self._config = config
        self._handlers: dict[int, Handler] = {
            API_VERSIONS: self.handle_api_versions,
            METADATA: self.handle_metadata,
            PRODUCE: self.handle_produce,
            LIST_OFFSETS: self.handle_list_offsets,
            FETCH: self.handle_fetch,
        }
        self._handlers.update(SaslApis().handlers())  # out-of-turn SASL requests (broker/kafka/sasl.py)
        self._handlers.update(LeaderEpochApis(partitions, authorizer).handlers())  # broker/kafka/leader_epochs.py
        self._handlers.update(KafkaTransactions(cluster, cache, authorizer).handlers())  # broker/kafka/transactions.py
        self._handlers.update(KafkaCoordinators(cluster, cache, authorizer).handlers())  # broker/kafka/coordinators.py
        self._handlers.update(KafkaGroups(cluster, authorizer).handlers())  # broker/kafka/groups.py
        self._handlers.update(KafkaGroupOffsets(cluster, cache, authorizer).handlers())  # broker/kafka/group_offsets.py
        from broker.kafka.admin import AdminApis  # here: its handlers import this module's helpers

        self._handlers.update(AdminApis(cluster, authorizer).handlers())  # topics, configs, ACLs, quotas
        assert set(codec.SUPPORTED) <= set(self._handlers), "an API is advertised without a handler"

    async def handle(self, conn: Connection, frame: bytes) -> bytes | ResponseFrame | None:
        """One request frame to its response frame (None: no response, as for acks=0). A Fetch answer carrying
        file ranges is a :class:`ResponseFrame` (sent with ``sendfile``; its sender closes it)."""
        try:
            header = codec.read_header(frame)
        except InvalidRequestError as e:
            raise CloseConnection(e.message) from None
        try:
            request = codec.decode_request(frame, header)
        except UnsupportedVersionError as e:
            if header.api_key == API_VERSIONS:
                return codec.encode_response(API_VERSIONS, 0, header.correlation_id,
                                             self._api_versions_body(0, e))
            raise CloseConnection(f"{e.message} (client {header.client_id!r})") from None
        except InvalidRequestError as e:
            raise CloseConnection(f"{e.message} (client {header.client_id!r})") from None
        body = await self._handlers[header.api_key](conn, request)
        if body is None:
            return None
        if header.api_key == FETCH:  # written by its handler (broker/kafka/fetch_response.py)
            return cast(bytes | ResponseFrame, body)
        return codec.encode_response(header.api_key, header.api_version, header.correlation_id, body)

    # ------------------------------------------------------------------------------------------ ApiVersions

    async def handle_api_versions(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        if version >= 3 and not (_SOFTWARE.fullmatch(body.client_software_name or "")
                                 and _SOFTWARE.fullmatch(body.client_software_version or "")):
            error = InvalidRequestError("client_software_name and client_software_version must match "
                                        f"{_SOFTWARE.pattern}")
            return make(codec.response_class(API_VERSIONS, version), error_code=code(error), api_keys=(),
                        throttle_time=NO_THROTTLE)
        return self._api_versions_body(version, None)

    def _api_versions_body(self, version: int, error: OdradekError | None) -> Any:
        cls = codec.response_class(API_VERSIONS, version)
        api_version = nested(cls, "ApiVersion")
        keys = tuple(make(api_version, api_key=k, min_version=low, max_version=high)
                     for k, (low, high) in sorted(codec.SUPPORTED.items()))
        return make(cls, error_code=code(error), api_keys=keys, throttle_time=NO_THROTTLE)

    # --------------------------------------------------------------------------------------------- Metadata

    async def handle_metadata(self, conn: Connection, request: Request) -> Any:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._cluster.ready.wait(), METADATA_READY_WAIT_S)
        version = request.header.api_version
        cls = codec.response_class(METADATA, version)
        body = request.body
        cache = self._cache
        # From here on, no await: one consistent snapshot of the cache.
        if body.topics is None or (version == 0 and not body.topics):
            names = sorted(cache.topics)
            if self._auth.enforcing:
                names = [n for n in names if self._auth.allowed(conn, "Describe", TOPIC, n)]
            topics = [self._topic_metadata(cls, conn, name) for name in names]
        else:
            topics = [self._requested_topic(cls, conn, t) for t in body.topics]
        broker_cls = nested(cls, "MetadataResponseBroker")
        brokers = []
        for b in sorted(cache.brokers.values(), key=lambda b: b.broker_id):
            endpoint = self._endpoint(b.broker_id, conn.listener.name)
            if endpoint is not None:
                brokers.append(make(broker_cls, node_id=b.broker_id, host=endpoint[0], port=endpoint[1],
                                    rack=b.rack))
        controller = self._cluster.controller_id
        return make(cls, throttle_time=NO_THROTTLE, brokers=tuple(brokers), cluster_id=self._cluster.cluster_id,
                    controller_id=-1 if controller is None else controller, topics=tuple(topics),
                    cluster_authorized_operations=-2147483648)

    def _requested_topic(self, cls: type[Any], conn: Connection, wanted: Any) -> Any:
        name = getattr(wanted, "name", None)
        topic_id = getattr(wanted, "topic_id", None)
        if name is None and topic_id is not None:  # v10+: a topic named by id only
            name = self._cache.topic_name(topic_id)
            if name is None:
                return self._topic_error(cls, "", UnknownTopicError(f"no topic has id {topic_id}"), topic_id)
        if name is None:
            return self._topic_error(cls, "", InvalidRequestError("a requested topic has neither name nor id"))
        try:
            validate_topic_name(name)
        except InvalidTopicError as e:
            return self._topic_error(cls, name, e)
        if not self._auth.allowed(conn, "Describe", TOPIC, name):
            return self._topic_error(cls, name, TopicAuthorizationFailedError(
                f"{self._auth.principal(conn)} may not Describe topic {name}"))
        return self._topic_metadata(cls, conn, name)

    def _topic_error(self, cls: type[Any], name: str, error: OdradekError, topic_id: uuid.UUID | None = None) -> Any:
        return make(nested(cls, "MetadataResponseTopic"), error_code=code(error), name=name, topic_id=topic_id,
                    is_internal=False, partitions=(), topic_authorized_operations=-2147483648)

    def _topic_metadata(self, cls: type[Any], conn: Connection, name: str) -> Any:
        cache = self._cache
        assignment = cache.topics.get(name)
        if assignment is None:
            # No auto-creation: the HTTP API creates topics only when asked to (admin calls), so does this door.
            return self._topic_error(cls, name, UnknownTopicError(f"topic '{name}' does not exist"))
        partition_cls = nested(cls, "MetadataResponsePartition")
        partitions = []
        for p, assigned in sorted(assignment.partitions.items()):
            info = cache.partitions.get((name, p))
            replicas = tuple(info.replicas) if info is not None else tuple(assigned)
            offline = tuple(r for r in replicas if r not in cache.brokers)
            leader = info.leader if info is not None else -1
            error: OdradekError | None = None
            if leader < 0 or self._endpoint(leader, conn.listener.name) is None:
                error = LeaderNotAvailableError(f"{name}-{p} has no leader reachable on {conn.listener.name}")
                leader = -1
            partitions.append(make(
                partition_cls, error_code=code(error), partition_index=p, leader_id=leader,
                leader_epoch=info.leader_epoch if info is not None else -1, replica_nodes=replicas,
                isr_nodes=tuple(info.isr) if info is not None else (), offline_replicas=offline))
        return make(nested(cls, "MetadataResponseTopic"), error_code=NONE, name=name,
                    topic_id=topic_uuid(assignment.topic_id), is_internal=False, partitions=tuple(partitions),
                    topic_authorized_operations=-2147483648)

    def _endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """A live broker's advertised Kafka address on ``listener`` (Kafka's rule: a broker without the
        listener the request came on is not named)."""
        info = self._cache.brokers.get(broker_id)
        if info is None:
            return None
        for e in info.kafka_endpoints:
            if e.listener == listener:
                return e.host, e.port
        return None

    # ---------------------------------------------------------------------------------------------- Produce

    async def handle_produce(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        acks, timeout_ms = int(body.acks), max(0, _ms(body.timeout))
        txn = getattr(body, "transactional_id", None)
        refusal: OdradekError | None = None
        if acks not in (0, 1, -1):
            refusal = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
        elif txn is not None and not self._auth.allowed(conn, "Write", TRANSACTIONAL_ID, txn):
            refusal = TransactionalIdAuthorizationFailedError(
                f"{self._auth.principal(conn)} may not Write transactional id {txn}")
        jobs: list[tuple[str, int, Coroutine[Any, Any, Any]]] = []
        for topic in body.topic_data:
            name = str(topic.name)
            denied = refusal
            if denied is None and not self._auth.allowed(conn, "Write", TOPIC, name):
                denied = TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Write topic {name}")
            for p in topic.partition_data:
                jobs.append((name, int(p.index), self._append(name, int(p.index), p.records, acks, timeout_ms,
                                                              denied, txn)))
        # Eagerly: an append to a partition led here never waits (acks 0 and 1), and the answer then goes out
        # before the follower fetches the append woke (broker/eager.py), as Kafka answers the produce first.
        results = await eager.gather(*(job for _, _, job in jobs))
        if acks == 0:
            failed = [f"{t}-{p}: {r.message}" for (t, p, _), r in zip(jobs, results, strict=True)
                      if isinstance(r, OdradekError)]
            if failed:  # Kafka's only way to tell an acks=0 producer: close its connection
                raise CloseConnection(f"acks=0 produce failed ({'; '.join(failed[:3])})")
            return None
        cls = codec.response_class(PRODUCE, version)
        part_cls = nested(cls, "PartitionProduceResponse")
        leader_cls = nested(cls, "LeaderIdAndEpoch") if version >= 10 else None
        by_topic: dict[str, list[Any]] = {}
        leaders: set[int] = set()
        for (topic_name, partition, _), result in zip(jobs, results, strict=True):
            if isinstance(result, OdradekError):
                current = self._current_leader(leader_cls, result)
                if current is not None and current.leader_id >= 0:
                    leaders.add(current.leader_id)
                entry = make(part_cls, index=partition, error_code=code(result), base_offset=-1,
                             log_append_time=None, log_start_offset=-1, record_errors=(),
                             error_message=result.message,
                             **({"current_leader": current} if current is not None else {}))
            else:
                entry = make(part_cls, index=partition, error_code=NONE, base_offset=result.base_offset,
                             log_append_time=_timestamp(result.log_append_time),
                             log_start_offset=result.log_start_offset, record_errors=(), error_message=None)
            by_topic.setdefault(topic_name, []).append(entry)
        topic_cls = nested(cls, "TopicProduceResponse")
        responses = tuple(make(topic_cls, name=t, partition_responses=tuple(ps)) for t, ps in by_topic.items())
        return make(cls, responses=responses, throttle_time=NO_THROTTLE,
                    node_endpoints=self._node_endpoints(cls, conn, leaders) if version >= 10 else ())

    async def _append(self, topic: str, partition: int, records: bytes | None, acks: int, timeout_ms: int,
                      denied: OdradekError | None, transactional_id: str | None = None) -> Any:
        if denied is not None:
            return denied
        try:
            if not records:
                raise CorruptRecordError("a produce request's partition carries no record batch")
            txns = self._partitions.transactions  # KIP-890: transactional batches verified with the coordinator
            verify = None if txns is None else functools.partial(txns.verify_produce, transactional_id, topic,
                                                                  partition)
            return await self._partitions.produce.append_batches(topic, partition, bytearray(records), acks,
                                                                 timeout_ms, verify_txn=verify)
        except Exception as e:
            return typed(e, f"produce to {topic}-{partition}")

    def _current_leader(self, leader_cls: type[Any] | None, error: OdradekError) -> Any:
        """Produce v10+: where a client should go instead (KIP-951), from NOT_LEADER_OR_FOLLOWER."""
        current = _current_leader(error) if leader_cls is not None else None
        return None if current is None else make(leader_cls, leader_id=current[0], leader_epoch=current[1])

    def _node_endpoints(self, cls: type[Any], conn: Connection, broker_ids: Iterable[int]) -> tuple[Any, ...]:
        node_cls = nested(cls, "NodeEndpoint")
        out = []
        for b in sorted(broker_ids):
            endpoint = self._endpoint(b, conn.listener.name)
            if endpoint is not None:
                info = self._cache.brokers[b]
                out.append(make(node_cls, node_id=b, host=endpoint[0], port=endpoint[1], rack=info.rack))
        return tuple(out)

    # ------------------------------------------------------------------------------------------ ListOffsets

    async def handle_list_offsets(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        # A replica id (a follower asking its leader's log bounds) reads up to the log end, as Kafka's
        # isolation "none"; anyone may claim one, as in Kafka: it shows offsets, never records.
        replica = int(getattr(body, "replica_id", -1)) >= 0
        committed = not replica and int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
        cls = codec.response_class(LIST_OFFSETS, version)
        part_cls = nested(cls, "ListOffsetsPartitionResponse")
        topics = []
        for topic in body.topics:
            name = str(topic.name)
            allowed = self._auth.allowed(conn, "Describe", TOPIC, name)
            results = await asyncio.gather(*(self._list_offset(conn, name, p, committed, allowed, replica)
                                             for p in topic.partitions))
            entries = []
            for p, result in zip(topic.partitions, results, strict=True):
                if isinstance(result, OffsetNotAvailableError) and version < OFFSET_NOT_AVAILABLE_VERSION:
                    result = LeaderNotAvailableError(result.message)  # Kafka's answer before the code existed
                if isinstance(result, OdradekError):
                    entries.append(make(part_cls, partition_index=p.partition_index, error_code=code(result),
                                        timestamp=-1, offset=-1, leader_epoch=-1))
                else:
                    entries.append(make(part_cls, partition_index=p.partition_index, error_code=NONE,
                                        timestamp=result.timestamp, offset=result.offset,
                                        leader_epoch=result.leader_epoch))
            topics.append(make(nested(cls, "ListOffsetsTopicResponse"), name=name, partitions=tuple(entries)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    async def _list_offset(self, conn: Connection, topic: str, p: Any, committed: bool, allowed: bool,
                           replica: bool) -> Any:
        if not allowed:
            return TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Describe topic {topic}")
        try:
            return await self._partitions.offsets.leader_offset(ListOffsetsRequest(
                topic, int(p.partition_index), FETCH_READ_COMMITTED if committed else FETCH_READ_UNCOMMITTED,
                timestamp=int(p.timestamp), current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)),
                replica=replica))
        except Exception as e:
            return typed(e, f"list offsets of {topic}-{p.partition_index}")

    # ------------------------------------------------------------------------------------------------ Fetch

    async def handle_fetch(self, conn: Connection, request: Request) -> Any:
        """Fetch with incremental fetch sessions (KIP-227, broker/fetch/sessions.py): the session context says
        which partitions are read (an incremental request's are the session's) and which the answer carries.

        Topic ids (v13+, KIP-516): a request names topics by id only, resolved to names through the metadata
        cache at each request (as Kafka's ``topicIdsToNames``); an id no topic has is UNKNOWN_TOPIC_ID for its
        partitions, and the answer names topics by id again. The session keys those partitions by id (see
        broker/fetch/sessions.py), so a topic recreated under its name is not the one a v13 fetcher asked for.

        A replica's fetch (``replica_id`` >= 0 up to v14, ``replica_state.replica_id`` from v15, KIP-903) needs
        ClusterAction on the cluster; without it every partition is TOPIC_AUTHORIZATION_FAILED, which is Kafka's
        answer (KafkaApis.handleFetchRequest: per partition, no top-level error). Each partition then goes to the
        follower-fetch service through the fetch service, which decides everything of a follower's fetch (see
        broker/kafka/fetch.py for when the answer goes out); its session is privileged. The broker epoch is
        ``replica_state.replica_epoch`` at v15; before v15 a request carries none, and the service refuses a
        fetch claiming none (STALE_BROKER_EPOCH, as over HTTP): a fetch that may move the ISR and the high
        watermark must prove it comes from the broker's current incarnation, so a replica fetches at v15 (Kafka's
        brokers send v15+ to each other since 3.5).

        Zero copy: on a listener without TLS the reads may be file ranges (broker/kafka/fetch.py), put in the body
        as :class:`FileRecordsValue` so that the answer is encoded around them and sent with ``sendfile``
        (broker/kafka/frames.py); over TLS the bytes have to pass through Python to be encrypted anyway, so the
        reads are bytes, as asyncio's ``sendfile`` fallback would make them. The values own the ranges'
        descriptors from the moment the reads return; those of partitions the answer does not carry, and all of
        them if building the answer fails, are closed here."""
        version = request.header.api_version
        correlation_id = request.header.correlation_id
        body = request.body
        replica_id, replica_epoch = _replica(body)
        follower = replica_id >= 0
        cluster_action = follower and self._auth.allowed(conn, "ClusterAction", CLUSTER, CLUSTER_NAME)
        committed = not follower and int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
        max_bytes = int(getattr(body, "max_bytes", 2**31 - 1))
        by_id = version >= 13
        wanted = [PartitionFetch(_topic_key(t, by_id), int(p.partition), int(p.fetch_offset),
                                 int(p.partition_max_bytes), int(getattr(p, "current_leader_epoch", -1)),
                                 int(getattr(p, "last_fetched_epoch", -1)), int(getattr(p, "log_start_offset", -1)))
                  for t in body.topics for p in t.partitions]
        sessions = self._partitions.sessions
        reader = self._partitions.fetches
        if version >= 7:
            forgotten = [(_topic_key(t, by_id), int(p)) for t in body.forgotten_topics_data for p in t.partitions]
            # A follower's current incarnation: its session keeps quiet partitions out of its rounds.
            current = cluster_action and reader.replica_registered(ReplicaFetch(replica_id, replica_epoch, None))
            context = sessions.new_context(int(body.session_id), int(body.session_epoch), wanted, forgotten,
                                           privileged=cluster_action, topic_ids=by_id,
                                           replica_id=replica_id if current else -1)
        else:  # before KIP-227: every fetch is a full, sessionless one
            context = sessions.new_context(0, FINAL_EPOCH, wanted)
        if context.error is not None:
            return fetch_response.encode(version, correlation_id, error_code=code(context.error).value, session_id=0,
                                         topics=())
        partitions = context.partitions  # grows with the quiet partitions that join the round (_JoiningRound)
        names = self._topic_names(p.topic for p in partitions) if by_id else {p.topic: p.topic for p in partitions}
        denied: dict[str, OdradekError | None] = {}

        def want(p: PartitionFetch, mark: SessionEntry | None) -> FetchWant | None:
            if by_id and p.topic not in names:
                names.update(self._topic_names((p.topic,)))
            name = names.get(p.topic) if by_id else p.topic
            if p.topic not in denied:
                denied[p.topic] = self._fetch_refusal(conn, p.topic, name, follower, cluster_action)
            if denied[p.topic] is not None or name is None:
                return None
            replica = None if not follower else ReplicaFetch(
                replica_id, replica_epoch, None if p.current_leader_epoch < 0 else p.current_leader_epoch)
            return FetchWant(name, p.partition, p.fetch_offset, max(1, min(p.max_bytes, max_bytes)),
                             p.current_leader_epoch, replica, mark)

        marks = context.marks
        wants = [w for w in (want(p, marks[i] if marks is not None else None) for i, p in enumerate(partitions))
                 if w is not None]
        got = await fetch(reader, wants,
                          max_wait_ms=min(max(0, _ms(body.max_wait)), self._config.fetch_max_wait_ms),
                          min_bytes=int(body.min_bytes), max_bytes=max_bytes, committed=committed,
                          zero_copy=not conn.listener.tls,
                          joining=_JoiningRound(context, want) if context.joinable else None)
        # From here the values own the file ranges (closed at most once, by the sender or by a finalizer).
        files = {id(a.read): FileRecordsValue(a.read.records) for a in got
                 if a.read is not None and not isinstance(a.read.records, bytes | bytearray)}
        try:
            return self._fetch_answer(version, correlation_id, partitions, denied, iter(got), files, context, names,
                                      by_id, committed)
        except BaseException:
            for value in files.values():
                value.close()
            raise

    def _fetch_answer(self, version: int, correlation_id: int, partitions: list[PartitionFetch],
                      denied: dict[str, OdradekError | None], answers: Iterator[FetchAnswer],
                      files: dict[int, FileRecordsValue], context: FetchContext, names: dict[str, str], by_id: bool,
                      committed: bool) -> bytes | ResponseFrame:
        """The Fetch response frame from the reads (``files``: their file ranges, by the read's id), as the fetch
        session says to carry them; the ranges of partitions left out are closed."""
        results: list[tuple[OdradekError | None, Any]] = []
        for p in partitions:
            refusal = denied[p.topic]
            if refusal is not None:
                results.append((refusal, None))
            else:
                answer = next(answers)
                results.append((answer.error, answer.read))
        reply = context.respond([
            PartitionOutcome(0, -1, -1, error=True) if error is not None or read is None else
            PartitionOutcome(read.size, read.high_watermark, read.log_start_offset)
            for error, read in results])
        carried = set(reply.carried)
        for i, (_, read) in enumerate(results):
            if i not in carried and read is not None and id(read) in files:
                files[id(read)].close()
        if reply.error is not None:
            for value in files.values():
                value.close()
            return fetch_response.encode(version, correlation_id, error_code=code(reply.error).value,
                                         session_id=reply.session_id, topics=())
        topics: list[TopicAnswer] = []
        topic: str | None = None
        entries: list[PartitionAnswer] = []

        def close_topic() -> None:
            if topic is not None:
                topics.append(TopicAnswer(names.get(topic) or "", _topic_uuid(topic) if by_id else None, entries))

        for i in reply.carried:  # consecutive partitions of a topic under one topic entry, as Kafka's builder
            p = partitions[i]
            if p.topic != topic:
                close_topic()
                topic, entries = p.topic, []
            error, read = results[i]
            if error is not None or read is None:
                entries.append(PartitionAnswer(p.partition, code(error).value, -1, -1, -1, () if committed else None,
                                               b"", _current_leader(error) if version >= 12 else None))
            else:
                entries.append(PartitionAnswer(
                    p.partition, 0, read.high_watermark, read.last_stable_offset, read.log_start_offset,
                    [(a.producer_id, a.first_offset) for a in read.aborted_transactions] if committed else None,
                    files.get(id(read), read.records)))
        close_topic()
        return fetch_response.encode(version, correlation_id, error_code=0, session_id=reply.session_id,
                                     topics=topics)

    def _topic_names(self, keys: Iterable[str]) -> dict[str, str]:
        """The names of the topics whose ids (session keys: the UUIDs' strings) are ``keys``, as the cache knows
        them now; an id no topic has is left out. Looked up in the cache's id index (``TopicTable.name_of``), so
        a fetch costs the same whatever the number of topics in the cluster."""
        out: dict[str, str] = {}
        for key in set(keys):
            name = self._cache.topic_name(_topic_uuid(key))
            if name is not None:
                out[key] = name
        return out

    def _fetch_refusal(self, conn: Connection, key: str, name: str | None, follower: bool,
                       cluster_action: bool) -> OdradekError | None:
        """Why a topic's partitions are not read, in Kafka's order: a replica without ClusterAction, then a topic
        id no topic has, then (a consumer) Read on the topic."""
        principal = self._auth.principal(conn)
        if follower and not cluster_action:
            return TopicAuthorizationFailedError(
                f"{principal} may not ClusterAction the cluster, which a replica's fetch needs")
        if name is None:
            return UnknownTopicIdError(f"no topic has id {key}")
        if not follower and not self._auth.allowed(conn, "Read", TOPIC, name):
            return TopicAuthorizationFailedError(f"{principal} may not Read topic {name}")
        return None


class _JoiningRound:
    """A follower's round over its fetch session's changed partitions only (broker/kafka/fetch.py's ``Joining``):
    the quiet partitions that change while it waits join it, each as the round's other partitions are wanted."""

    def __init__(self, context: FetchContext,
                 want: Callable[[PartitionFetch, SessionEntry | None], FetchWant | None]) -> None:
        self._context = context
        self._want = want

    def arm(self, waiter: asyncio.Future[None]) -> None:
        self._context.arm(waiter)

    def disarm(self, waiter: asyncio.Future[None]) -> None:
        self._context.disarm(waiter)

    def take(self) -> list[FetchWant]:
        wants = (self._want(p, entry) for p, entry in self._context.take_joined())
        return [w for w in wants if w is not None]


def _replica(body: Any) -> tuple[int, int]:
    """Who fetches: (replica id, broker epoch); (-1, -1) for a consumer. v15 carries both in ``replica_state``
    (KIP-903); before, the replica id alone is top-level and there is no broker epoch (-1)."""
    state = getattr(body, "replica_state", None)
    if state is not None:
        return int(state.replica_id), int(state.replica_epoch)
    return int(getattr(body, "replica_id", -1)), -1


def _current_leader(error: OdradekError | None) -> tuple[int, int] | None:
    """Where a client should go instead (KIP-951: Produce v10+, Fetch v12+), from NOT_LEADER_OR_FOLLOWER: the
    leader's id and epoch, -1 for what is not known."""
    if not isinstance(error, NotLeaderOrFollowerError):
        return None
    leader = error.details.get("leader")
    epoch = error.details.get("leader_epoch")
    return (leader if isinstance(leader, int) else -1, epoch if isinstance(epoch, int) else -1)


def _topic_key(topic: Any, by_id: bool) -> str:
    """A requested topic's session key: its name before v13, its id (the UUID's string) from v13."""
    if not by_id:
        return str(topic.topic)
    return _uuid_key(topic.topic_id or _NULL_UUID)


# A fetch turns each topic id to its session key and back (every replica round, for every topic it carries): both
# ways cached, bounded so that ids a client makes up cannot grow them.
_NULL_UUID = uuid.UUID(int=0)
_uuid_key = functools.lru_cache(maxsize=4096)(str)
_topic_uuid = functools.lru_cache(maxsize=4096)(uuid.UUID)


def _timestamp(ms: int | None) -> datetime.datetime | None:
    return None if ms is None or ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
