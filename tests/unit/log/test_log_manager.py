"""LogManager: directory layout, checkpoints, clean-shutdown marker, background work, deletion."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.log import LogManager
from broker.log.manager import CLEAN_SHUTDOWN_FILE, parse_log_dir_name
from odradek.protocol.errors import InvalidConfigError, KafkaStorageError

from .helpers import FakeClock, batch, keyed_batch, read_all, values_by_offset

DEFAULTS = {"segment.bytes": str(len(batch(4)) * 2), "file.delete.delay.ms": "0"}


def _manager(path: Path, clock: FakeClock | None = None, **kwargs: object) -> LogManager:
    mgr = LogManager(path, defaults=DEFAULTS, now=clock or FakeClock(), background=False, **kwargs)  # type: ignore[arg-type]
    mgr.startup()
    return mgr


def test_layout_checkpoints_and_clean_restart(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    log = mgr.get_or_create_log("orders.v1-x", 3)
    assert mgr.get_or_create_log("orders.v1-x", 3) is log
    for i in range(5):
        log.append(batch(4, tag=i), leader_epoch=0)
    log.high_watermark = 20
    log.delete_records_before(10)
    data = read_all(log)
    mgr.close()
    assert (tmp_path / "orders.v1-x-3").is_dir() and (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert (tmp_path / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders.v1-x 3 20\n"
    assert (tmp_path / "log-start-offset-checkpoint").read_text() == "0\n1\norders.v1-x 3 10\n"

    mgr = _manager(tmp_path)
    assert mgr.had_clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    reopened = mgr.get_log("orders.v1-x", 3)
    assert reopened is not None and (reopened.log_start_offset, reopened.log_end_offset) == (10, 20)
    assert read_all(reopened) == data and reopened.recovered_bytes_truncated == 0
    mgr.close()


def test_unclean_restart_recovers_after_the_recovery_point(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    log = mgr.get_or_create_log("t", 0)
    for i in range(5):
        log.append(batch(4, tag=i), leader_epoch=0)
    mgr.checkpoint()
    mgr.close_handlers()  # crash: no marker, no final checkpoint
    active = tmp_path / "t-0" / "00000000000000000016.log"
    with open(active, "ab") as f:
        f.write(b"\x00" * 100)
    mgr2 = _manager(tmp_path)
    assert not mgr2.had_clean_shutdown
    recovered = mgr2.get_log("t", 0)
    assert recovered is not None and recovered.log_end_offset == 20 and recovered.recovered_bytes_truncated == 100
    mgr2.close()


def test_directory_lock(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    with pytest.raises(KafkaStorageError, match="in use"):
        _manager(tmp_path)
    mgr.close()


def test_retention_flush_and_cleaner_passes(tmp_path: Path) -> None:
    clock = FakeClock()
    mgr = _manager(tmp_path, clock, retention_check_interval_ms=1000, flush_check_interval_ms=100)
    kept = mgr.get_or_create_log("a", 0, {"retention.ms": "1000", "flush.ms": "500"})
    compacted = mgr.get_or_create_log("c", 0, {"cleanup.policy": "compact"})
    for i in range(6):
        kept.append(batch(4, tag=i, ts=clock.ms), leader_epoch=0)
        compacted.append(keyed_batch([(b"k", b"%d" % i), (b"j", b"%d" % i)]), leader_epoch=0)
        compacted.roll()
    clock.advance(500)
    mgr.run_maintenance()
    assert kept.recovery_point == 24  # flush.ms
    clock.advance(1000)
    mgr.run_maintenance()
    assert kept.log_start_offset == 24  # retention.ms
    assert mgr.run_cleaner() is compacted
    assert values_by_offset(compacted) == {10: (b"k", b"5"), 11: (b"j", b"5")}
    assert mgr.run_cleaner() is None
    mgr.checkpoint()
    assert (tmp_path / "cleaner-offset-checkpoint").read_text() == "0\n1\nc 0 12\n"
    mgr.close()


def test_background_threads_do_the_work(tmp_path: Path) -> None:
    clock = FakeClock()
    mgr = LogManager(
        tmp_path,
        defaults=DEFAULTS,
        now=clock,
        retention_check_interval_ms=1,
        flush_check_interval_ms=10,
        cleaner_backoff_ms=10,
    )
    mgr.startup()
    try:
        log = mgr.get_or_create_log("a", 0, {"retention.ms": "1000"})
        for i in range(6):
            log.append(batch(4, tag=i, ts=clock.ms), leader_epoch=0)
        clock.advance(10_000)
        deadline = time.monotonic() + 30
        while log.log_start_offset < 24 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert log.log_start_offset == 24
        assert log.recovery_point >= 16  # the roll flushes went through the maintenance thread
    finally:
        mgr.close()


def test_delete_log_and_topic_configs(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    log = mgr.get_or_create_log("gone", 0)
    log.append(batch(2), leader_epoch=0)
    assert mgr.delete_log("gone", 0) and not mgr.delete_log("gone", 0)
    assert mgr.get_log("gone", 0) is None
    assert not any(p.name.startswith("gone-0") for p in tmp_path.iterdir())
    with pytest.raises(KafkaStorageError):
        log.append(batch(1), leader_epoch=0)
    with pytest.raises(InvalidConfigError):
        mgr.get_or_create_log("bad", 0, {"segment.bytes": "tiny"})
    other = mgr.get_or_create_log("cfg", 0)
    mgr.update_topic_config("cfg", {"retention.ms": "5"})
    assert other.config.retention_ms == 5
    mgr.close()


def test_topic_configs_at_startup_and_leftover_deletes(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    mgr.get_or_create_log("x", 1).append(batch(2), leader_epoch=0)
    mgr.close()
    (tmp_path / "x-2.0123abcd-delete").mkdir()
    mgr = LogManager(
        tmp_path,
        defaults=DEFAULTS,
        background=False,
        topic_configs=lambda topic: {"cleanup.policy": "compact"} if topic == "x" else None,
    )
    mgr.startup()
    assert not (tmp_path / "x-2.0123abcd-delete").exists()
    log = mgr.get_log("x", 1)
    assert log is not None and log.config.compact
    mgr.close()


def test_parse_log_dir_name() -> None:
    assert parse_log_dir_name("my-topic-12") == ("my-topic", 12)
    assert parse_log_dir_name("nodash") is None
    assert parse_log_dir_name("t-x") is None
