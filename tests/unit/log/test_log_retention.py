"""Retention: whole old segments go by time and by size, never data at or above the high watermark."""

from __future__ import annotations

import threading
from pathlib import Path

from broker.log import Log
from odradek.protocol import records as r

from .helpers import FakeClock, batch, batch_offsets, config, open_log, read_all

SEG = len(batch(4))


def _fill(log: Log, clock: FakeClock, batches: int, step_ms: int = 1000) -> None:
    for i in range(batches):
        log.append(batch(4, tag=i, ts=clock.ms), leader_epoch=0)
        clock.advance(step_ms)


def test_retention_by_time(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", {"segment.bytes": SEG * 2, "retention.ms": 10_000}, clock)
    _fill(log, clock, 10)  # segments of two batches, one batch per second
    assert [s.base_offset for s in log.segments()] == [0, 8, 16, 24, 32]
    assert log.delete_old_segments() == 0
    clock.advance(1_003)  # the first segment's newest record (T + 1_003) is now exactly 10_000 ms old: not yet
    assert log.delete_old_segments() == 0
    clock.advance(1)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 8 and [s.base_offset for s in log.segments()] == [8, 16, 24, 32]
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    clock.advance(4_000)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 24
    assert [rec.offset for rec in r.decode_records(read_all(log))] == list(range(24, 40))


def test_expired_active_segment_is_rolled_then_deleted(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", {"retention.ms": 1_000}, clock)
    _fill(log, clock, 3)
    clock.advance(5_000)
    assert log.delete_old_segments() == 1
    assert (log.log_start_offset, log.log_end_offset) == (12, 12)
    assert [s.base_offset for s in log.segments()] == [12] and log.segments()[0].is_empty
    assert log.append(batch(1), leader_epoch=0).first_offset == 12


def test_retention_by_size(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", {"segment.bytes": SEG * 2, "retention.bytes": SEG * 5}, clock)
    _fill(log, clock, 10)
    assert log.size_in_bytes == SEG * 10
    assert log.delete_old_segments() == 2  # 10 -> 8 -> 6: deleting a third would leave 4 < 5
    assert log.size_in_bytes == SEG * 6 and log.log_start_offset == 16


def test_retention_never_deletes_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", {"segment.bytes": SEG * 2, "retention.ms": 1}, clock)
    _fill(log, clock, 10)
    clock.advance(100_000)
    log.high_watermark = 17  # segment 16..23 holds offsets >= HW
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == 16
    log.high_watermark = 40
    assert log.delete_old_segments() == 3  # everything, the active segment rolled first
    assert log.log_start_offset == log.log_end_offset == 40


def test_unlimited_and_compact_only_keep_everything(tmp_path: Path) -> None:
    clock = FakeClock()
    log = open_log(tmp_path / "a-0", {"segment.bytes": SEG * 2, "retention.ms": -1, "retention.bytes": -1}, clock)
    _fill(log, clock, 6)
    compact = open_log(
        tmp_path / "b-0", {"segment.bytes": SEG * 2, "retention.ms": 1, "cleanup.policy": "compact"}, clock
    )
    _fill(compact, clock, 6)
    clock.advance(10**9)
    assert log.delete_old_segments() == 0 and compact.delete_old_segments() == 0


def test_deleted_files_stay_readable_until_the_delay(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = config(segment_bytes=SEG * 2, retention_ms=1_000, file_delete_delay_ms=60_000)
    log = Log.open(tmp_path / "t-0", cfg, now=clock)
    _fill(log, clock, 6)
    old_segment = log.segments()[0]
    clock.advance(10_000)
    assert log.delete_old_segments() == 3
    assert (tmp_path / "t-0" / "00000000000000000000.log.deleted").exists()
    # an in-flight reader that took its snapshot before the deletion still gets the old bytes
    found = old_segment.read(0, 10_000, None, old_segment.size)
    assert found is not None and batch_offsets(found[0]) == [(0, 3), (4, 7)]
    clock.advance(59_999)
    log.delete_expired_files()
    assert (tmp_path / "t-0" / "00000000000000000000.log.deleted").exists()
    clock.advance(1)
    log.delete_expired_files()
    assert not list((tmp_path / "t-0").glob("*.deleted"))


def test_retention_runs_while_another_thread_appends_and_reads(tmp_path: Path) -> None:
    clock = FakeClock()
    cfg = config(segment_bytes=SEG * 3, retention_bytes=SEG * 6, file_delete_delay_ms=60_000)
    log = Log.open(tmp_path / "t-0", cfg, now=clock)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                start = log.log_start_offset
                try:
                    got = log.read(start, 5_000)
                except Exception as exc:  # the start may move between the two calls
                    if "out of range" not in str(exc):
                        raise
                    continue
                r.decode_records(got.data)  # whole, valid batches
        except BaseException as exc:
            errors.append(exc)

    def retention() -> None:
        try:
            while not stop.is_set():
                log.delete_old_segments()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader), threading.Thread(target=retention)]
    for t in threads:
        t.start()
    try:
        for i in range(300):
            assert log.append(batch(4, tag=i), leader_epoch=0).first_offset == 4 * i
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors
    log.delete_old_segments()
    assert log.size_in_bytes <= SEG * 6 + SEG * 3 and log.log_end_offset == 1200
