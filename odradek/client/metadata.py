"""The client's view of the cluster: which broker leads which partition, from ``GET /metadata``.

The binary produce and fetch paths never forward (a broker that does not lead answers NOT_LEADER_OR_FOLLOWER),
so every client keeps this map and goes to the leader itself, as Kafka clients do. The map is a snapshot that
a refresh replaces whole, so readers on the hot path look it up without a lock; refreshes are serialised and
rate-limited by ``retry_backoff_ms`` so a burst of leader errors costs one request, not one per partition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from odradek.client.transport import Transport, normalize_url
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OdradekError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    UnknownPartitionError,
    UnknownTopicError,
)

__all__ = ["REFRESH_ERRORS", "ClusterView", "Metadata", "PartitionMeta", "TopicMeta", "check_authorized"]

# Errors that mean "your map is stale": refresh it before retrying.
REFRESH_ERRORS: tuple[type[OdradekError], ...] = (
    NotLeaderOrFollowerError,
    LeaderNotAvailableError,
    BrokerNotAvailableError,
    UnknownPartitionError,
    RequestTimedOutError,
)


@dataclass(frozen=True)
class PartitionMeta:
    partition: int
    leader: int  # -1: offline
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class TopicMeta:
    name: str
    error: str | None
    partitions: tuple[PartitionMeta, ...] = ()
    # Partitions that have a leader: where keyless records may go.
    available: tuple[int, ...] = field(default=())

    @property
    def num_partitions(self) -> int:
        return len(self.partitions)


@dataclass(frozen=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int | None
    brokers: dict[int, str]
    topics: dict[str, TopicMeta]


_EMPTY = ClusterView(None, None, {}, {})


def parse_metadata(body: dict) -> ClusterView:
    """``GET /metadata`` answer -> :class:`ClusterView` (partition lists sorted by id)."""
    brokers = {int(b["id"]): normalize_url(b["url"]) for b in body.get("brokers") or ()}
    topics: dict[str, TopicMeta] = {}
    for t in body.get("topics") or ():
        parts = sorted(
            (
                PartitionMeta(
                    partition=int(p["partition"]),
                    leader=-1 if p.get("leader") is None else int(p["leader"]),
                    leader_epoch=int(p.get("leader_epoch") if p.get("leader_epoch") is not None else -1),
                    replicas=tuple(p.get("replicas") or ()),
                    isr=tuple(p.get("isr") or ()),
                )
                for p in t.get("partitions") or ()
            ),
            key=lambda p: p.partition,
        )
        available = tuple(p.partition for p in parts if p.leader >= 0 and p.leader in brokers)
        topics[t["name"]] = TopicMeta(t["name"], t.get("error"), tuple(parts), available)
    return ClusterView(body.get("cluster_id"), body.get("controller_id"), brokers, topics)


class Metadata:
    """Cached cluster metadata for one client. Thread-safe.

    ``topics`` is what this client cares about: refreshes ask only for those (a producer of one topic should not
    download a thousand). An empty set means every topic.
    """

    def __init__(
        self,
        transport: Transport,
        bootstrap: list[str],
        *,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._transport = transport
        self._bootstrap = list(bootstrap)
        self._backoff = retry_backoff_ms / 1000.0
        self._max_age = metadata_max_age_ms / 1000.0
        self._clock = clock
        self._view = _EMPTY
        self._topics: set[str] = set()
        self._refresh_lock = threading.Lock()
        self._update_requested = False
        self._last_attempt = float("-inf")
        self._last_success = float("-inf")
        self._next_broker = 0

    # -------------------------------------------------------------------------------------------- reading

    @property
    def view(self) -> ClusterView:
        return self._view

    def topic(self, name: str) -> TopicMeta | None:
        return self._view.topics.get(name)

    def leader_url(self, topic: str, partition: int) -> str | None:
        """URL of the partition's leader, or None when unknown or offline (then ask for a refresh)."""
        view = self._view
        t = view.topics.get(topic)
        if t is None or partition >= len(t.partitions):
            return None
        p = t.partitions[partition]
        if p.partition != partition:  # a gap in the partition list: look it up properly
            p = next((q for q in t.partitions if q.partition == partition), p)
            if p.partition != partition:
                return None
        return view.brokers.get(p.leader)

    def broker_urls(self) -> list[str]:
        """Known brokers first (they are the live ones), then the bootstrap list."""
        urls = list(self._view.brokers.values())
        urls += [u for u in self._bootstrap if u not in urls]
        return urls

    # ------------------------------------------------------------------------------------------- updating

    def add_topics(self, topics: Iterable[str]) -> None:
        self._topics.update(topics)

    def request_update(self) -> None:
        """Mark the map stale; the next :meth:`maybe_refresh` (past the backoff) fetches it again."""
        self._update_requested = True

    def needs_refresh(self) -> bool:
        """True when a requested (or periodic) refresh is due; never before a topic is tracked."""
        if not self._topics:
            return False
        now = self._clock()
        if now - self._last_attempt < self._backoff:
            return False
        return self._update_requested or now - self._last_success >= self._max_age

    def maybe_refresh(self) -> bool:
        """Refresh if requested (or too old) and the backoff allows; never raises. True when it refreshed."""
        if not self.needs_refresh():
            return False
        try:
            self.refresh()
        except OdradekError:
            return False
        return True

    def refresh(self, topics: Iterable[str] | None = None) -> ClusterView:
        """Fetch metadata now from the first broker that answers; raises the last error if none does.

        ``topics`` are added to the tracked set. Concurrent callers wait for one refresh instead of sending
        their own.
        """
        if topics is not None:
            self._topics.update(topics)
        started = self._clock()
        with self._refresh_lock:
            view = self._view
            if self._last_success >= started and (topics is None or all(t in view.topics for t in topics)):
                return view  # somebody refreshed while we waited for the lock
            self._last_attempt = self._clock()
            self._update_requested = False
            wanted = sorted(self._topics)
            query = {"topics": ",".join(wanted)} if wanted else None
            urls = self.broker_urls()
            start = self._next_broker % len(urls)
            self._next_broker += 1
            last: OdradekError | None = None
            for url in urls[start:] + urls[:start]:
                try:
                    body = self._transport.get_json(url, "/metadata", query=query)
                except OdradekError as exc:
                    if not exc.retriable:
                        raise
                    last = exc
                    continue
                view = parse_metadata(body)
                if wanted:  # keep topics that were not asked for this time
                    merged = dict(self._view.topics)
                    merged.update(view.topics)
                    view = ClusterView(view.cluster_id, view.controller_id, view.brokers, merged)
                self._view = view
                self._last_success = self._clock()
                return view
            self._update_requested = True
            raise last or BrokerNotAvailableError("no broker to ask for metadata")

    def wait_for_topic(self, name: str, timeout_ms: float) -> TopicMeta:
        """Return the topic's metadata, fetching it if not cached; retry unreachable brokers until the timeout.

        Raises:
            UnknownTopicError: the cluster says the topic does not exist (no auto-creation).
            TopicAuthorizationFailedError: this principal may not Describe the topic (Kafka's Metadata answer).
            BrokerNotAvailableError: no broker answered before the timeout.
        """
        deadline = self._clock() + timeout_ms / 1000.0
        self._topics.add(name)
        while True:
            t = self._view.topics.get(name)
            if t is not None and t.error is None and t.partitions:
                return t
            try:
                view = self.refresh([name])
            except OdradekError as exc:
                if not exc.retriable or self._clock() + self._backoff > deadline:
                    raise
                time.sleep(self._backoff)
                continue
            t = view.topics.get(name)
            if t is None or t.error == UnknownTopicError.name:
                raise UnknownTopicError(f"topic '{name}' does not exist", topic=name)
            check_authorized(t)
            if t.error is None and t.partitions:
                return t
            if self._clock() + self._backoff > deadline:
                raise LeaderNotAvailableError(f"topic '{name}' has no partitions yet", topic=name)
            time.sleep(self._backoff)

    def hint_leader(self, topic: str, partition: int, leader: int | None, leader_url: str | None) -> None:
        """Apply a NOT_LEADER_OR_FOLLOWER answer's ``leader``/``leader_url`` at once, ahead of the refresh."""
        if leader is None or leader < 0:
            return
        # A refresh in progress will bring the truth anyway, and must not be overwritten by a hint.
        if not self._refresh_lock.acquire(blocking=False):
            return
        try:
            self._apply_hint(topic, partition, leader, leader_url)
        finally:
            self._refresh_lock.release()

    def _apply_hint(self, topic: str, partition: int, leader: int, leader_url: str | None) -> None:
        view = self._view
        t = view.topics.get(topic)
        if t is None:
            return
        parts = tuple(
            PartitionMeta(p.partition, leader, p.leader_epoch, p.replicas, p.isr) if p.partition == partition else p
            for p in t.partitions
        )
        brokers = view.brokers
        if leader_url and brokers.get(leader) != normalize_url(leader_url):
            brokers = {**brokers, leader: normalize_url(leader_url)}
        available = tuple(p.partition for p in parts if p.leader >= 0 and p.leader in brokers)
        topics = {**view.topics, topic: TopicMeta(t.name, t.error, parts, available)}
        self._view = ClusterView(view.cluster_id, view.controller_id, brokers, topics)


def check_authorized(meta: TopicMeta | None) -> None:
    """Raise TOPIC_AUTHORIZATION_FAILED when the metadata answer says this principal may not Describe the topic
    (the brokers filter listings and answer named topics so, as Kafka does): retrying cannot help."""
    if meta is not None and meta.error == TopicAuthorizationFailedError.name:
        raise TopicAuthorizationFailedError(f"not authorized to access topic '{meta.name}'", topic=meta.name)
