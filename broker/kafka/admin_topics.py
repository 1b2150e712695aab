"""CreateTopics, DeleteTopics, CreatePartitions and DeleteRecords over Kafka's wire protocol.

Each handler decodes, authorizes as Kafka's KafkaApis does, calls one service and renders the request's
version: topics through broker/admin/topic_requests.py (the ZooKeeper writes the HTTP API makes, then the wait
for the controller), records through the replica manager (the leader moves its log start offset; followers
follow). Authorization: CreateTopics needs Create on the cluster or on the topic (and DescribeConfigs on the
topic to see its configs in a v5+ answer); DeleteTopics Delete on the topic (and Describe to learn a topic's
name from its id); CreatePartitions Alter; DeleteRecords Delete. A denied topic is TOPIC_AUTHORIZATION_FAILED
and nothing is done for it; the others go on.

DeleteRecords answers with the leader's new log start offset as the low watermark, at once: Kafka waits (up to
the request's timeout) until every live replica's log start reached it; here each follower moves its own on its
next fetch, so the request's timeout is not used.

Kafka's ZooKeeper-era brokers answer topic changes only on the controller (NOT_CONTROLLER elsewhere); any
Odradek broker may write them (as its HTTP API does), so every broker answers.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from broker.admin.config_entries import ConfigEntry
from broker.admin.topic_requests import CreatedTopic, NewPartitions, NewTopic, TopicRequests, typed
from broker.kafka import codec
from broker.kafka.apis import NO_THROTTLE, NONE, Handler, code
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, TOPIC, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.network import Connection
from broker.metadata.cache import topic_uuid
from odradek.protocol.errors import (
    InvalidRequestError,
    OdradekError,
    TopicAuthorizationFailedError,
    UnknownPartitionError,
    UnknownServerError,
    UnknownTopicIdError,
)

if TYPE_CHECKING:
    from broker.metadata.cache import MetadataCache

CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
CREATE_PARTITIONS = 37


class DeletesRecords(Protocol):
    """What DeleteRecords needs of the replica manager (``ReplicaManager`` is one)."""

    async def delete_records(self, topic: str, partition: int, offset: int) -> int: ...


def timeout_ms(body: Any) -> int:
    return int(body.timeout.total_seconds() * 1000)


class TopicApis:
    def __init__(self, topics: TopicRequests, records: DeletesRecords, cache: MetadataCache,
                 authorizer: KafkaAuthorizer) -> None:
        self._topics = topics
        self._records = records
        self._cache = cache
        self._auth = authorizer

    def handlers(self) -> dict[int, Handler]:
        return {CREATE_TOPICS: self.handle_create_topics, DELETE_TOPICS: self.handle_delete_topics,
                CREATE_PARTITIONS: self.handle_create_partitions, DELETE_RECORDS: self.handle_delete_records}

    def _denied(self, conn: Connection, operation: str, name: str) -> TopicAuthorizationFailedError:
        return TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not {operation} topic {name}")

    # ------------------------------------------------------------------------------------------ CreateTopics

    async def handle_create_topics(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(CREATE_TOPICS, version)
        cluster_create = self._auth.allowed(conn, "Create", CLUSTER, CLUSTER_NAME)
        refused: dict[str, OdradekError] = {}
        wanted: list[NewTopic] = []
        for t in body.topics:
            name = str(t.name)
            if not (cluster_create or self._auth.allowed(conn, "Create", TOPIC, name)):
                refused[name] = self._denied(conn, "Create", name)
                continue
            assignment = {int(a.partition_index): [int(b) for b in a.broker_ids] for a in t.assignments}
            if len(assignment) != len(t.assignments):
                refused[name] = InvalidRequestError(f"the assignment of topic {name} names a partition twice")
                continue
            wanted.append(NewTopic(name, int(t.num_partitions), int(t.replication_factor), assignment or None,
                                   {str(c.name): c.value for c in t.configs}))
        results = await self._topics.create(wanted, timeout_ms=timeout_ms(body), validate_only=bool(body.validate_only))
        result_cls = nested(cls, "CreatableTopicResult")
        configs_cls = nested(cls, "CreatableTopicConfigs") if version >= 5 else None
        topics = []
        for t in body.topics:
            name = str(t.name)
            outcome = refused.get(name) or results.get(name)
            see_configs = self._auth.allowed(conn, "DescribeConfigs", TOPIC, name)
            if isinstance(outcome, CreatedTopic):
                topics.append(make(
                    result_cls, name=name, topic_id=topic_uuid(outcome.topic_id), error_code=NONE, error_message=None,
                    topic_config_error_code=0 if see_configs else TopicAuthorizationFailedError.kafka_code,
                    num_partitions=outcome.num_partitions if see_configs else -1,
                    replication_factor=outcome.replication_factor if see_configs else -1,
                    configs=_created_configs(configs_cls, outcome.configs) if see_configs else None))
            else:
                error = outcome if isinstance(outcome, OdradekError) else UnknownServerError(
                    f"topic {name} has no outcome")
                topics.append(make(result_cls, name=name, topic_id=None, error_code=code(error),
                                   error_message=error.message, topic_config_error_code=0, num_partitions=-1,
                                   replication_factor=-1, configs=None if configs_cls is None else ()))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    # ------------------------------------------------------------------------------------------ DeleteTopics

    async def handle_delete_topics(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(DELETE_TOPICS, version)
        # (name or None, topic id or None) as asked: v6 names topics by name or by id, earlier versions by name
        asked: list[tuple[str | None, uuid.UUID | None]]
        if version >= 6:
            asked = [(None if t.name is None else str(t.name), t.topic_id) for t in body.topics]
        else:
            asked = [(str(n), None) for n in body.topic_names]
        outcomes: list[OdradekError | None] = []
        names: list[str | None] = []
        to_delete: list[str] = []
        for name, topic_id in asked:
            error: OdradekError | None = None
            by_id = topic_id is not None and topic_id != uuid.UUID(int=0)
            if name is not None and by_id:
                error = InvalidRequestError("Topic name and topic ID can not both be specified.")
            elif by_id:
                name = self._name_of(topic_id)
                if name is None:
                    error = UnknownTopicIdError(f"no topic has id {topic_id}")
                elif not self._auth.allowed(conn, "Describe", TOPIC, name):
                    name, error = None, TopicAuthorizationFailedError(
                        f"{self._auth.principal(conn)} may not Describe the topic of id {topic_id}")
            if error is None and name is not None:
                if not self._auth.allowed(conn, "Delete", TOPIC, name):
                    error = self._denied(conn, "Delete", name)
                elif name not in self._cache.topics:
                    error = UnknownPartitionError(f"topic '{name}' does not exist")
                else:
                    to_delete.append(name)
            elif error is None:
                error = InvalidRequestError("a topic to delete needs a name or an id")
            names.append(name)
            outcomes.append(error)
        results = await self._topics.delete(to_delete, timeout_ms=timeout_ms(body)) if to_delete else {}
        result_cls = nested(cls, "DeletableTopicResult")
        responses = []
        for (_, topic_id), own, resolved in zip(asked, outcomes, names, strict=True):
            error = own if own is not None else results.get(resolved or "")
            responses.append(make(result_cls, name=resolved, topic_id=topic_id or uuid.UUID(int=0),
                                  error_code=code(error), error_message=None if error is None else error.message))
        return make(cls, throttle_time=NO_THROTTLE, responses=tuple(responses))

    def _name_of(self, topic_id: uuid.UUID) -> str | None:
        return self._cache.topic_name(topic_id)

    # -------------------------------------------------------------------------------------- CreatePartitions

    async def handle_create_partitions(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(CREATE_PARTITIONS, version)
        refused: dict[str, OdradekError] = {}
        wanted: list[NewPartitions] = []
        for t in body.topics:
            name = str(t.name)
            if not self._auth.allowed(conn, "Alter", TOPIC, name):
                refused[name] = self._denied(conn, "Alter", name)
                continue
            assignment = None if t.assignments is None else [[int(b) for b in a.broker_ids] for a in t.assignments]
            wanted.append(NewPartitions(name, int(t.count), assignment))
        results = await self._topics.create_partitions(wanted, timeout_ms=timeout_ms(body),
                                                       validate_only=bool(body.validate_only))
        result_cls = nested(cls, "CreatePartitionsTopicResult")
        seen: set[str] = set()
        out = []
        for t in body.topics:
            name = str(t.name)
            if name in seen:
                continue  # a duplicate is answered once, as Kafka's map of results does
            seen.add(name)
            error = refused.get(name) or results.get(name)
            out.append(make(result_cls, name=name, error_code=code(error),
                            error_message=None if error is None else error.message))
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(out))

    # ----------------------------------------------------------------------------------------- DeleteRecords

    async def handle_delete_records(self, conn: Connection, request: Request) -> Any:
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(DELETE_RECORDS, version)
        jobs: list[tuple[str, int, asyncio.Future[Any] | OdradekError]] = []
        for t in body.topics:
            name = str(t.name)
            allowed = self._auth.allowed(conn, "Delete", TOPIC, name)
            for p in t.partitions:
                partition = int(p.partition_index)
                if not allowed:
                    jobs.append((name, partition, self._denied(conn, "Delete", name)))
                else:
                    jobs.append((name, partition, asyncio.ensure_future(
                        self._delete(name, partition, int(p.offset)))))
        part_cls = nested(cls, "DeleteRecordsPartitionResult")
        by_topic: dict[str, list[Any]] = {}
        for name, partition, job in jobs:
            result = job if isinstance(job, OdradekError) else await job
            if isinstance(result, OdradekError):
                entry = make(part_cls, partition_index=partition, low_watermark=-1, error_code=code(result))
            else:
                entry = make(part_cls, partition_index=partition, low_watermark=result, error_code=NONE)
            by_topic.setdefault(name, []).append(entry)
        topic_cls = nested(cls, "DeleteRecordsTopicResult")
        return make(cls, throttle_time=NO_THROTTLE,
                    topics=tuple(make(topic_cls, name=n, partitions=tuple(ps)) for n, ps in by_topic.items()))

    async def _delete(self, topic: str, partition: int, offset: int) -> int | OdradekError:
        assignment = self._cache.topics.get(topic)
        if assignment is None or partition not in assignment.partitions:
            return UnknownPartitionError(f"{topic}-{partition} does not exist")
        try:
            return await self._records.delete_records(topic, partition, offset)
        except Exception as e:
            return typed(e, f"deleting records of {topic}-{partition}")


def _created_configs(configs_cls: type[Any] | None, entries: tuple[ConfigEntry, ...]) -> tuple[Any, ...] | None:
    if configs_cls is None:
        return None
    return tuple(make(configs_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=int(e.source),
                      is_sensitive=e.sensitive) for e in entries)

