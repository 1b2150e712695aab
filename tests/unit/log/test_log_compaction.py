"""Compaction keeps the latest record per key, drops tombstones after delete.retention.ms, keeps offsets."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker.log import Log, cleaner
from odradek.protocol import records as r

from .helpers import FakeClock, batch_offsets, config, keyed_batch, read_all, values_by_offset

CFG = {
    "cleanup.policy": "compact",
    "segment.bytes": 600,
    "index.interval.bytes": 100,
    "file.delete.delay.ms": 0,
    "delete.retention.ms": 10_000,
}


def _log(path: Path, clock: FakeClock, **extra: object) -> Log:
    cfg = dict(CFG)
    cfg.update({k.replace("_", "."): v for k, v in extra.items()})
    return Log.open(path, config(**{k.replace(".", "_"): v for k, v in cfg.items()}), now=clock)


def _write_updates(log: Log, clock: FakeClock, rounds: int, keys: int = 5, codec: int = r.NONE) -> dict[bytes, int]:
    """``rounds`` updates of every key, two keys per batch; returns key -> offset of its last value."""
    latest: dict[bytes, int] = {}
    for n in range(rounds):
        for k in range(0, keys, 2):
            items = [(b"key%d" % j, b"value-%d-%d" % (j, n)) for j in range(k, min(k + 2, keys))]
            res = log.append(keyed_batch(items, ts=clock.ms, compression=codec), leader_epoch=0)
            for i, (key, _v) in enumerate(items):
                latest[key] = res.first_offset + i
            clock.advance(10)
    return latest


def _expected(
    before: dict[int, tuple[bytes | None, bytes | None]], cleaned_below: int
) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Everything at/after ``cleaned_below`` (the active segment) and, below it, each key's last record there.

    Kafka does not look into the active segment while mapping, so a key's latest value below it survives
    even when the active segment holds a newer one.
    """
    latest = {kv[0]: off for off, kv in sorted(before.items()) if off < cleaned_below}
    return {off: kv for off, kv in before.items() if off >= cleaned_below or latest[kv[0]] == off}


@pytest.mark.parametrize("codec", [r.NONE, r.ZSTD])
def test_latest_value_per_key_survives_with_its_offset(tmp_path: Path, codec: int) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock)
    _write_updates(log, clock, rounds=12, codec=codec)
    before = values_by_offset(log)
    segments_before = len(log.segments())
    assert segments_before > 4
    active_base = log.active_segment.base_offset
    stats = cleaner.clean(log, clock.ms)
    assert stats is not None and stats.records_removed > 0 and not stats.aborted
    after = values_by_offset(log)
    assert after == _expected(before, active_base)
    assert len(after) < len(before)
    assert log.log_end_offset == 60 and log.first_dirty_offset == active_base
    # every batch re-encoded with its own codec
    for _pos, h in r.iter_batch_headers(read_all(log)):
        assert h.compression == (codec if h.record_count else r.NONE)
    # nothing more to do until enough new dirty data arrives
    assert cleaner.clean(log, clock.ms) is None
    first_pass_end = active_base
    shrunk = [s for s in log.segments() if s.base_offset < first_pass_end]
    _write_updates(log, clock, rounds=12, codec=codec)
    before = values_by_offset(log)
    active_base = log.active_segment.base_offset
    assert cleaner.clean(log, clock.ms) is not None
    assert values_by_offset(log) == _expected(before, active_base)
    # the segments the first pass shrank are merged (Kafka groups by size)
    assert len([s for s in log.segments() if s.base_offset < first_pass_end]) < len(shrunk)


def test_tombstones_go_only_after_delete_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock, min_cleanable_dirty_ratio="0.01")
    log.append(keyed_batch([(b"a", b"1"), (b"b", b"1")]), leader_epoch=0)
    log.append(keyed_batch([(b"a", None)]), leader_epoch=0)  # delete a
    log.roll()
    assert cleaner.clean(log, clock.ms) is not None
    assert values_by_offset(log) == {1: (b"b", b"1"), 2: (b"a", None)}  # tombstone kept, horizon stamped
    stamped = [h for _p, h in r.iter_batch_headers(read_all(log)) if h.base_offset == 2]
    assert stamped[0].delete_horizon_ms == clock.ms + 10_000
    assert [rec.timestamp for rec in r.decode_records(read_all(log))] == [1_000, 1_000]  # timestamps intact

    for step in (9_999, 1):  # more dirty data, so the log is cleanable again
        clock.advance(step)
        log.append(keyed_batch([(b"c%d" % step, b"1")]), leader_epoch=0)
        log.roll()
        stats = cleaner.clean(log, clock.ms)
        assert stats is not None
        assert stats.tombstones_removed == (1 if step == 1 else 0)
    assert values_by_offset(log) == {1: (b"b", b"1"), 3: (b"c9999", b"1"), 4: (b"c1", b"1")}
    assert log.log_end_offset == 5


