"""Odradek's Python client and wire contract."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.client import (
        AdminClient,
        CommitFailedError,
        Consumer,
        ConsumerRecord,
        GroupConsumer,
        OffsetAndMetadata,
        Producer,
        RecordMetadata,
        TopicDescription,
        TopicPartition,
    )

__all__ = [
    "AdminClient",
    "CommitFailedError",
    "Consumer",
    "ConsumerRecord",
    "GroupConsumer",
    "OffsetAndMetadata",
    "Producer",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]


def __getattr__(name: str) -> Any:
    # Lazy (PEP 562): the broker imports odradek.protocol and should not load the client.
    if name in __all__:
        from odradek import client

        return getattr(client, name)
    raise AttributeError(f"module 'odradek' has no attribute {name!r}")
