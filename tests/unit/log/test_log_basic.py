"""The Log API the broker uses: append, read, offsets, timestamps, rolls, follower appends, flushing."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log import Log, LogConfig
from odradek.protocol import records as r
from odradek.protocol.errors import InvalidRecordError, OffsetOutOfRangeError

from .helpers import FakeClock, batch, batch_offsets, config, keyed_batch, open_log, read_all


def test_append_assigns_offsets_by_rewriting_headers_only(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = batch(3, tag=1)
    second = batch(2, tag=2)
    res1 = log.append(first, leader_epoch=5)
    res2 = log.append(second, leader_epoch=5)
    assert (res1.first_offset, res1.last_offset, res1.record_count) == (0, 2, 3)
    assert (res2.first_offset, res2.last_offset) == (3, 4)
    assert res2.max_timestamp == 1_001 and res2.log_append_time is None
    assert log.log_end_offset == 5
    data = read_all(log)
    # Identical to what the producer sent, except the stamped base offset and leader epoch.
    assert data == r.encode_batch(
        [(b"k", f"1:{i}:".encode().ljust(20, b"x"), 1_000 + i, ()) for i in range(3)],
        base_offset=0,
        partition_leader_epoch=5,
    ) + r.encode_batch(
        [(b"k", f"2:{i}:".encode().ljust(20, b"x"), 1_000 + i, ()) for i in range(2)],
        base_offset=3,
        partition_leader_epoch=5,
    )
    assert [rec.offset for rec in r.decode_records(data)] == [0, 1, 2, 3, 4]
    assert log.epoch_cache.entries() == [(5, 0)]


def test_several_batches_in_one_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    res = log.append(batch(2, tag=1) + batch(3, tag=2) + batch(1, tag=3), leader_epoch=0)
    assert (res.first_offset, res.last_offset, res.record_count) == (0, 5, 6)
    assert batch_offsets(read_all(log)) == [(0, 1), (2, 4), (5, 5)]


def test_read_returns_whole_batches_from_the_one_holding_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"index.interval.bytes": 1})
    for i in range(10):
        log.append(batch(4, tag=i), leader_epoch=0)
    size = len(batch(4))
    got = log.read(6, max_bytes=size * 2)
    assert batch_offsets(got.data) == [(4, 7), (8, 11)]
    assert got.next_offset == 12 and got.log_end_offset == 40 and got.log_start_offset == 0
    # at least one whole batch even when max_bytes is smaller
    assert batch_offsets(log.read(6, max_bytes=1).data) == [(4, 7)]
    # never a batch starting at or after max_offset (the high watermark)
    assert batch_offsets(log.read(6, max_bytes=10_000, max_offset=12).data) == [(4, 7), (8, 11)]
    assert batch_offsets(log.read(6, max_bytes=10_000, max_offset=9).data) == [(4, 7), (8, 11)]
    assert log.read(12, max_bytes=10_000, max_offset=12).data == b""
    assert log.read(40, max_bytes=10).data == b""


def test_read_out_of_range_names_the_valid_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(3), leader_epoch=0)
    with pytest.raises(OffsetOutOfRangeError, match=r"\[0, 3\]") as info:
        log.read(4, 100)
    assert info.value.details == {"log_start_offset": 0, "log_end_offset": 3}
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)


def test_roll_by_size_and_reads_across_segments(tmp_path: Path) -> None:
    size = len(batch(4))
    log = open_log(tmp_path / "t-0", {"segment.bytes": size * 3, "index.interval.bytes": 100})
    for i in range(10):
        log.append(batch(4, tag=i), leader_epoch=0)
    assert [s.base_offset for s in log.segments()] == [0, 12, 24, 36]
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.log")) == [
        "00000000000000000000.log",
        "00000000000000000012.log",
        "00000000000000000024.log",
        "00000000000000000036.log",
    ]
    # one read returns batches from one segment only
    assert batch_offsets(log.read(8, 1 << 20).data) == [(8, 11)]
    assert [rec.offset for rec in r.decode_records(read_all(log))] == list(range(40))
    assert log.recovery_point == 36  # rolls flush the finished segments


def test_roll_by_time_uses_the_clock_of_the_first_append(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", {"segment.ms": 1000}, clock)
    log.append(batch(1), leader_epoch=0)
    clock.advance(1000)
    log.append(batch(1), leader_epoch=0)
    assert len(log.segments()) == 1
    clock.advance(1)
    log.append(batch(1), leader_epoch=0)
    assert [s.base_offset for s in log.segments()] == [0, 2]


def test_offset_for_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"segment.bytes": 400, "index.interval.bytes": 1})
    for i in range(20):
        log.append(r.encode_batch([(b"k", b"v" * 30, 10_000 + 100 * i + j, ()) for j in range(3)]), leader_epoch=0)
    assert len(log.segments()) > 3
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(10_000) == 0
    assert log.offset_for_timestamp(10_001) == 1
    assert log.offset_for_timestamp(10_003) == 3  # no record at 10_003: the next one, 10_100, is offset 3
    assert log.offset_for_timestamp(11_202) == 38
    assert log.offset_for_timestamp(11_903) is None
    assert log.offset_for_timestamp(-2) == 0 and log.offset_for_timestamp(-1) == 60
    log.delete_records_before(30)
    assert log.offset_for_timestamp(0) == 30


def test_log_append_time(tmp_path: Path) -> None:
    clock = FakeClock(5_000_000)
    log = open_log(tmp_path / "t-0", {"message.timestamp.type": "LogAppendTime"}, clock)
    res = log.append(batch(2, ts=7), leader_epoch=0)
    assert res.log_append_time == 5_000_000 and res.max_timestamp == 5_000_000
    assert [rec.timestamp for rec in r.decode_records(read_all(log))] == [5_000_000, 5_000_000]


def test_append_replicated_keeps_offsets_epochs_and_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    first = r.encode_batch([(b"a", b"1", 1, ())] * 3, base_offset=0, partition_leader_epoch=1)
    second = r.encode_batch([(b"b", b"2", 2, ())] * 2, base_offset=3, partition_leader_epoch=1)
    gap = r.encode_batch([(b"c", b"3", 3, ())], base_offset=9, partition_leader_epoch=4)
    res = log.append_replicated(first + second)
    assert (res.first_offset, res.last_offset, res.record_count) == (0, 4, 5)
    log.append_replicated(gap)  # compaction on the leader left a gap: copied as is
    assert log.log_end_offset == 10
    assert read_all(log) == first + second + gap
    assert log.epoch_cache.entries() == [(1, 0), (4, 9)]
    with pytest.raises(InvalidRecordError, match="below"):
        log.append_replicated(r.encode_batch([(b"x", b"y", 1, ())], base_offset=5))
    assert log.log_end_offset == 10


def test_delete_records_before_moves_the_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"segment.bytes": len(batch(5)) * 2})
    for i in range(6):
        log.append(batch(5, tag=i), leader_epoch=0)
    assert [s.base_offset for s in log.segments()] == [0, 10, 20]
    log.high_watermark = 25
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(26)
    assert log.delete_records_before(13) == 13
    assert [s.base_offset for s in log.segments()] == [10, 20]  # segment 0..9 is wholly below
    with pytest.raises(OffsetOutOfRangeError):
        log.read(12, 100)
    assert batch_offsets(log.read(13, 1).data) == [(10, 14)]  # the batch holding 13
    assert log.delete_records_before(5) == 13  # never backwards


def test_truncate_to_and_reappend(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"segment.bytes": len(batch(5)) * 2})
    for i in range(6):
        log.append(batch(5, tag=i), leader_epoch=i)
    assert log.truncate_to(17) == 15  # the batch 15..19 straddles 17: batches are atomic
    assert [s.base_offset for s in log.segments()] == [0, 10]
    assert log.epoch_cache.entries() == [(0, 0), (1, 5), (2, 10)]
    log.append(batch(2, tag=9), leader_epoch=7)
    assert batch_offsets(read_all(log))[-2:] == [(10, 14), (15, 16)]
    assert log.truncate_to(10) == 10
    assert log.truncate_to(100) == 10
    assert log.epoch_cache.entries() == [(0, 0), (1, 5)]


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append(batch(5), leader_epoch=1)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert log.epoch_cache.entries() == []
    res = log.append(batch(2), leader_epoch=2)
    assert res.first_offset == 1000
    assert [p.name for p in sorted((tmp_path / "t-0").glob("*.log"))] == ["00000000000000001000.log"]
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert (reopened.log_start_offset, reopened.log_end_offset) == (1000, 1002)


def test_flush_messages_policy_advances_the_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"flush.messages": 4})
    log.append(batch(3), leader_epoch=0)
    assert log.recovery_point == 0
    log.append(batch(3), leader_epoch=0)
    assert log.recovery_point == 6


def test_flush_ms_policy(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", {"flush.ms": 100}, clock)
    log.append(batch(3), leader_epoch=0)
    assert not log.flush_if_due()
    clock.advance(100)
    assert log.flush_if_due() and log.recovery_point == 3
    assert not log.flush_if_due()


def test_default_flush_policy_is_left_to_the_os() -> None:
    cfg = LogConfig()
    assert cfg.flush_messages == cfg.flush_ms == 2**63 - 1


def test_compacted_topic_refuses_keyless_records(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"cleanup.policy": "compact"})
    with pytest.raises(InvalidRecordError, match="without key"):
        log.append(keyed_batch([(b"a", b"1")]) + batch(1, key=None), leader_epoch=0)
    assert log.log_end_offset == 0


def test_reopen_after_clean_close_keeps_everything(tmp_path: Path) -> None:
    cfg = config(segment_bytes=len(batch(5)) * 2, index_interval_bytes=50)
    log = Log.open(tmp_path / "t-0", cfg)
    for i in range(7):
        log.append(batch(5, tag=i), leader_epoch=3)
    before = read_all(log)
    log.close()
    with pytest.raises(Exception, match="closed"):
        log.append(batch(1), leader_epoch=3)
    log = Log.open(tmp_path / "t-0", cfg, recovery_point=35, clean_shutdown=True)
    assert log.log_end_offset == 35 and read_all(log) == before
    assert log.segments()[0].max_timestamp == 1_004
    assert log.epoch_cache.entries() == [(3, 0)]
    log.append(batch(1), leader_epoch=3)
    assert log.log_end_offset == 36


def test_config_from_topic_config() -> None:
    from odradek.protocol.errors import InvalidConfigError

    cfg = LogConfig.from_topic_config(
        {"cleanup.policy": "compact,delete", "retention.ms": "-1", "min.insync.replicas": "2"},
        {"segment.bytes": "1048576"},
    )
    assert cfg.compact and cfg.delete_enabled and cfg.retention_ms == -1 and cfg.segment_bytes == 1 << 20
    assert cfg.extra == {"min.insync.replicas": "2"}
    assert LogConfig.from_topic_config(cfg.to_topic_config()) == cfg
    for bad in (
        {"segment.bytes": "abc"},
        {"segment.bytes": "1"},
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"no.such.config": "1"},
        {"message.timestamp.type": "Now"},
        {"retention.ms": "-2"},
    ):
        with pytest.raises(InvalidConfigError, match=next(iter(bad))):
            LogConfig.from_topic_config(bad)


def test_follower_far_ahead_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    far = 2**31 + 100  # relative offsets in the index are int32
    log.append_replicated(r.encode_batch([(b"k", b"v", 1, ())] * 2, base_offset=far))
    assert [s.base_offset for s in log.segments()] == [far]
    assert log.log_end_offset == far + 2 and batch_offsets(log.read(far + 1, 100).data) == [(far, far + 1)]


def test_append_of_more_batches_than_iov_max(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    singles = [r.encode_batch([(b"k", b"%d" % i, i, ())]) for i in range(700)]  # 1,400 iovec parts
    res = log.append(b"".join(singles), leader_epoch=2)
    assert (res.first_offset, res.last_offset) == (0, 699)
    expected = b"".join(
        r.encode_batch([(b"k", b"%d" % i, i, ())], base_offset=i, partition_leader_epoch=2) for i in range(700)
    )
    assert read_all(log) == expected


def test_a_replicated_append_to_the_page_cache_only_refuses_what_would_wait_on_more(tmp_path: Path) -> None:
    """``append_replicated_to_page_cache`` (a follower's append on the event loop) appends as ``append_replicated``
    does when that is only a page-cache write, and returns None with nothing changed when it would roll, write the
    epoch checkpoint, fsync for ``flush.messages`` or wait for the log's lock."""
    def replicated(base: int, epoch: int, n: int = 2) -> bytes:
        return r.encode_batch([(b"k", b"v" * 40, 1, ())] * n, base_offset=base, partition_leader_epoch=epoch)

    one = replicated(0, 1)
    log = open_log(tmp_path / "t-0", {"segment_bytes": len(one) * 2 + 1, "flush_messages": 7})
    log.append_replicated(one)  # epoch 1 begins (its checkpoint written on the storage path)
    fsyncs: list[int] = []
    log.flush = lambda *a, **k: fsyncs.append(1)  # type: ignore[method-assign]

    def unchanged(data: bytes) -> None:
        end, epochs, size = log.log_end_offset, log.epoch_cache.entries(), len(read_all(log))
        assert log.append_replicated_to_page_cache(data) is None
        assert (log.log_end_offset, log.epoch_cache.entries(), len(read_all(log))) == (end, epochs, size)

    unchanged(replicated(2, 2))  # a new epoch: its checkpoint is an fsync
    res = log.append_replicated_to_page_cache(replicated(2, 1))
    assert res is not None and (res.first_offset, res.last_offset, res.record_count) == (2, 3, 2)
    assert read_all(log) == one + replicated(2, 1) and len(log._segments) == 1
    unchanged(replicated(4, 1))  # the segment is full: a roll
    log.append_replicated(replicated(4, 1))  # rolled on the storage path: 6 messages unflushed now
    unchanged(replicated(6, 1))  # the 7th message reaches flush.messages: an fsync
    assert not fsyncs
    end = log.log_end_offset
    with log._lock:  # another thread (a read's snapshot, a flush's bookkeeping) holds the lock
        assert log.append_replicated_to_page_cache(replicated(end, 1, n=1)) is None
    assert log.log_end_offset == end
    assert log.append_replicated_to_page_cache(replicated(end, 1, n=1)) is None  # (the flush, as above)
    log.close()
