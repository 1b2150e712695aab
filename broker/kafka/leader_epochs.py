"""OffsetForLeaderEpoch on the Kafka door: where a leader epoch ended on the leader (KIP-101, KIP-279, KIP-320).

Why a consumer asks: after a leader change (librdkafka does it whenever the leader epoch moves, the Java client
too), it validates its position with the epoch of the last record it consumed. The new leader answers where that
epoch ended in its log; a position past that end was truncated away (an unclean election), and the client resets
to the end offset rather than read a history that diverged.

One service call per partition: ``FetchService.epoch_end_offset``, leader-only, the client's current leader
epoch checked (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), NOT_LEADER_OR_FOLLOWER naming the leader elsewhere.
An epoch the log does not know answers leader epoch and end offset -1, as Kafka does. Authorization as Kafka's:
Describe on the topic for a consumer, ClusterAction on the cluster for a follower (``replica_id`` >= 0).
"""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from broker.kafka import codec
from broker.kafka.authorization import CLUSTER, CLUSTER_NAME, TOPIC, KafkaAuthorizer
from broker.kafka.codec import OFFSET_FOR_LEADER_EPOCH, Request, make, nested
from broker.kafka.errors import code
from broker.kafka.network import Connection
from odradek.protocol.errors import (
    ClusterAuthorizationFailedError,
    OdradekError,
    TopicAuthorizationFailedError,
    UnknownServerError,
)

if TYPE_CHECKING:
    from broker.kafka.partitions import PartitionServices

log = logging.getLogger(__name__)

NO_THROTTLE = datetime.timedelta(0)


class LeaderEpochApis:
    def __init__(self, services: PartitionServices, authorizer: KafkaAuthorizer) -> None:
        self._services = services
        self._auth = authorizer

    def handlers(self) -> dict[int, Any]:
        return {OFFSET_FOR_LEADER_EPOCH: self.handle_offset_for_leader_epoch}

    async def handle_offset_for_leader_epoch(self, conn: Connection, request: Request) -> Any:
        cls = codec.response_class(OFFSET_FOR_LEADER_EPOCH, request.header.api_version)
        body = request.body
        follower = int(getattr(body, "replica_id", -1)) >= 0
        end_cls = nested(cls, "EpochEndOffset")
        topics = []
        for topic in body.topics:
            name = str(topic.topic)
            denied = self._denied(conn, name, follower)
            entries = []
            for p in topic.partitions:
                error = denied
                epoch = end = -1
                if error is None:
                    try:
                        answer = self._services.fetches.epoch_end_offset(
                            name, int(p.partition), int(p.leader_epoch),
                            current_leader_epoch=int(getattr(p, "current_leader_epoch", -1)))
                        epoch, end = answer.leader_epoch, answer.end_offset
                    except OdradekError as e:
                        error = e
                    except Exception as e:  # a fault of this partition's state: its error, not the connection's
                        log.exception("OffsetForLeaderEpoch of %s-%s failed", name, p.partition)
                        error = UnknownServerError(f"OffsetForLeaderEpoch of {name}-{p.partition} failed: {e}")
                entries.append(make(end_cls, error_code=code(error), partition=int(p.partition), leader_epoch=epoch,
                                    end_offset=end))
            topics.append(make(nested(cls, "OffsetForLeaderTopicResult"), topic=name, partitions=tuple(entries)))
        return make(cls, throttle_time=NO_THROTTLE, topics=tuple(topics))

    def _denied(self, conn: Connection, topic: str, follower: bool) -> OdradekError | None:
        principal = self._auth.principal(conn)
        if follower:
            if not self._auth.allowed(conn, "ClusterAction", CLUSTER, CLUSTER_NAME):
                return ClusterAuthorizationFailedError(f"{principal} may not ClusterAction the cluster")
        elif not self._auth.allowed(conn, "Describe", TOPIC, topic):
            return TopicAuthorizationFailedError(f"{principal} may not Describe topic {topic}")
        return None

