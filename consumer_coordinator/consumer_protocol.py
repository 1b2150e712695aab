"""Kafka's consumer protocol bytes (protocol type ``consumer``): the subscription a member sends in JoinGroup and
the assignment its leader hands out in SyncGroup, read and written with kio's schemas of Kafka's
ConsumerProtocolSubscription and ConsumerProtocolAssignment.

Why the coordinator reads bytes it otherwise keeps opaque: only for views and for one rule, as Kafka's
GroupMetadata does (the members' topics for OffsetDelete's GROUP_SUBSCRIBED_TO_TOPIC, the assignment for the
describe views and the admin tools' lag); never to decide a member's assignment. And why it writes them: so a
Kafka admin client describing a server-side group (docs/consumer-groups.md) decodes its members as it decodes any
consumer group's.

Format: a big-endian int16 version, then the struct of that version. Versions only ever append fields, so bytes of
a version newer than kio knows read with the newest schema kio has (Kafka's rule too: trailing fields are skipped).
Bytes that do not parse read as None: they came from a client, and a view must not fail on them.
"""

from __future__ import annotations

import functools
import importlib
import io
import struct
from collections.abc import Iterable
from typing import Any

from kio.serial import entity_reader, entity_writer

TP = tuple[str, int]
CONSUMER = "consumer"
_VERSION = struct.Struct(">h")
_NEWEST = 3  # the newest version kio has of both structs


@functools.cache
def _schema(kind: str, version: int) -> Any:
    module = importlib.import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data")
    return getattr(module, f"ConsumerProtocol{kind.capitalize()}")


@functools.cache
def _reader(kind: str, version: int) -> Any:
    return entity_reader(_schema(kind, version))


def _decode(kind: str, data: bytes) -> Any | None:
    if len(data) < _VERSION.size:
        return None
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        return None
    try:
        value, _ = _reader(kind, min(version, _NEWEST))(memoryview(data), _VERSION.size)
    except Exception:
        return None
    return value


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer's JoinGroup metadata; None if the bytes are not a consumer subscription."""
    sub = _decode("subscription", metadata)
    return None if sub is None else frozenset(str(t) for t in sub.topics)


def assignment_partitions(assignment: bytes) -> list[TP] | None:
    """The partitions of a SyncGroup assignment, sorted; None if the bytes are not a consumer assignment (an empty
    assignment, which a member is handed before its leader's SyncGroup, is no partitions)."""
    if not assignment:
        return []
    value = _decode("assignment", assignment)
    if value is None:
        return None
    return sorted((str(tp.topic), int(p)) for tp in value.assigned_partitions for p in tp.partitions)


def _encode(kind: str, version: int, **fields: Any) -> bytes:
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(_schema(kind, version))(out, _schema(kind, version)(**fields))
    return out.getvalue()


def _by_topic(partitions: Iterable[TP]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in sorted(partitions):
        out.setdefault(topic, []).append(p)
    return out


def encode_subscription(topics: Iterable[str]) -> bytes:
    """Version 0 (topics, no user data): what every consumer protocol reader can read."""
    return _encode("subscription", 0, topics=tuple(sorted(topics)), user_data=None)


def encode_assignment(partitions: Iterable[TP]) -> bytes:
    """Version 0 (partitions by topic, no user data)."""
    nested = importlib.import_module("kio.schema.consumer_protocol_assignment.v0.data").TopicPartition
    return _encode("assignment", 0, assigned_partitions=tuple(
        nested(topic=t, partitions=tuple(ps)) for t, ps in _by_topic(partitions).items()), user_data=None)
