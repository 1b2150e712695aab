"""LeaderEpochCache: KIP-101/279 answers, truncation from both ends, its checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log import LeaderEpochCache

from .helpers import batch, open_log


@pytest.fixture
def cache(tmp_path: Path) -> LeaderEpochCache:
    c = LeaderEpochCache.load(tmp_path)
    for epoch, start in [(1, 0), (2, 10), (4, 25)]:
        c.assign(epoch, start)
    return c


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, (-1, -1)),  # undefined epoch
        (4, (4, 40)),  # the latest epoch ends at the log end
        (2, (2, 25)),  # ends where the next epoch starts
        (1, (1, 10)),
        (3, (2, 25)),  # never led here: the largest epoch below it, ending where epoch 4 starts
        (0, (0, 0)),  # below every entry: the requested epoch, ending at the first start offset
        (5, (-1, -1)),  # above every entry
    ],
)
def test_end_offset_for(cache: LeaderEpochCache, requested: int, expected: tuple[int, int]) -> None:
    assert cache.end_offset_for(requested, log_end_offset=40) == expected


def test_empty_cache_answers_undefined(tmp_path: Path) -> None:
    assert LeaderEpochCache.load(tmp_path).end_offset_for(3, 10) == (-1, -1)


def test_assign_is_idempotent_and_evicts_contradicting_entries(cache: LeaderEpochCache) -> None:
    assert not cache.assign(4, 30)
    assert cache.assign(3, 20)  # an older leader's history wins after truncation: entries >= it go
    assert cache.entries() == [(1, 0), (2, 10), (3, 20)]
    assert cache.assign(5, 20)  # same start offset as the last entry: that entry goes
    assert cache.entries() == [(1, 0), (2, 10), (5, 20)]


def test_truncate_from_end_and_start(cache: LeaderEpochCache) -> None:
    cache.truncate_from_end(25)
    assert cache.entries() == [(1, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries() == [(2, 12)]
    cache.truncate_from_start(5)
    assert cache.entries() == [(2, 12)]
    assert cache.epoch_for_offset(11) == -1 and cache.epoch_for_offset(100) == 2


def test_checkpoint_file_format_and_reload(cache: LeaderEpochCache, tmp_path: Path) -> None:
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n2 10\n4 25\n"
    assert LeaderEpochCache.load(tmp_path).entries() == [(1, 0), (2, 10), (4, 25)]
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\nnot numbers\n")
    assert LeaderEpochCache.load(tmp_path).entries() == []


def test_log_keeps_the_cache_in_step(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", {"segment.bytes": len(batch(5)) * 2})
    for epoch in (1, 1, 3, 3, 7):
        log.append(batch(5), leader_epoch=epoch)
    assert log.epoch_cache.entries() == [(1, 0), (3, 10), (7, 20)]
    assert log.epoch_cache.end_offset_for(3, log.log_end_offset) == (3, 20)
    log.truncate_to(15)
    assert log.epoch_cache.entries() == [(1, 0), (3, 10)]
    log.high_watermark = 15
    log.delete_records_before(12)
    assert log.epoch_cache.entries() == [(3, 12)]
    # a crash after the checkpoint was lost: recovery refills the cache from the batches' epochs
    log.close_handlers()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink()
    reopened = open_log(tmp_path / "t-0", log_start_offset=12)
    assert reopened.epoch_cache.entries() == [(3, 12)]
