"""The small value types a client hands out: plain NamedTuples, so they are cheap to build once per record."""

from __future__ import annotations

from typing import NamedTuple

from odradek.protocol.model import TopicPartition

__all__ = ["ConsumerRecord", "Header", "RecordMetadata", "TopicPartition"]

Header = tuple[str, bytes | None]



class RecordMetadata(NamedTuple):
    """Where an acknowledged record went. ``offset`` is -1 under ``acks=0``: the leader did not say."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    """One record as read; ``value is None`` is a tombstone."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
