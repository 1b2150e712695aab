"""The Python client: Producer, Consumer and AdminClient over the brokers' HTTP API.

Modules: ``transport`` (pooled keep-alive HTTP, typed errors), ``metadata`` (partition leaders),
``accumulator`` (the producer's batching rules), ``producer``, ``consumer``, ``group_consumer`` (with
``group_membership``), ``admin``, ``types``.
"""

from odradek.client.admin import AdminClient, TopicDescription
from odradek.client.consumer import Consumer
from odradek.client.group_consumer import GroupConsumer, OffsetAndMetadata
from odradek.client.producer import Producer
from odradek.client.types import ConsumerRecord, RecordMetadata, TopicPartition
from odradek.protocol.errors import CommitFailedError

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
