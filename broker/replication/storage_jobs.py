"""The partition's disk work, as plain functions run on the storage executor (``Partition._run``): reads, follower
truncations, producer-state snapshots, the leader-epoch assignment.

Kept apart from ``partition.py`` (the replication state machine, which only decides *when* they run) so that
module stays within a screenful of concepts. Each runs on a storage thread, never on the event loop, except
``slices`` and ``read`` for a follower that was caught up at its previous look, or whose fetch was woken by an
append (bytes just written, in the page cache: a copy, not a wait on the disk).
"""

from __future__ import annotations

import logging

from broker.log.log import Log, ReadResult
from broker.log.reads import SENDFILE_MIN_BYTES, SliceResult
from broker.replication.producer_state import IdempotencyKeys, ProducerStateManager

logger = logging.getLogger(__name__)

__all__ = ["assign_epoch", "read", "slices", "snapshot_state", "truncate_diverged", "truncate_fully",
           "truncate_to", "truncation_target"]


def snapshot_state(state: ProducerStateManager, expire: bool) -> None:
    if expire:
        state.expire()
    state.write_snapshot()


def truncate_to(log: Log, offset: int, state: ProducerStateManager | None) -> int:
    end = log.truncate_to(offset)
    if state is not None:
        state.truncate(log)
    return end


def truncation_target(log: Log, leader_epoch: int, leader_end: int) -> int:
    """Where a follower's log diverges from its leader's (KIP-101, KIP-279), given the leader's answer for the
    follower's latest epoch: its largest epoch at most that one (``leader_epoch``; -1: it has none, so the
    high watermark is all that is known to be shared) and where that epoch ended in its log."""
    leo = log.log_end_offset
    if leader_epoch < 0:
        return min(log.high_watermark, leo)
    if leader_epoch == log.epoch_cache.latest_epoch:
        return min(leader_end, leo)
    _, own_end = log.epoch_cache.end_offset_for(leader_epoch, leo)
    return min(leader_end, own_end if own_end >= 0 else leo)


def truncate_diverged(log: Log, leader_epoch: int, leader_end: int,
                      state: ProducerStateManager | None) -> tuple[int, int]:
    """Cut the divergent tail, judged from the log as this job finds it (after every append queued before it,
    a late fetch's included); (the offset cut to, the log end before)."""
    leo = log.log_end_offset
    target = truncation_target(log, leader_epoch, leader_end)
    if target < leo:
        truncate_to(log, target, state)
    return target, leo


def truncate_fully(log: Log, offset: int, state: ProducerStateManager | None) -> None:
    log.truncate_fully_and_start_at(offset)
    if state is not None:
        state.reset(offset)


def read(log: Log, offset: int, max_bytes: int, max_offset: int | None) -> ReadResult:
    return log.read(offset, max_bytes, max_offset=max_offset)


def slices(log: Log, offset: int, max_bytes: int, max_offset: int | None) -> SliceResult | ReadResult:
    return log.read_slices(offset, max_bytes, max_offset=max_offset, copy_below=SENDFILE_MIN_BYTES)


def read_here(log: Log, offset: int, max_bytes: int, max_offset: int | None,
              zero_copy: bool) -> ReadResult | SliceResult | None:
    """``read`` (``slices`` when ``zero_copy``) if it needs no wait (``Log.read_cached``); else None, for the
    caller to run the job on a storage thread."""
    if zero_copy:
        return log.read_slices_cached(offset, max_bytes, max_offset=max_offset, copy_below=SENDFILE_MIN_BYTES)
    return log.read_cached(offset, max_bytes, max_offset=max_offset)


def release(result: SliceResult | ReadResult) -> None:
    """A zero-copy read nobody will send (its fetch was cancelled): its duplicated descriptors are closed."""
    if isinstance(result, SliceResult):
        result.close()


def assign_epoch(log: Log, epoch: int, keys: IdempotencyKeys) -> int:
    """A new leadership's epoch starts at the log end. If its checkpoint cannot be written (a full disk), the
    epoch is still the cache's, and the log writes the file before its next records (``flush_if_dirty``): the
    leadership goes on, its appends failing until the disk has room, instead of being left half-applied."""
    keys.clear()  # a new term: offsets a key was given before may have been truncated since
    leo = log.log_end_offset
    try:
        log.epoch_cache.assign(epoch, leo)
    except OSError as e:
        logger.warning("%s: leader epoch %d at offset %d not checkpointed yet: %s", log.dir, epoch, leo, e)
    return leo

