"""The connector's view of the cluster: partition discovery, offsets and binary fetches, over the client's HTTP
transport and metadata cache (``odradek.client``), never the broker's code.

The driver uses it to plan (which partitions, which offsets) and executors to fetch. Both retry what the
cluster calls retriable: a leader that moved or died answers NOT_LEADER_OR_FOLLOWER or refuses connections, and
the cure is always the same: refresh the metadata, wait a little, go to the new leader.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

from odradek.client.metadata import Metadata, check_authorized
from odradek.client.transport import BATCHES_MEDIA_TYPE, Transport, quote_path
from odradek.protocol import media
from odradek.protocol.errors import NotLeaderOrFollowerError, OdradekError, UnknownPartitionError, UnknownTopicError
from odradek_spark.options import SourceOptions
from odradek_spark.planning import TopicPartition
from odradek_spark.security import SecurityPairs, client_security

__all__ = ["Cluster", "Fetched"]

log = logging.getLogger(__name__)
T = TypeVar("T")
LAST_STABLE_OFFSET_HEADER = "Odradek-Last-Stable-Offset"  # broker/api/fetch.py; not in protocol.media


class Fetched(NamedTuple):
    """One binary fetch answer: whole batches from (or just before) the asked offset, and the log's bounds."""

    body: bytes
    high_watermark: int
    log_start_offset: int


