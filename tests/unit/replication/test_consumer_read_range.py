"""A consumer's read answers OFFSET_OUT_OF_RANGE only outside the log, never between the HW and the log end.

Kafka's rule: a fetch above the high watermark but within the log end returns no records. A new leader's high
watermark lags the old leader's until its followers fetch from it, so a consumer that read up to the old high
watermark asks the new leader for an offset above its HW: calling that out of range made the consumer reset to
earliest (a fault run's group member went back from 14222 to 0).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.replication.partition import LEADER
from odradek.protocol.errors import OffsetOutOfRangeError

from .fakes import batch, config, info, make_partition


def test_an_offset_between_the_high_watermark_and_the_log_end_reads_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        assert await part.apply(info(1, 2, (1, 2)), config()) == LEADER
        await part.append(batch(5), acks=1, timeout_ms=1000)  # broker 2 has not fetched: HW 0, log end 5
        assert (part.high_watermark, part.log_end_offset) == (0, 5)
        for offset in (1, 5):  # above the HW, within the log: no records, no error, however long it waits
            result = await part.read(offset, 1 << 20, 0)
            assert result.data == b"" and result.next_offset == offset
            assert (await part.read(offset, 1 << 20, 20)).data == b""
        await part.read_for_follower(2, 5, 2, 1 << 20, 0)  # the follower catches up: HW 5
        assert part.high_watermark == 5 and (await part.read(1, 1 << 20, 0)).data
        with pytest.raises(OffsetOutOfRangeError) as beyond:  # past the log end: really out of range
            await part.read(6, 1 << 20, 0)
        assert beyond.value.details["log_end_offset"] == 5 and beyond.value.details["leader_epoch"] == 2
        assert beyond.value.details["log_start_offset"] == 0

    asyncio.run(main())
