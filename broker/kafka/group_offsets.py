"""A consumer group's committed offsets over Kafka's wire protocol: OffsetCommit, OffsetFetch (the multi-group
form of v8+ too) and OffsetDelete, one handler each.

Offsets live where every group's do (``/consumers/G/offsets`` in ZooKeeper, docs/consumer-groups.md), so what a
Kafka client commits, the HTTP API and odradek-consumer-groups.sh read, and the other way round. Requests run on
the group's coordinator (``GroupRouter.here``: NOT_COORDINATOR elsewhere, as on Kafka), which fences commits:
a member commits in its current generation, and generation -1 with no member commits only while the group has no
members (a consumer using assign(), as Kafka's "simple" commits).

Authorization, as Kafka's KafkaApis: OffsetCommit needs Read on the group (else every partition answers
GROUP_AUTHORIZATION_FAILED) and Read on each topic; OffsetFetch Describe on the group and on each topic (a fetch of
every topic answers only the topics the caller may Describe); OffsetDelete Delete on the group and Read on each
topic. A partition the metadata does not know is UNKNOWN_TOPIC_OR_PARTITION, metadata longer than 4096 bytes
OFFSET_METADATA_TOO_LARGE, and neither is written. Not kept: a commit's leader epoch (OffsetFetch answers -1, so
clients skip their epoch validation) and OffsetFetch's require_stable: a transaction's offsets are written to the
group only when it commits, and a fetch meanwhile answers the last committed offset, never UNSTABLE_OFFSET_COMMIT
(finding a group's pending transactional offsets would mean reading every transaction's state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.kafka import codec
from broker.kafka.authorization import TOPIC, KafkaAuthorizer
from broker.kafka.codec import Request, make, nested
from broker.kafka.errors import code, coordinator_typed
from broker.kafka.groups import NO_THROTTLE, NONE, GroupCluster, Handler, group_refusal
from broker.kafka.network import Connection
from odradek.protocol.errors import (
    GroupSubscribedToTopicError,
    OdradekError,
    OffsetMetadataTooLargeError,
    TopicAuthorizationFailedError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from broker.group_router import GroupRouter
    from broker.metadata.cache import MetadataCache

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
OFFSET_DELETE = 47

MAX_METADATA = 4096  # Kafka's offset.metadata.max.bytes, as the HTTP API keeps it
NO_OFFSET = -1
TP = tuple[str, int]


class KafkaGroupOffsets:
    def __init__(self, cluster: GroupCluster, cache: MetadataCache, authorizer: KafkaAuthorizer) -> None:
        self._cluster = cluster
        self._cache = cache
        self._auth = authorizer

    @property
    def _groups(self) -> GroupRouter:
        return self._cluster.group_router

    def handlers(self) -> dict[int, Handler]:
        return {
            OFFSET_COMMIT: self.handle_offset_commit,
            OFFSET_FETCH: self.handle_offset_fetch,
            OFFSET_DELETE: self.handle_offset_delete,
        }

    def _partition_refusal(self, conn: Connection, operation: str, topic: str, partition: int) -> OdradekError | None:
        if not self._auth.allowed(conn, operation, TOPIC, topic):
            return TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not {operation} topic {topic}")
        assignment = self._cache.topics.get(topic)
        if assignment is None or partition not in assignment.partitions:
            return UnknownTopicError(f"{topic}-{partition} does not exist")
        return None

    # --------------------------------------------------------------------------------------- OffsetCommit

    async def handle_offset_commit(self, conn: Connection, request: Request) -> Any:
        body = request.body
        cls = codec.response_class(OFFSET_COMMIT, request.header.api_version)
        group = str(body.group_id)
        group_error = group_refusal(self._auth, conn, "Read", group)
        errors: dict[TP, OdradekError | None] = {}
        offsets: dict[TP, tuple[int, str]] = {}
        for topic in body.topics:
            name = str(topic.name)
            for p in topic.partitions:
                tp = (name, int(p.partition_index))
                metadata = p.committed_metadata or ""
                error = group_error or self._partition_refusal(conn, "Read", *tp)
                if error is None and len(metadata.encode()) > MAX_METADATA:
                    error = OffsetMetadataTooLargeError(f"metadata of {name}-{tp[1]} is over {MAX_METADATA} bytes")
                errors[tp] = error
                if error is None:
                    offsets[tp] = (int(p.committed_offset), metadata)
        if offsets:
            member_id, generation = str(body.member_id), int(body.generation_id_or_member_epoch)
            instance = getattr(body, "group_instance_id", None)
            try:
                await self._groups.here(group, lambda c: c.commit(group, member_id, generation, offsets,
                                                                  instance_id=instance))
            except Exception as e:
                failed = coordinator_typed(e, f"offset commit of group {group}")
                errors.update((tp, failed) for tp in offsets)
        part_cls = nested(cls, "OffsetCommitResponsePartition")
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(
            make(nested(cls, "OffsetCommitResponseTopic"), name=str(topic.name), partitions=tuple(
                make(part_cls, partition_index=int(p.partition_index),
                     error_code=code(errors[(str(topic.name), int(p.partition_index))]))
                for p in topic.partitions))
            for topic in body.topics))

    # ---------------------------------------------------------------------------------------- OffsetFetch

    async def handle_offset_fetch(self, conn: Connection, request: Request) -> Any:
        """v1-v7 name one group; v8+ a list of groups, each answered on its own (a group this broker does not
        coordinate is NOT_COORDINATOR for that group only, as on Kafka)."""
        version = request.header.api_version
        body = request.body
        cls = codec.response_class(OFFSET_FETCH, version)
        if version >= 8:
            group_cls = nested(cls, "OffsetFetchResponseGroup")
            answers = []
            for g in body.groups:
                error, topics = await self._fetch(conn, cls, str(g.group_id), g.topics, "OffsetFetchResponseTopics",
                                                  "OffsetFetchResponsePartitions")
                answers.append(make(group_cls, group_id=str(g.group_id), topics=topics, error_code=code(error)))
            return make(cls, throttle_time=NO_THROTTLE, groups=tuple(answers))
        error, topics = await self._fetch(conn, cls, str(body.group_id), body.topics, "OffsetFetchResponseTopic",
                                          "OffsetFetchResponsePartition", errors_in_partitions=version < 2)
        return make(cls, throttle_time=NO_THROTTLE, topics=topics, error_code=code(error))

    async def _fetch(self, conn: Connection, cls: type[Any], group: str, wanted: Any, topic_name: str,
                     partition_name: str, *, errors_in_partitions: bool = False) -> tuple[OdradekError | None, Any]:
        """(the group's error, its topics' answers). ``wanted`` None is every topic the group committed that the
        caller may Describe; v1 has no group-level error, so there a group error is every partition's."""
        topic_cls, part_cls = nested(cls, topic_name), nested(cls, partition_name)
        error = group_refusal(self._auth, conn, "Describe", group)
        committed: dict[TP, tuple[int, str, int]] = {}
        if error is None:
            try:
                committed = await self._groups.here(group, lambda c: c.fetch_offsets(group))
            except Exception as e:
                error = coordinator_typed(e, f"offset fetch of group {group}")
        if error is not None and not errors_in_partitions:
            return error, ()

        def entry(topic: str, partition: int, refusal: OdradekError | None) -> Any:
            offset, metadata, _ = committed.get((topic, partition), (NO_OFFSET, "", -1))
            if refusal is not None:
                offset, metadata = NO_OFFSET, ""
            return make(part_cls, partition_index=partition, committed_offset=offset, committed_leader_epoch=-1,
                        metadata=metadata, error_code=code(refusal))

        if wanted is None:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                if self._auth.allowed(conn, "Describe", TOPIC, t):
                    by_topic.setdefault(t, []).append(p)
            return None, tuple(make(topic_cls, name=t, partitions=tuple(entry(t, p, None) for p in ps))
                               for t, ps in by_topic.items())
        answers = []
        for topic in wanted:
            name = str(topic.name)
            refusal = error
            if refusal is None and not self._auth.allowed(conn, "Describe", TOPIC, name):
                refusal = TopicAuthorizationFailedError(f"{self._auth.principal(conn)} may not Describe topic {name}")
            answers.append(make(topic_cls, name=name, partitions=tuple(
                entry(name, int(p), refusal) for p in topic.partition_indexes)))
        return None, tuple(answers)

    # --------------------------------------------------------------------------------------- OffsetDelete

    async def handle_offset_delete(self, conn: Connection, request: Request) -> Any:
        """Kafka's OffsetDelete (KIP-496): a topic some member subscribes to keeps its offsets
        (GROUP_SUBSCRIBED_TO_TOPIC for its partitions); a group that is not Empty and whose members' topics are
        unknown (not a consumer group) is NON_EMPTY_GROUP."""
        body = request.body
        cls = codec.response_class(OFFSET_DELETE, request.header.api_version)
        group = str(body.group_id)
        group_error = group_refusal(self._auth, conn, "Delete", group)
        errors: dict[TP, OdradekError | None] = {}
        if group_error is None:
            for topic in body.topics:
                name = str(topic.name)
                wanted = [int(p.partition_index) for p in topic.partitions]
                refused = {p: self._partition_refusal(conn, "Read", name, p) for p in wanted}
                errors.update(((name, p), e) for p, e in refused.items())
                deletable = sorted(p for p, e in refused.items() if e is None)
                if not deletable:
                    continue
                try:
                    await self._groups.here(group, lambda c, t=name, ps=deletable: c.delete_offsets(group, t, ps),
                                            must_exist=True)
                except GroupSubscribedToTopicError as e:
                    errors.update(((name, p), e) for p in deletable)
                except Exception as e:
                    group_error = coordinator_typed(e, f"offset delete of group {group}")
                    break
        if group_error is not None:
            return make(cls, error_code=code(group_error), throttle_time=NO_THROTTLE, topics=())
        part_cls = nested(cls, "OffsetDeleteResponsePartition")
        return make(cls, error_code=NONE, throttle_time=NO_THROTTLE, topics=tuple(
            make(nested(cls, "OffsetDeleteResponseTopic"), name=str(topic.name), partitions=tuple(
                make(part_cls, partition_index=int(p.partition_index),
                     error_code=code(errors.get((str(topic.name), int(p.partition_index)))))
                for p in topic.partitions))
            for topic in body.topics))