class Cluster:
    """Metadata, offsets and fetches for one driver-side planner or one executor-side read. Thread-safe."""

    def __init__(self, bootstrap: Sequence[str], *, request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100, read_committed: bool = False, security: SecurityPairs = ()) -> None:
        # read_committed: offsets end at the last stable offset and fetches drop aborted transactions (the
        # brokers filter, docs/transactions.md), so planning and reading agree on where a partition ends.
        self.isolation = "read_committed" if read_committed else "read_uncommitted"
        self.transport = Transport(request_timeout_ms=request_timeout_ms, security=client_security(security))
        self.metadata = Metadata(self.transport, list(bootstrap), retry_backoff_ms=retry_backoff_ms)
        self.request_timeout_ms = request_timeout_ms

    def close(self) -> None:
        self.transport.close()

    # ---------------------------------------------------------------------------------------- retries

    def retrying(self, fn: Callable[[], T], retries: int, interval_ms: int) -> T:
        """Run ``fn``; after a retriable error refresh the metadata, wait ``interval_ms`` and try again."""
        attempt = 0
        while True:
            try:
                return fn()
            except OdradekError as exc:
                if not exc.retriable or attempt >= retries:
                    raise
                attempt += 1
                log.info("retrying after %s (attempt %d of %d)", exc.name, attempt, retries)
                self.on_error(exc)
                time.sleep(interval_ms / 1000.0)

    def on_error(self, exc: OdradekError, topic: str | None = None, partition: int | None = None) -> None:
        """Make the next request go somewhere better: apply a leader hint and ask for fresh metadata."""
        if isinstance(exc, NotLeaderOrFollowerError) and topic is not None and partition is not None:
            self.metadata.hint_leader(topic, partition, exc.details.get("leader"), exc.details.get("leader_url"))
        self.metadata.request_update()

    # -------------------------------------------------------------------------------------- discovery

    def discover(self, options: SourceOptions, *, must_exist: bool) -> list[TopicPartition]:
        """The partitions the subscription covers now, sorted.

        ``must_exist``: a batch query fails on a subscribed topic that does not exist (it could only read
        nothing); a streaming query waits for it to appear.
        """
        if options.subscribe is not None:
            view = self.metadata.refresh(list(options.subscribe))
            topics = list(options.subscribe)
        elif options.assign is not None:
            view = self.metadata.refresh(sorted({t for t, _ in options.assign}))
            topics = sorted({t for t, _ in options.assign})
        else:
            topics = sorted(t for t in self._all_topics() if options.matches(t))
            view = self.metadata.refresh(topics) if topics else self.metadata.view
        out: list[TopicPartition] = []
        for topic in topics:
            meta = view.topics.get(topic)
            check_authorized(meta)  # a streaming query must not wait forever for a topic it may not see
            if meta is None or meta.error is not None or not meta.partitions:
                if must_exist:
                    raise UnknownTopicError(f"topic '{topic}' does not exist", topic=topic)
                continue
            out.extend((topic, p.partition) for p in meta.partitions)
        if options.assign is not None:
            present = set(out)
            missing = [tp for tp in options.assign if tp not in present]
            if missing and must_exist:
                t, p = missing[0]
                raise UnknownPartitionError(f"assigned partition {t}-{p} does not exist", topic=t, partition=p)
            out = [tp for tp in options.assign if tp in present]
        return sorted(out)

    def _all_topics(self) -> list[str]:
        """Every topic's name. Asked directly: the metadata cache only refreshes the topics it tracks, and a
        pattern must also see topics created since the last look."""
        last: OdradekError | None = None
        for url in self.metadata.broker_urls():
            try:
                body = self.transport.get_json(url, "/metadata")
            except OdradekError as exc:
                if not exc.retriable:
                    raise
                last = exc
                continue
            return [t["name"] for t in body.get("topics") or () if not t.get("error")]
        raise last or OdradekError("no broker to ask for metadata")

    def leader_url(self, topic: str, partition: int) -> str | None:
        return self.metadata.leader_url(topic, partition)

    # ---------------------------------------------------------------------------------------- offsets

    def list_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """``(log start offset, high watermark)`` of each partition, asked of its leader (one request each).

        Several partitions are asked concurrently: planning a 100-partition topic should not take 100 round
        trips end to end.
        """
        tps = list(partitions)
        if len(tps) <= 1:
            return {tp: self._offsets(tp) for tp in tps}
        with ThreadPoolExecutor(max_workers=min(8, len(tps)), thread_name_prefix="odradek-offsets") as pool:
            return dict(zip(tps, pool.map(self._offsets, tps), strict=True))

    def _offsets(self, tp: TopicPartition) -> tuple[int, int]:
        """``end_offset`` is the high watermark, or under read_committed the last stable offset."""
        body = self._offsets_request(tp, {"isolation": self.isolation} if self.read_committed else None)
        return int(body["beginning_offset"]), int(body["end_offset"])

    def offset_for_time(self, tp: TopicPartition, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms`` (Kafka's ``offsetsForTimes``), or None.

        The partition's leader answers from its time index (``GET .../offsets?timestamp=``).
        """
        body = self._offsets_request(tp, {"timestamp": timestamp_ms})
        return None if body.get("offset") is None else int(body["offset"])

    @property
    def read_committed(self) -> bool:
        return self.isolation == "read_committed"

    def _offsets_request(self, tp: TopicPartition, query: dict[str, Any] | None) -> dict[str, Any]:
        """``GET .../offsets`` of the leader first, then of any broker (a follower forwards), so a dead leader
        costs one try; retriable errors also refresh metadata."""
        path = quote_path("topics", tp[0], "partitions", tp[1], "offsets")
        leader = self.metadata.leader_url(*tp)
        urls = ([leader] if leader else []) + [u for u in self.metadata.broker_urls() if u != leader]
        last: OdradekError | None = None
        for url in urls:
            try:
                return dict(self.transport.get_json(url, path, query=query))
            except OdradekError as exc:
                if not exc.retriable:
                    raise
                self.on_error(exc, *tp)
                last = exc
        raise last or OdradekError(f"no broker to ask for the offsets of {tp[0]}-{tp[1]}")

    # ------------------------------------------------------------------------------------------ fetch

    def fetch(self, url: str, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int) -> Fetched:
        """One ``GET .../batches`` to ``url``; raises the broker's typed error (OFFSET_OUT_OF_RANGE, ...).

        Under read_committed the answer's ``high_watermark`` is the last stable offset: what may be read."""
        query: dict[str, Any] = {"offset": offset, "max_bytes": max_bytes, "timeout_ms": wait_ms}
        if self.read_committed:
            query["isolation"] = self.isolation
        resp = self.transport.request(
            url,
            "GET",
            quote_path("topics", topic, "partitions", partition, "batches"),
            query=query,
            accept=BATCHES_MEDIA_TYPE,
            timeout_ms=self.request_timeout_ms + wait_ms,
        )
        headers = resp.headers
        hw = headers.get(LAST_STABLE_OFFSET_HEADER) if self.read_committed else None
        return Fetched(resp.body, int(hw if hw is not None else headers.get(media.HIGH_WATERMARK, -1)),
                       int(headers.get(media.LOG_START_OFFSET, -1)))