def test_a_newer_value_after_a_tombstone_wins(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock)
    log.append(keyed_batch([(b"a", b"1")]), leader_epoch=0)
    log.append(keyed_batch([(b"a", None)]), leader_epoch=0)
    log.append(keyed_batch([(b"a", b"2")]), leader_epoch=0)
    log.roll()
    cleaner.clean(log, clock.ms)
    assert values_by_offset(log) == {2: (b"a", b"2")}


def test_active_segment_and_high_watermark_bound_the_cleanable_range(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock)
    _write_updates(log, clock, rounds=8)
    bases = [s.base_offset for s in log.segments()]
    log.high_watermark = bases[2] + 1  # segment bases[2] is not entirely below the HW
    before = values_by_offset(log)
    cleaner.clean(log, clock.ms)
    after = values_by_offset(log)
    assert {o: v for o, v in before.items() if o >= bases[2]} == {o: v for o, v in after.items() if o >= bases[2]}
    assert log.first_dirty_offset == bases[2]


def test_min_compaction_lag(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock, min_compaction_lag_ms=60_000)
    _write_updates(log, clock, rounds=6)
    assert cleaner.plan(log, clock.ms) is None  # everything is younger than the lag
    clock.advance(60_000)
    assert cleaner.clean(log, clock.ms) is not None


def test_empty_batch_keeps_a_cleaned_segment_end(tmp_path: Path) -> None:
    clock = FakeClock()
    b1, b2 = keyed_batch([(b"a", b"1")]), keyed_batch([(b"b", b"1"), (b"a", b"2")])
    # segment.bytes fits exactly the first two batches, so the two segments cannot be merged
    log = _log(tmp_path / "t-0", clock, segment_bytes=len(b1) + len(b2))
    log.append(b1, leader_epoch=0)
    log.append(b2, leader_epoch=0)
    log.append(keyed_batch([(b"a", b"3"), (b"b", b"2")]), leader_epoch=0)  # rolls: segment 3
    log.roll()
    assert [s.base_offset for s in log.segments()] == [0, 3, 5]
    cleaner.clean(log, clock.ms)
    data = read_all(log)
    # offsets 0..2 are all superseded; segment 0 keeps its last batch as an empty header ending at offset 2
    assert batch_offsets(data) == [(1, 2), (3, 4)]
    assert r.parse_header(data).record_count == 0
    log.close()
    reopened = Log.open(tmp_path / "t-0", log.config, now=clock)  # a full recovery scan over the gaps
    assert reopened.log_end_offset == 5 and read_all(reopened) == data
    assert reopened.read(0, 100).next_offset == 3


def test_readers_keep_the_old_segment_until_the_swap_and_after(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock, file_delete_delay_ms=60_000)
    _write_updates(log, clock, rounds=8)
    old_first = log.segments()[0]
    old_bytes = old_first.read(0, 1 << 20, None, old_first.size)
    cleaner.clean(log, clock.ms)
    assert log.segments()[0] is not old_first
    assert old_first.read(0, 1 << 20, None, old_first.size) == old_bytes  # the open descriptor still reads
    assert list((tmp_path / "t-0").glob("*.deleted"))


def test_truncation_during_a_pass_aborts_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock)
    _write_updates(log, clock, rounds=8)
    real = cleaner.build_offset_map

    def truncating(*args, **kwargs):  # type: ignore[no-untyped-def]
        result = real(*args, **kwargs)
        log.truncate_to(log.log_end_offset - 1)  # a leader change lands mid-pass
        return result

    monkeypatch.setattr(cleaner, "build_offset_map", truncating)
    before = values_by_offset(log)
    stats = cleaner.clean(log, clock.ms)
    assert stats is not None and stats.aborted
    assert values_by_offset(log) == {o: v for o, v in before.items() if o < log.log_end_offset}
    assert not list((tmp_path / "t-0").glob("*.swap")) and not list((tmp_path / "t-0").glob("*.cleaned"))


def test_compact_and_delete_together(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock, cleanup_policy="compact,delete", retention_ms=1_000)
    _write_updates(log, clock, rounds=8)
    assert cleaner.clean(log, clock.ms) is not None
    clock.advance(5_000)
    assert log.delete_old_segments() > 0
    assert log.log_start_offset == log.log_end_offset


def test_concurrent_readers_only_ever_see_whole_valid_batches(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _log(tmp_path / "t-0", clock, file_delete_delay_ms=60_000, min_cleanable_dirty_ratio="0.01")
    _write_updates(log, clock, rounds=6)
    stop = threading.Event()
    problems: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            offset, last = log.log_start_offset, -1
            while offset < log.log_end_offset:
                got = log.read(offset, 700)
                try:
                    headers = r.validate_batches(got.data, allow_empty=True)  # whole batches, CRCs intact
                except Exception as exc:
                    problems.append(repr(exc))
                    return
                for h in headers:
                    if h.base_offset <= last:
                        problems.append(f"offset {h.base_offset} after {last}")
                    last = h.last_offset
                offset = got.next_offset

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(15):
            _write_updates(log, clock, rounds=2)
            cleaner.clean(log, clock.ms)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not problems
    assert len(values_by_offset(log)) < 15 * 2 * 5
