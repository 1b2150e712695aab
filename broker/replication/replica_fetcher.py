"""A follower's fetch loop: truncate a divergent tail by leader epoch, then copy the leader's batches as bytes.

On becoming follower (a new leader or leader epoch), the replica first asks the leader where its own latest
epoch ended (``epoch_end_offset``, Kafka's OffsetsForLeaderEpoch with KIP-279's answer of the largest epoch
<= the one asked) and truncates to ``min(leader's end of that epoch, our own end of it)``: never by high
watermark alone (KIP-101), which could lose committed records or keep a divergent tail. Then it long-polls
the leader's binary fetch with its log end offset (its acknowledgement) and its view of the leader epoch
(which fences either side if stale), appends what comes byte for byte, and takes the leader's high watermark
and its log start offset (a DeleteRecords on the leader deletes the same records here, up to our own high
watermark). Appends and truncations run on the storage executor behind the partition (one hop per fetch).

One task per follower partition; it ends when the partition's role or leader epoch changes (the replica
manager starts a new one for the new leader).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from broker.interbroker import REPLICATION, InterBrokerClient, Request
from broker.replication.partition import FOLLOWER, Partition
from odradek.protocol import media
from odradek.protocol.errors import OdradekError, OffsetOutOfRangeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from broker.replication.throttle import ReplicationThrottle

log = logging.getLogger(__name__)

FETCH_MAX_BYTES = 1024 * 1024
FETCH_WAIT_MS = 500
BACKOFF_S = 0.1


class FollowerFetcher:
    """Requests go through the broker's ``InterBrokerClient`` on its replication lane (never queued behind
    forwarded client requests); any failure, typed or of transport, backs off and tries again while current."""

    def __init__(self, part: Partition, client: InterBrokerClient, broker_id: int,
                 throttle: ReplicationThrottle | None = None,
                 broker_epoch: Callable[[], int | None] = lambda: None) -> None:
        self.part = part
        self._broker_epoch = broker_epoch  # sent as replica_epoch: the leader checks it against ZooKeeper's
        self._throttle = throttle
        self._client = client
        self._broker_id = broker_id
        self.leader = part.leader
        self.epoch = part.leader_epoch
        self._path = f"/topics/{part.topic}/partitions/{part.partition}"

    def current(self) -> bool:
        p = self.part
        return p.role == FOLLOWER and p.leader == self.leader and p.leader_epoch == self.epoch

    async def run(self) -> None:
        truncated = False
        while self.current():
            try:
                if not truncated:
                    await self._truncate()
                    truncated = True
                await self._fetch_once()
            except asyncio.CancelledError:
                raise
            except OffsetOutOfRangeError as e:
                await self._out_of_range(e)
            except OdradekError as e:
                # BROKER_NOT_AVAILABLE (unregistered, unreachable), NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
                # an unknown partition: wait for the new state (or the leader) to reach us.
                log.debug("fetch from broker %d for %s-%d failed: %s", self.leader, self.part.topic,
                          self.part.partition, e)
                await asyncio.sleep(BACKOFF_S)
            except Exception:
                log.exception("follower fetch of %s-%d failed", self.part.topic, self.part.partition)
                await asyncio.sleep(BACKOFF_S)

    async def _truncate(self) -> None:
        part = self.part
        await part.settled()  # the previous state's last fetch may still be landing: judge the log with it
        log_ = part.log
        if log_.log_end_offset == 0:
            return
        latest = log_.epoch_cache.latest_epoch
        leader_epoch, end = -1, -1  # no epoch history at all: the pre-KIP-101 fallback (the high watermark)
        if latest >= 0:
            params = {"leader_epoch": str(latest), "replica_id": str(self._broker_id)}
            reply = await self._client.send(self.leader, Request(
                "GET", f"{self._path}/epoch_end_offset", params=params, lane=REPLICATION))
            body = reply.json()
            leader_epoch, end = int(body["leader_epoch"]), int(body["end_offset"])
        if not self.current():
            return
        target, leo = await part.truncate_diverged(leader_epoch, end)
        if target < leo:
            log.info("%s-%d: truncated divergent tail [%d, %d) before following broker %d (epoch %d)",
                     part.topic, part.partition, target, leo, self.leader, self.epoch)

    async def _fetch_once(self) -> None:
        part = self.part
        # The replication throttle (broker/replication/throttle.py): smaller fetches, then wait off the debt.
        bucket = self._throttle.follower_limit(part.topic, part.partition, self._broker_id in part.isr) \
            if self._throttle is not None else None
        params = {
            "offset": str(part.log_end_offset),
            "max_bytes": str(bucket.cap(FETCH_MAX_BYTES) if bucket else FETCH_MAX_BYTES),
            "timeout_ms": str(FETCH_WAIT_MS), "replica_id": str(self._broker_id), "leader_epoch": str(self.epoch),
            "replica_epoch": str(self._broker_epoch() or -1),
        }
        reply = await self._client.send(self.leader, Request(
            "GET", f"{self._path}/batches", params=params, headers={"Accept": media.BATCHES},
            wait_ms=FETCH_WAIT_MS, lane=REPLICATION))
        if not self.current():
            return
        await part.append_replicated(reply.body, int(reply.headers[media.HIGH_WATERMARK]), self.epoch)
        leader_start = reply.headers.get(media.LOG_START_OFFSET)
        if leader_start is not None and int(leader_start) > part.log_start_offset:
            await part.follow_log_start(int(leader_start))  # the leader's DeleteRecords (or its retention)
        if bucket is not None and reply.body:
            await bucket.spend(len(reply.body))

    async def _out_of_range(self, e: OffsetOutOfRangeError) -> None:
        """Our log end is outside the leader's log: cut back to its end, or start over at its start."""
        part = self.part
        leader_start = int(e.details.get("log_start_offset", 0))
        leader_end = int(e.details.get("log_end_offset", e.details.get("high_watermark", 0)))
        if part.log_end_offset > leader_end:
            await part.truncate_to(leader_end)
        elif part.log_end_offset < leader_start:
            await part.truncate_fully_and_start_at(leader_start)
