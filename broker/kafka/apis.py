"""``KafkaApis``: one handler per Kafka API, as Kafka's class of the same name.

Each handler decodes (kio, through :mod:`~broker.kafka.codec`), authorizes (the broker's authorizer, Kafka's
operations), calls a service (the metadata cache, the leader-only partition calls of
:mod:`~broker.kafka.partitions`, Kafka's fetch rules in :mod:`~broker.kafka.fetch`) and builds the response of
the request's version. No storage or ZooKeeper logic lives here.

Errors: every error code an answer carries is a typed error's ``kafka_code`` (odradek.protocol.errors and
broker.kafka.errors), per partition or per topic where Kafka puts them; an exception that is not a typed error
becomes UNKNOWN_SERVER_ERROR for that partition (and is logged), never a dropped connection.

Requests this broker cannot serve: an ApiVersions request at a version it does not know is answered as Kafka
answers it (a v0 response with UNSUPPORTED_VERSION and the supported versions, so the client can pick one); any
other unsupported API or version, or bytes that do not parse, close the connection (Kafka's answer too: the
client cannot be in step with a broker that did not understand it).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.admin.topics import validate_topic_name
from broker.kafka import codec
from broker.kafka.authorization import TOPIC, TRANSACTIONAL_ID, KafkaAuthorizer
from broker.kafka.codec import API_VERSIONS, FETCH, LIST_OFFSETS, METADATA, PRODUCE, Request, make, nested
from broker.kafka.errors import InvalidRequiredAcksError, UnsupportedVersionError
from broker.kafka.fetch import FetchWant, fetch
from broker.kafka.network import CloseConnection, Connection
from broker.kafka.partitions import LeaderPartitions
from odradek.protocol.errors import (
    CorruptRecordError,
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OdradekError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownServerError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metadata.cache import MetadataCache

log = logging.getLogger(__name__)

NONE = ErrorCode(0)
NO_THROTTLE = datetime.timedelta(0)
READ_COMMITTED = 1
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


def code(error: OdradekError | None) -> ErrorCode:
    if error is None:
        return NONE
    try:
        return ErrorCode(error.kafka_code)
    except ValueError:
        return ErrorCode(UnknownServerError.kafka_code)


def _typed(e: Exception, what: str) -> OdradekError:
    if isinstance(e, OdradekError):
        return e
    log.exception("Kafka %s failed", what, exc_info=e)
    return UnknownServerError(f"{what} failed: {e}")


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


def topic_uuid(topic_id: str | None) -> uuid.UUID | None:
    """The topic id as Kafka puts it on the wire (a UUID) from its ZooKeeper form (url-safe base64)."""
    if not topic_id:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4)))
    except ValueError:
        return None


class KafkaApis:
    def __init__(self, cluster: ClusterView, cache: MetadataCache, leaders: LeaderPartitions,
                 authorizer: KafkaAuthorizer, config: BrokerConfig) -> None:
        self._cluster = cluster
        self._cache = cache
        self._leaders = leaders
        self._auth = authorizer
        self._config = config
        self._handlers: dict[int, Handler] = {
            API_VERSIONS: self.handle_api_versions,
            METADATA: self.handle_metadata,
            PRODUCE: self.handle_produce,
            LIST_OFFSETS: self.handle_list_offsets,
            FETCH: self.handle_fetch,
        }
        assert set(codec.SUPPORTED) <= set(self._handlers), "an API is advertised without a handler"

    async def handle(self, conn: Connection, frame: bytes) -> bytes | None:
        """One request frame to its response frame (None: no response, as for acks=0)."""
        try:
            header = codec.read_header(frame)
        except InvalidRequestError as e:
            raise CloseConnection(e.message) from None
        try:
            request = codec.decode_request(frame)
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
            name = next((t for t, a in self._cache.topics.items() if topic_uuid(a.topic_id) == topic_id), None)
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
        jobs: list[tuple[str, int, Awaitable[Any]]] = []
        for topic in body.topic_data:
            name = str(topic.name)
            denied = refusal
            if denied is None and not self._auth.allowed(conn, "Write", TOPIC, name):
                denied = TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Write topic {name}")
            for p in topic.partition_data:
                jobs.append((name, int(p.index), self._append(name, int(p.index), p.records, acks, timeout_ms,
                                                              denied)))
        results = await asyncio.gather(*(job for _, _, job in jobs))
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
                      denied: OdradekError | None) -> Any:
        if denied is not None:
            return denied
        try:
            if not records:
                raise CorruptRecordError("a produce request's partition carries no record batch")
            return await self._leaders.append(topic, partition, bytes(records), acks, timeout_ms)
        except Exception as e:
            return _typed(e, f"produce to {topic}-{partition}")

    def _current_leader(self, leader_cls: type[Any] | None, error: OdradekError) -> Any:
        """Produce v10+ / Fetch v12+: where a client should go instead (KIP-951), from NOT_LEADER_OR_FOLLOWER."""
        if leader_cls is None or not isinstance(error, NotLeaderOrFollowerError):
            return None
        leader = error.details.get("leader")
        epoch = error.details.get("leader_epoch")
        return make(leader_cls, leader_id=leader if isinstance(leader, int) else -1,
                    leader_epoch=epoch if isinstance(epoch, int) else -1)

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
        committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
        cls = codec.response_class(LIST_OFFSETS, version)
        part_cls = nested(cls, "ListOffsetsPartitionResponse")
        topics = []
        for topic in body.topics:
            name = str(topic.name)
            allowed = self._auth.allowed(conn, "Describe", TOPIC, name)
            results = await asyncio.gather(*(self._list_offset(conn, name, p, committed, allowed)
                                             for p in topic.partitions))
            entries = []
            for p, result in zip(topic.partitions, results, strict=True):
                if isinstance(result, OdradekError):
                    entries.append(make(part_cls, partition_index=p.partition_index, error_code=code(result),
                                        timestamp=-1, offset=-1, leader_epoch=-1))
                else:
                    entries.append(make(part_cls, partition_index=p.partition_index, error_code=NONE,
                                        timestamp=result.timestamp, offset=result.offset,
                                        leader_epoch=result.leader_epoch))
            topics.append(make(nested(cls, "ListOffsetsTopicResponse"), name=name, partitions=tuple(entries)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    async def _list_offset(self, conn: Connection, topic: str, p: Any, committed: bool, allowed: bool) -> Any:
        if not allowed:
            return TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Describe topic {topic}")
        try:
            return await self._leaders.list_offset(topic, int(p.partition_index), int(p.timestamp),
                                                   committed=committed,
                                                   current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)))
        except Exception as e:
            return _typed(e, f"list offsets of {topic}-{p.partition_index}")

    # ------------------------------------------------------------------------------------------------ Fetch

    async def handle_fetch(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(FETCH, version)
        committed = int(getattr(body, "isolation_level", 0)) == READ_COMMITTED
        session_id = int(getattr(body, "session_id", 0))
        if session_id != 0:  # we never hand out a fetch session (KIP-227 allows it), so none can be continued
            error = InvalidRequestError(f"fetch session {session_id} does not exist: this broker keeps none")
            return make(cls, throttle_time=NO_THROTTLE, error_code=code(error), session_id=0, responses=())
        max_bytes = int(getattr(body, "max_bytes", 2**31 - 1))
        refused: dict[tuple[int, int], OdradekError] = {}
        wants: list[FetchWant] = []
        if int(body.replica_id) >= 0:
            follower = InvalidRequestError("replicas fetch over the inter-broker HTTP API, not the Kafka listener")
        else:
            follower = None
        for ti, topic in enumerate(body.topics):
            name = str(topic.topic)
            denied = follower
            if denied is None and not self._auth.allowed(conn, "Read", TOPIC, name):
                denied = TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Read topic {name}")
            for pi, p in enumerate(topic.partitions):
                if denied is not None:
                    refused[(ti, pi)] = denied
                    continue
                wants.append(FetchWant(name, int(p.partition), int(p.fetch_offset),
                                       max(1, min(int(p.partition_max_bytes), max_bytes)),
                                       int(getattr(p, "current_leader_epoch", -1))))
        answers = iter(await fetch(self._leaders, wants,
                                   max_wait_ms=min(max(0, _ms(body.max_wait)), self._config.fetch_max_wait_ms),
                                   min_bytes=int(body.min_bytes), max_bytes=max_bytes, committed=committed))
        part_cls = nested(cls, "PartitionData")
        leader_cls = nested(cls, "LeaderIdAndEpoch") if version >= 12 else None
        aborted_cls = nested(cls, "AbortedTransaction")
        responses = []
        for ti, topic in enumerate(body.topics):
            entries = []
            for pi, p in enumerate(topic.partitions):
                error = refused.get((ti, pi))
                read = None
                if error is None:
                    answer = next(answers)
                    error, read = answer.error, answer.read
                if error is not None or read is None:
                    current = self._current_leader(leader_cls, error) if error is not None else None
                    entries.append(make(
                        part_cls, partition_index=int(p.partition), error_code=code(error), high_watermark=-1,
                        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=() if committed else None,
                        preferred_read_replica=-1, records=b"",
                        **({"current_leader": current} if current is not None else {})))
                else:
                    entries.append(make(
                        part_cls, partition_index=int(p.partition), error_code=NONE,
                        high_watermark=read.high_watermark, last_stable_offset=read.last_stable_offset,
                        log_start_offset=read.log_start_offset,
                        aborted_transactions=tuple(make(aborted_cls, producer_id=pid, first_offset=first)
                                                   for pid, first in read.aborted) if committed else None,
                        preferred_read_replica=-1, records=read.data))
            responses.append(make(nested(cls, "FetchableTopicResponse"), topic=str(topic.topic),
                                  partitions=tuple(entries)))
        return make(cls, throttle_time=NO_THROTTLE, error_code=NONE, session_id=0, responses=tuple(responses))


def _timestamp(ms: int) -> datetime.datetime | None:
    return None if ms < 0 else datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
