"""The produce service's binary path (broker/produce/service.py ``append_batches``) against a real partition on
``tmp_path`` and a router double: a client's batches are checked as Kafka's LogValidator checks them, with the
topic's and the broker's limits, before anything is written, and the answer names this leader."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from broker.config import BrokerConfig
from broker.metadata.cache import MetadataCache
from broker.produce.service import INT64_MAX, AppendedBatches, BatchLimits, ProduceService
from broker.replication.partition import Partition
from odradek.protocol.errors import InvalidRecordError, InvalidTimestampError, NotLeaderOrFollowerError
from odradek.protocol.records import encode_batch
from tests.unit.replication.fakes import batch, config, info, make_partition

ME = 1


class FakeRouter:
    broker_id = ME

    def __init__(self, part: Partition | None) -> None:
        self.part = part

    async def await_leader(self, topic: str, partition: int, deadline: float) -> Partition:
        if self.part is None:
            raise NotLeaderOrFollowerError("broker 2 is the leader", leader=2)
        return self.part


def _service(part: Partition | None, limits: BatchLimits | None = None,
             topic_config: dict[str, str] | None = None) -> ProduceService:
    cache = MetadataCache()
    cache.configs["t"] = topic_config or {}
    return ProduceService(SimpleNamespace(cache=cache), object(),  # type: ignore[arg-type]
                          router=FakeRouter(part), batch_limits=limits)  # type: ignore[arg-type]


def _append(tmp_path: Path, data: bytearray, **kw: Any) -> tuple[AppendedBatches | Exception, Partition]:
    async def main() -> tuple[AppendedBatches | Exception, Partition]:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(ME, 4, (ME,)), config())
        try:
            return await _service(part, **kw).append_batches("t", 0, data, acks=1, timeout_ms=1000), part
        except Exception as e:
            return e, part

    return asyncio.run(main())


def test_valid_batches_are_appended_by_this_leader(tmp_path: Path) -> None:
    result, part = _append(tmp_path, batch(3))
    assert result == AppendedBatches(0, 2, 3, None, ME, 4, log_start_offset=0) and part.log_end_offset == 3


def test_a_batch_over_the_brokers_record_limit_leaves_no_trace(tmp_path: Path) -> None:
    result, part = _append(tmp_path, batch(3), limits=BatchLimits(max_records_per_batch=2))
    assert isinstance(result, InvalidRecordError) and part.log_end_offset == 0


def test_a_timestamp_beyond_the_topics_difference_leaves_no_trace(tmp_path: Path) -> None:
    result, part = _append(tmp_path, batch(1), topic_config={"message.timestamp.difference.max.ms": "60000"})
    assert isinstance(result, InvalidTimestampError) and part.log_end_offset == 0  # batch() stamps 1970
    now = int(time.time() * 1000)
    fresh = bytearray(encode_batch([(None, b"v", now, ())]))
    result, part = _append(tmp_path / "fresh", fresh, topic_config={"message.timestamp.difference.max.ms": "60000"})
    assert isinstance(result, AppendedBatches) and part.log_end_offset == 1


def test_the_binary_path_is_leader_only() -> None:
    with pytest.raises(NotLeaderOrFollowerError):
        asyncio.run(_service(None).append_batches("t", 0, batch(1), acks=1, timeout_ms=10))


def test_json_records_timestamps_are_checked_against_the_topics_difference() -> None:
    service = _service(None, topic_config={"message.timestamp.difference.max.ms": "60000"})
    now = int(time.time() * 1000)
    service.check_timestamps("t", [(None, b"v", now, []), (None, b"v", None, [])])
    with pytest.raises(InvalidTimestampError, match=r"records\[1\]\.timestamp 5"):
        service.check_timestamps("t", [(None, b"v", now, []), (None, b"v", 5, [])])
    assert _service(None).timestamp_diff_ms("t") == INT64_MAX  # unset: Kafka's Long.MAX_VALUE, no check
    for bad in ("-5", "lots", "1" * 30):
        assert _service(None, topic_config={"message.timestamp.difference.max.ms": bad}).timestamp_diff_ms("t") \
            == INT64_MAX


def test_the_default_limits_are_the_brokers_defaults() -> None:
    defaults = {f.name: f.default for f in dataclasses.fields(BrokerConfig)}
    limits = BatchLimits()
    assert limits.max_records_per_batch == defaults["max_records_per_batch"]
    assert limits.max_decompressed_batch_bytes == defaults["max_decompressed_batch_bytes"]
