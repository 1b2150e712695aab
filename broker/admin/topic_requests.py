"""Kafka's CreateTopics, DeleteTopics and CreatePartitions as a service: Kafka's admin-manager rules over
``TopicAdmin`` (the same ZooKeeper writes the HTTP API makes), then one wait for the controller.

Each topic of a request is validated and written on its own (one topic's error never fails another); then, as
Kafka's DelayedCreatePartitions and DelayedDeleteTopics, the request waits up to its timeout until this broker's
metadata shows every change made (each partition with a leader; a deleted topic gone). What the wait does not
see within the timeout is REQUEST_TIMED_OUT for that topic: the change is written and the controller carries it
out later. A timeout of 0 answers at once, REQUEST_TIMED_OUT for every topic written (Kafka's answer, which
clients read as "started"). ``validate_only`` runs every check, writes nothing and does not wait.

The broker's partition limits (``max.partitions.per.topic``, ``max.partitions``) and ``max.config.value.bytes``
are checked against this broker's metadata before anything is written (POLICY_VIOLATION), as over HTTP.

Concurrency: the methods run on the broker's loop; ZooKeeper work goes to a thread, one hop per topic.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from broker.admin.config_entries import ConfigEntry, topic_entries
from broker.admin.topics import TopicAdmin, check_partition_limits, effective_topic_config, validate_configs
from broker.config import BrokerConfig
from broker.metadata.cache import MetadataCache
from odradek.protocol.errors import (
    InvalidRequestError,
    OdradekError,
    PolicyViolationError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicError,
)

log = logging.getLogger(__name__)

NO_VALUE = -1  # Kafka's "not given": num_partitions and replication_factor take the broker's default


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = NO_VALUE
    replication_factor: int = NO_VALUE
    assignment: dict[int, list[int]] | None = None  # partition -> replicas; excludes the two counts
    configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """A topic created (or, with ``validate_only``, that would be): its id (None on a dry run), its size and
    its configs as DescribeConfigs describes them."""

    name: str
    topic_id: str | None
    num_partitions: int
    replication_factor: int
    configs: tuple[ConfigEntry, ...]


@dataclass(frozen=True, slots=True)
class NewPartitions:
    name: str
    count: int  # the topic's partition count after the change
    assignment: list[list[int]] | None = None  # the new partitions' replicas, in order


Outcome = CreatedTopic | OdradekError | None  # None: done (deletion, growth)


def typed(e: BaseException, what: str) -> OdradekError:
    """``e`` as the typed error an answer carries: an unexpected one is logged and UNKNOWN_SERVER_ERROR."""
    if isinstance(e, OdradekError):
        return e
    log.error("%s failed", what, exc_info=e)
    return UnknownServerError(f"{what} failed: {e}")


class TopicRequests:
    def __init__(self, admin: TopicAdmin, cache: MetadataCache, changed: Callable[[float], Awaitable[None]],
                 limits: BrokerConfig) -> None:
        """``changed(timeout_s)``: returns when this broker's metadata changed (or raises TimeoutError)."""
        self._admin = admin
        self._cache = cache
        self._changed = changed
        self._limits = limits

    # --------------------------------------------------------------------------------------------- create

    async def create(self, topics: Sequence[NewTopic], *, timeout_ms: int,
                     validate_only: bool = False) -> dict[str, CreatedTopic | OdradekError]:
        """Create each topic (by name; a name given twice is INVALID_REQUEST for it, nothing created)."""
        out: dict[str, CreatedTopic | OdradekError] = {}
        names = [t.name for t in topics]
        for topic in topics:
            if names.count(topic.name) > 1:
                out[topic.name] = InvalidRequestError("Found multiple entries for this topic.")
                continue
            try:
                self._check_limits(topic)
                out[topic.name] = await asyncio.to_thread(self._create_one, topic, validate_only)
            except Exception as e:
                out[topic.name] = typed(e, f"creating topic {topic.name}")
        if validate_only:
            return out
        created = {n: r.num_partitions for n, r in out.items() if isinstance(r, CreatedTopic)}
        late = await self._wait(lambda name: self._all_led(name, created[name]), list(created), timeout_ms)
        for name in late:
            out[name] = RequestTimedOutError(f"topic '{name}' was created, but not every partition had a leader "
                                             f"within {timeout_ms} ms")
        return out

    def _check_limits(self, topic: NewTopic) -> None:
        """On the loop: the partition limits against the cache, the config value sizes."""
        count = len(topic.assignment) if topic.assignment else max(topic.num_partitions, 1)
        config = self._limits
        check_partition_limits(self._cache.topics, topic.name, count, per_topic=config.max_partitions_per_topic,
                               cluster=config.max_partitions)
        for key, value in topic.configs.items():
            if value is not None and len(value.encode()) > config.max_config_value_bytes:
                raise PolicyViolationError(f"the value of config {key[:80]} is {len(value.encode())} bytes; the "
                                           f"limit is {config.max_config_value_bytes} (max.config.value.bytes)")

    def _create_one(self, topic: NewTopic, validate_only: bool) -> CreatedTopic:
        nulls = sorted(k for k, v in topic.configs.items() if v is None)
        if nulls:
            raise InvalidRequestError(f"Null value not supported for topic configs : {','.join(nulls)}")
        if topic.assignment and (topic.num_partitions != NO_VALUE or topic.replication_factor != NO_VALUE):
            raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments were set. "
                                      "Both cannot be used at the same time.")
        configs = {k: v for k, v in topic.configs.items() if v is not None}
        if topic.assignment:
            created = self._admin.create_topic(topic.name, None, None, configs, topic.assignment,
                                               validate_only=validate_only)
        else:
            created = self._admin.create_topic(
                topic.name, None if topic.num_partitions == NO_VALUE else topic.num_partitions,
                None if topic.replication_factor == NO_VALUE else topic.replication_factor, configs,
                validate_only=validate_only)
        overrides = validate_configs(configs)
        return CreatedTopic(topic.name, None if validate_only else created.topic_id, len(created.partitions),
                            len(next(iter(created.partitions.values()))),
                            tuple(topic_entries(overrides, effective_topic_config(overrides))))

    # --------------------------------------------------------------------------------------------- delete

    async def delete(self, names: Sequence[str], *, timeout_ms: int) -> dict[str, OdradekError | None]:
        """Mark each topic for deletion and wait until this broker's metadata no longer has it."""
        out: dict[str, OdradekError | None] = {}
        for name in dict.fromkeys(names):
            try:
                await asyncio.to_thread(self._admin.delete_topic, name)
                out[name] = None
            except Exception as e:
                out[name] = typed(e, f"deleting topic {name}")
        marked = [n for n, r in out.items() if r is None]
        for name in await self._wait(lambda n: n not in self._cache.topics, marked, timeout_ms):
            out[name] = RequestTimedOutError(f"topic '{name}' is marked for deletion, but was not deleted within "
                                             f"{timeout_ms} ms")
        return out

    # ----------------------------------------------------------------------------------------- partitions

    async def create_partitions(self, requests: Sequence[NewPartitions], *, timeout_ms: int,
                                validate_only: bool = False) -> dict[str, OdradekError | None]:
        """Grow each topic (a name given twice is INVALID_REQUEST for it, nothing changed)."""
        out: dict[str, OdradekError | None] = {}
        names = [r.name for r in requests]
        for request in requests:
            if names.count(request.name) > 1:
                out[request.name] = InvalidRequestError("Duplicate topic in request.")
                continue
            try:
                if request.name not in self._cache.topics:
                    raise UnknownTopicError(f"The topic '{request.name}' does not exist.")
                check_partition_limits(self._cache.topics, request.name, request.count,
                                       per_topic=self._limits.max_partitions_per_topic,
                                       cluster=self._limits.max_partitions)
                await asyncio.to_thread(self._admin.add_partitions, request.name, request.count, request.assignment,
                                        validate_only=validate_only)
                out[request.name] = None
            except Exception as e:
                out[request.name] = typed(e, f"adding partitions to {request.name}")
        if validate_only:
            return out
        counts = {r.name: r.count for r in requests if r.name in out and out[r.name] is None}
        late = await self._wait(lambda name: self._all_led(name, counts[name]), list(counts), timeout_ms)
        for name in late:
            out[name] = RequestTimedOutError(f"topic '{name}' was grown to {counts[name]} partitions, but not every "
                                             f"new partition had a leader within {timeout_ms} ms")
        return out

    # ------------------------------------------------------------------------------------------ internals

    def _all_led(self, name: str, count: int) -> bool:
        partitions = self._cache.partitions
        return all((p := partitions.get((name, i))) is not None and p.leader >= 0 for i in range(count))

    async def _wait(self, done: Callable[[str], bool], names: list[str], timeout_ms: int) -> list[str]:
        """Wait until ``done(name)`` holds for every name, at most ``timeout_ms``; the names it never held for
        (all of them when ``timeout_ms`` <= 0: Kafka answers at once, and REQUEST_TIMED_OUT)."""
        if timeout_ms <= 0:
            return names
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            pending = [n for n in names if not done(n)]
            remaining = deadline - time.monotonic()
            if not pending or remaining <= 0:
                return pending
            try:
                await self._changed(min(remaining, 0.5))
            except TimeoutError:
                continue
