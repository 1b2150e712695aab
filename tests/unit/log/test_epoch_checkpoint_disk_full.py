"""A leader-epoch checkpoint that cannot be written (a full disk) fails an append before any record is written.

verify's 30-minute run: a follower on a full disk wrote a fetched chunk (an aborted transaction's batch and its
ABORT marker), then failed writing the checkpoint of the chunk's new epoch. The error skipped the producer state's
update, the next fetch went on from the new log end, and that replica, once leader, served the aborted record to
read_committed readers (G1a). Now the epoch goes to disk first, and a failed rewrite is retried before the next
records, so the log, its producer state and its epoch file move together or not at all."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from broker.log import epoch_cache as epoch_cache_module
from broker.log.log import Log
from broker.replication.producer_state import ProducerStateManager, follower_append
from odradek.protocol.records import encode_batch
from odradek.protocol.records.control import encode_marker


def _at(data: bytes | bytearray, base_offset: int, leader_epoch: int) -> bytes:
    out = bytearray(data)
    out[0:8] = base_offset.to_bytes(8, "big")
    out[12:16] = leader_epoch.to_bytes(4, "big")
    return bytes(out)


def _aborted_transaction(base_offset: int, leader_epoch: int) -> bytes:
    """Producer 7's transactional batch at ``base_offset`` and its ABORT marker after it, as a leader of
    ``leader_epoch`` wrote them."""
    record = encode_batch([(None, b"aborted", 1, ())], producer_id=7, producer_epoch=0, base_sequence=0,
                          is_transactional=True)
    marker = encode_marker(7, 0, False, 1, 1)
    return _at(record, base_offset, leader_epoch) + _at(marker, base_offset + 1, leader_epoch)


class Disk:
    """The epoch checkpoint's disk: ``full`` makes every checkpoint write fail with ENOSPC; ``writes`` counts
    the attempts."""

    def __init__(self) -> None:
        self.full = False
        self.writes = 0


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    real_write = epoch_cache_module.write_lines
    state = Disk()

    def write_lines(path: Any, lines: Any) -> None:
        state.writes += 1
        if state.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, lines)

    monkeypatch.setattr(epoch_cache_module, "write_lines", write_lines)
    return state


def test_a_checkpoint_write_that_fails_writes_no_record_and_the_retry_writes_both(tmp_path: Path, disk: Disk) -> None:
    log = Log.open(tmp_path / "t-0")
    state = ProducerStateManager(log.dir)
    follower_append(log, _at(encode_batch([(None, b"first", 1, ())]), 0, 1), state)
    disk.full = True
    chunk = _aborted_transaction(1, 2)
    with pytest.raises(OSError):
        follower_append(log, chunk, state)
    assert log.log_end_offset == 1 and state.aborted == []  # nothing written, nothing learnt

    disk.full = False  # space again: the fetcher's retry of the same chunk
    follower_append(log, chunk, state)
    assert log.log_end_offset == 3
    assert state.aborted == [(7, 1, 2)] and state.aborted_between(0, 3) == [(7, 1, 2)]
    assert (log.dir / "leader-epoch-checkpoint").read_text().split("\n")[2:4] == ["1 0", "2 1"]
    log.close()


def test_a_failed_rewrite_is_retried_before_the_next_records(tmp_path: Path, disk: Disk) -> None:
    """The epoch reached the list but not the file; the next append of that epoch (no change to the list) must
    still write the file before its records."""
    log = Log.open(tmp_path / "t-0")
    batch = encode_batch([(None, b"v", 1, ())])
    disk.full = True
    with pytest.raises(OSError):
        log.append(batch, leader_epoch=5)
    assert log.log_end_offset == 0 and log.epoch_cache.latest_epoch == 5  # in the list only
    disk.full = False
    log.append(batch, leader_epoch=5)
    assert log.log_end_offset == 1 and disk.writes == 2
    assert (log.dir / "leader-epoch-checkpoint").read_text().split("\n")[2:3] == ["5 0"]
    log.close()


def test_a_leadership_begins_on_a_full_disk_and_writes_its_epoch_before_its_first_record(
        tmp_path: Path, disk: Disk) -> None:
    """verify's run: becoming leader failed on the checkpoint and left the partition a leader without an epoch
    start, so no follower could rejoin its ISR. Now the leadership begins; its first append writes the file."""
    import asyncio

    from broker.replication.partition import LEADER
    from tests.unit.replication.fakes import config, info, make_partition

    part, _, _ = make_partition(tmp_path, broker_id=1)
    disk.full = True

    async def main() -> None:
        await part.apply(info(1, 3, (1,)), config())
        assert part.role == LEADER and part.epoch_start_offset == 0
        with pytest.raises(OSError):
            await part.append(bytearray(encode_batch([(None, b"v", 1, ())])), acks=1, timeout_ms=1000)
        assert part.log_end_offset == 0
        disk.full = False
        await part.append(bytearray(encode_batch([(None, b"v", 1, ())])), acks=1, timeout_ms=1000)
        assert part.log_end_offset == 1
        assert (part.log.dir / "leader-epoch-checkpoint").read_text().split("\n")[2:3] == ["3 0"]

    asyncio.run(main())
