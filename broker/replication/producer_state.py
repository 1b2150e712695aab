"""Idempotent-producer state of one partition replica (Kafka's ``ProducerStateManager``, KIP-98).

Why per partition and on every replica: sequence numbers are per producer id *and partition*, and the state
must survive a leader failover. Followers build it from the batches they copy (``apply``), so a new leader
already knows every producer's last batches; on open it is rebuilt from the newest ``<offset>.snapshot`` file
in the log directory plus the batches after that offset (``load``), and it is cut back on truncation.

What is kept, per producer id: its epoch, the metadata of its last ``NUM_BATCHES_TO_RETAIN`` (5) batches
(first and last sequence, first and last offset, timestamp) and its last timestamp. A leader append is
checked *per batch*, never per record (``check``):

* a batch equal (same sequences) to a remembered one of the same epoch is a **duplicate**: it is not written
  again, and its original offsets are the answer;
* an older epoch is ``INVALID_PRODUCER_EPOCH`` (a fenced zombie);
* a newer epoch must start at sequence 0, the same epoch at the last sequence + 1, otherwise
  ``OUT_OF_ORDER_SEQUENCE_NUMBER``; an unknown producer with a non-zero sequence is ``UNKNOWN_PRODUCER_ID``.

Producers idle for ``producer.id.expiration.ms`` (7 days by default) are forgotten (``expire``).

Transactions (KIP-98's second half) live here too, because they are per producer and partition and must be
known to every replica: ``ongoing`` maps a producer id to the first offset of its open transaction (its first
transactional batch since its last marker); a COMMIT or ABORT marker closes it, and an aborted one is kept in
``aborted`` as ``(producer id, first offset, marker offset)``, Kafka's ``.txnindex`` held in memory and in the
snapshots. The last stable offset is the least first offset of the open transactions (``first_unstable``).
Each producer also keeps the coordinator epoch of its last marker here. Those epochs are per transaction, so a
marker that repeats it (the same transaction's marker again) is skipped and an older one refused: a marker may
only end the transaction it was decided for, never the producer's next one (``check_marker``).

Concurrency: not thread-safe. Every call runs on the partition's queue of the storage executor (the same
queue as the log's appends and truncations), which is what makes check-then-append atomic.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import orjson
from crc32c import crc32c

from broker.log.log import AppendResult, Log
from odradek.protocol.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceNumberError,
    TransactionCoordinatorFencedError,
    UnknownProducerIdError,
)
from odradek.protocol.records import TRANSACTIONAL_MASK, BatchHeader, iter_batch_headers
from odradek.protocol.records.control import ABORT, read_marker

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5  # Kafka's; why a producer may have at most 5 requests in flight per partition
# Kafka's producer.id.expiration.ms (KIP-854): an idle producer is forgotten after a day.
DEFAULT_EXPIRATION_MS = 86_400_000
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2
REPLAY_CHUNK = 4 << 20
_CRC = struct.Struct(">I")
INT32_MAX = 2**31 - 1
# Markers written before coordinator epochs were per transaction carried the coordinating broker's epoch, capped
# to int32 (always this value): they say nothing about order, so they neither fence nor are fenced.
LEGACY_COORDINATOR_EPOCH = INT32_MAX


def next_sequence(seq: int, increment: int = 1) -> int:
    """Sequences wrap from Int.MaxValue to 0 (Kafka's ``incrementSequence``)."""
    return seq + increment if seq <= INT32_MAX - increment else increment - (INT32_MAX - seq) - 1


class BatchMeta(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_timestamp: int
    batches: deque[BatchMeta] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1  # of the last marker written for this producer here (-1: none known)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find(self, first_seq: int, last_seq: int) -> BatchMeta | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


class Verdict(NamedTuple):
    """What ``check`` decided for a request: its leading duplicates, and the batches from ``new_from`` on to
    append (``new_from == len(headers)``: everything was a duplicate)."""

    duplicates: tuple[BatchMeta, ...]
    new_from: int


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files in ``directory``, oldest first."""
    out = []
    for p in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        stem = p.name[: -len(SNAPSHOT_SUFFIX)]
        if len(stem) == 20 and stem.isdigit():
            out.append(int(stem))
    return sorted(out)


class ProducerStateManager:
    def __init__(self, directory: Path | None = None, expiration_ms: int = DEFAULT_EXPIRATION_MS,
                 now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.directory = directory
        self.expiration_ms = expiration_ms
        self._now_ms = now_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.map_end_offset = 0  # every batch below this offset is reflected in ``producers``
        self.snapshot_offset = -1  # offset of the newest snapshot written or loaded
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.aborted: list[tuple[int, int, int]] = []  # (producer id, first offset, marker offset), marker order
        # Verification guards (Kafka's VerificationGuard, KIP-890): producer id -> the token a produce took before
        # asking the coordinator whether its transaction includes this partition. A marker for the producer
        # drops it, so a batch verified before that marker cannot open a transaction after it.
        self.guards: dict[int, object] = {}

    # ----------------------------------------------------------------------------------------- transactions

    def first_unstable(self) -> int | None:
        """The first offset of the earliest open transaction (the LSO when below the high watermark)."""
        return min(self.ongoing.values()) if self.ongoing else None

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int, int]]:
        """Aborted transactions with data in ``[start, end)``: those whose marker is at or after ``start``
        and whose first offset is before ``end`` (a read filters their producers' batches in that range)."""
        out = []
        for entry in reversed(self.aborted):  # newest markers last: scan back until they end before start
            if entry[2] < start:
                break
            if entry[1] < end:
                out.append(entry)
        return out

    def end_transaction(self, producer_id: int, epoch: int, kind: int, offset: int, timestamp: int,
                        coordinator_epoch: int = -1) -> None:
        """A marker at ``offset``: the producer's open transaction ends; the marker's epoch becomes its epoch
        (a fencing abort carries a bumped epoch: the zombie's next batch is refused), and its coordinator
        epoch the one the next marker must pass (``check_marker``)."""
        first = self.ongoing.pop(producer_id, None)
        self.guards.pop(producer_id, None)
        if kind == ABORT and first is not None:
            self.aborted.append((producer_id, first, offset))
        entry = self.producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self.producers[producer_id] = ProducerEntry(
                epoch, timestamp, coordinator_epoch=entry.coordinator_epoch if entry is not None else -1)
        elif timestamp > entry.last_timestamp:
            entry.last_timestamp = timestamp
        if 0 <= coordinator_epoch < LEGACY_COORDINATOR_EPOCH:
            entry.coordinator_epoch = coordinator_epoch

    def verification_guard(self, producer_id: int) -> object:
        """The producer's guard, taken before a produce asks the coordinator (shared by concurrent produces of
        that producer). Called from the event loop: one dict operation, atomic under the GIL."""
        return self.guards.setdefault(producer_id, object())

    def check_guards(self, headers: Sequence[BatchHeader], guards: dict[int, object]) -> None:
        """Before appending ``headers``: a transactional batch whose producer has no transaction open here may
        open one only with the guard its produce verified under, still in place (no marker since)."""
        opened: set[int] = set()
        for h in headers:
            pid = h.producer_id
            if pid < 0 or h.is_control or not h.attributes & TRANSACTIONAL_MASK or pid in self.ongoing \
                    or pid in opened:
                continue
            guard = guards.get(pid)
            if guard is None or self.guards.get(pid) is not guard:
                raise InvalidTxnStateError(
                    f"producer {pid} has no transaction open on this partition, and none was verified since its "
                    "last marker (a batch of a transaction that has ended): not written")
            opened.add(pid)

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int = -1) -> bool:
        """Whether a marker must be written. A marker from an older producer epoch than the producer's comes
        from a deposed coordinator: INVALID_PRODUCER_EPOCH. Coordinator epochs are per transaction (one more at
        each decision): below the last marker's, TRANSACTION_COORDINATOR_FENCED; equal to it, this transaction's
        marker was written here already (a retry, or a deposed coordinator still writing), and writing it again
        would end the producer's *next* transaction here, so it is skipped (False)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return True
        if epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"a marker for producer {producer_id} epoch {epoch}; its epoch is {entry.epoch}: fenced")
        if coordinator_epoch < 0 or coordinator_epoch >= LEGACY_COORDINATOR_EPOCH or entry.coordinator_epoch < 0:
            return True
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"a marker for producer {producer_id} with coordinator epoch {coordinator_epoch}; this partition "
                f"wrote one with {entry.coordinator_epoch} already: a later transaction's")
        return coordinator_epoch > entry.coordinator_epoch

    # --------------------------------------------------------------------------------------- leader check

    def check(self, headers: Sequence[BatchHeader]) -> Verdict:
        """Decide a leader append of ``headers`` (in request order) without changing any state.

        Leading batches that repeat remembered ones are duplicates; the rest must continue each producer's
        sequence. A duplicate after a new batch cannot come from an in-order producer and is refused.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) after earlier new batches
        duplicates: list[BatchMeta] = []
        new_from: int | None = None
        for i, h in enumerate(headers):
            pid = h.producer_id
            if pid < 0 or h.is_control:
                new_from = i if new_from is None else new_from
                continue
            first = h.base_sequence
            if first < 0:
                raise InvalidRecordError(f"a batch of producer {pid} has no base sequence")
            last = next_sequence(first, h.last_offset_delta)
            entry = self.producers.get(pid)
            epoch = h.producer_epoch
            if pid in pending:
                cur_epoch, cur_last = pending[pid]
            elif entry is not None:
                cur_epoch, cur_last = entry.epoch, entry.last_seq
                if epoch == entry.epoch:
                    dup = entry.find(first, last)
                    if dup is not None:
                        if new_from is not None:
                            raise OutOfOrderSequenceNumberError(
                                f"producer {pid}: batch {first}..{last} repeats a written batch after a new one")
                        duplicates.append(dup)
                        continue
            else:
                cur_epoch, cur_last = None, -1
            if cur_epoch is not None and epoch < cur_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than its current epoch {cur_epoch}: fenced")
            if cur_epoch is None or epoch > cur_epoch:
                if first != 0:
                    if cur_epoch is None:
                        raise UnknownProducerIdError(
                            f"no state for producer {pid} (expired or never written); its batch starts at "
                            f"sequence {first}")
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid}: a new epoch {epoch} must start at sequence 0, not {first}")
            elif first != next_sequence(cur_last):
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} epoch {epoch}: expected sequence {next_sequence(cur_last)}, got {first}")
            pending[pid] = (epoch, last)
            new_from = i if new_from is None else new_from
        return Verdict(tuple(duplicates), len(headers) if new_from is None else new_from)

    # ------------------------------------------------------------------------------------------- updates

    def _update(self, h: BatchHeader, first_offset: int) -> None:
        pid = h.producer_id
        ts = h.max_timestamp
        entry = self.producers.get(pid)
        if entry is None or entry.epoch != h.producer_epoch:
            entry = self.producers[pid] = ProducerEntry(
                h.producer_epoch, ts, coordinator_epoch=entry.coordinator_epoch if entry is not None else -1)
        last_offset = first_offset + h.last_offset_delta
        entry.batches.append(BatchMeta(h.base_sequence, next_sequence(h.base_sequence, h.last_offset_delta),
                                       first_offset, last_offset, ts))
        if ts > entry.last_timestamp:
            entry.last_timestamp = ts
        if h.attributes & TRANSACTIONAL_MASK and pid not in self.ongoing:
            self.ongoing[pid] = first_offset
            self.guards.pop(pid, None)  # used: the transaction is open here now

    def record_leader_append(self, headers: Sequence[BatchHeader], first_offset: int) -> None:
        """After a leader append: ``headers`` (request order, their offsets not yet stamped) start at
        ``first_offset``."""
        offset = first_offset
        for h in headers:
            if h.producer_id >= 0 and not h.is_control:
                self._update(h, offset)
            offset += h.last_offset_delta + 1
        self.map_end_offset = max(self.map_end_offset, offset)

    def apply(self, data: bytes | bytearray | memoryview, min_offset: int = 0) -> None:
        """Batches as stored (offsets stamped): a follower's copy, or a replay of the log. Batches ending
        before ``min_offset`` are skipped (a read may begin with one)."""
        for pos, h in iter_batch_headers(data):
            nxt = h.base_offset + h.last_offset_delta + 1
            if nxt <= min_offset or nxt <= self.map_end_offset:
                continue
            if h.producer_id >= 0 and not h.is_control:
                self._update(h, h.base_offset)
            elif h.producer_id >= 0:
                kind, coordinator_epoch = read_marker(data, pos)
                self.end_transaction(h.producer_id, h.producer_epoch, kind, h.base_offset, h.max_timestamp,
                                     coordinator_epoch)
            self.map_end_offset = nxt

    def expire(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``expiration_ms``; returns how many."""
        now = self._now_ms() if now_ms is None else now_ms
        gone = [pid for pid, e in self.producers.items()
                if now - e.last_timestamp >= self.expiration_ms and pid not in self.ongoing]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # ------------------------------------------------------------------------------ snapshots and rebuild

    def encode(self) -> bytes:
        producers = [[pid, e.epoch, e.last_timestamp, [list(b) for b in e.batches], e.coordinator_epoch]
                     for pid, e in self.producers.items()]
        body = orjson.dumps({"version": 3, "offset": self.map_end_offset, "producers": producers,
                             "ongoing": [[p, o] for p, o in self.ongoing.items()],
                             "aborted": [list(a) for a in self.aborted]})
        return _CRC.pack(crc32c(body)) + body

    def decode_into(self, data: bytes) -> int:
        """Replace the state by an encoded snapshot; returns its offset. ValueError if damaged."""
        if len(data) < _CRC.size or _CRC.unpack_from(data)[0] != crc32c(data[_CRC.size:]):
            raise ValueError("snapshot checksum mismatch")
        obj = orjson.loads(data[_CRC.size:])
        producers: dict[int, ProducerEntry] = {}
        for pid, epoch, last_ts, batches, *rest in obj["producers"]:  # rest: the coordinator epoch (since v3)
            entry = ProducerEntry(int(epoch), int(last_ts), coordinator_epoch=int(rest[0]) if rest else -1)
            entry.batches.extend(BatchMeta(*map(int, b)) for b in batches)
            producers[int(pid)] = entry
        self.producers = producers
        self.ongoing = {int(p): int(o) for p, o in obj.get("ongoing", ())}
        self.aborted = [(int(p), int(f), int(m)) for p, f, m in obj.get("aborted", ())]
        self.map_end_offset = int(obj["offset"])
        return self.map_end_offset

    def write_snapshot(self) -> int | None:
        """Write ``<map end offset>.snapshot`` (atomically: temp file, fsync, rename) and keep the newest
        two; returns the offset, or None when nothing changed since the last one."""
        if self.directory is None or self.map_end_offset == self.snapshot_offset:
            return None
        offset = self.map_end_offset
        path = snapshot_path(self.directory, offset)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, self.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        self.snapshot_offset = offset
        for old in list_snapshots(self.directory)[:-SNAPSHOTS_KEPT]:
            with contextlib.suppress(OSError):
                snapshot_path(self.directory, old).unlink()
        return offset

    def delete_snapshots_after(self, offset: int) -> None:
        if self.directory is None:
            return
        for s in list_snapshots(self.directory):
            if s > offset:
                with contextlib.suppress(OSError):
                    snapshot_path(self.directory, s).unlink()
        if self.snapshot_offset > offset:
            self.snapshot_offset = -1

    def load(self, log_: Log) -> None:
        """Rebuild from the newest readable snapshot not beyond the log end, then replay the log after it."""
        end = log_.log_end_offset
        self.producers = {}
        self.ongoing = {}
        self.aborted = []
        self.guards = {}
        self.map_end_offset = log_.log_start_offset
        self.delete_snapshots_after(end)
        if self.directory is not None:
            for offset in reversed(list_snapshots(self.directory)):
                try:
                    self.decode_into(snapshot_path(self.directory, offset).read_bytes())
                    self.snapshot_offset = offset
                    break
                except (OSError, ValueError, KeyError, TypeError) as e:
                    log.warning("%s: producer-state snapshot %d unreadable (%s); trying an older one",
                                self.directory, offset, e)
                    self.producers = {}
                    self.ongoing = {}
                    self.aborted = []
                    self.map_end_offset = log_.log_start_offset
        self.map_end_offset = max(self.map_end_offset, log_.log_start_offset)
        self.replay(log_, end)
        self.expire()

    def replay(self, log_: Log, end: int) -> None:
        """Apply the log's batches from the map end offset up to ``end`` (headers only, in large reads)."""
        offset = self.map_end_offset
        while offset < end:
            result = log_.read(offset, REPLAY_CHUNK, max_offset=end)
            if not result.data or result.next_offset <= offset:
                break
            self.apply(result.data, min_offset=offset)
            offset = result.next_offset
        self.map_end_offset = max(self.map_end_offset, min(offset, end))

    def truncate(self, log_: Log) -> None:
        """After the log was cut back: drop what is beyond its end, rebuilding if anything was."""
        if self.map_end_offset > log_.log_end_offset:
            self.load(log_)

    def reset(self, offset: int) -> None:
        """The log restarts empty at ``offset``: every snapshot and all state go."""
        self.delete_snapshots_after(-1)
        self.producers = {}
        self.ongoing = {}
        self.aborted = []
        self.guards = {}
        self.map_end_offset = offset


class IdempotencyKeys:
    """The REST path's idempotency keys of one partition: key -> the offsets its first request was given.

    Bounded (``max_keys``, oldest out first) and short-lived (``ttl_ms``), in the leader's memory only: a
    retry is recognised on the same leader within the TTL, not after a failover (docs/transactions.md).
    """

    def __init__(self, max_keys: int = 10_000, ttl_ms: int = 600_000) -> None:
        self.max_keys = max_keys
        self.ttl_ms = ttl_ms
        self._keys: OrderedDict[str, tuple[int, int, int, int]] = OrderedDict()  # first, last, count, expiry

    def get(self, key: str, now_ms: int) -> tuple[int, int, int] | None:
        hit = self._keys.get(key)
        if hit is None:
            return None
        if hit[3] <= now_ms:
            del self._keys[key]
            return None
        return hit[0], hit[1], hit[2]

    def put(self, key: str, first: int, last: int, count: int, now_ms: int) -> None:
        self._keys[key] = (first, last, count, now_ms + self.ttl_ms)
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)

    def clear(self) -> None:
        self._keys.clear()


class DuplicateAppend(AppendResult):
    """An append answered (wholly or partly) from producer state. ``batch_offsets`` holds each batch's first
    offset, in request order, when they are not contiguous (a duplicate prefix followed by new batches)."""

    batch_offsets: tuple[int, ...] | None = None


def leader_append(log_: Log, batches: bytes | bytearray, epoch: int, state: ProducerStateManager | None,
                  keys: IdempotencyKeys | None, key: str | None,
                  txn_guards: dict[int, object] | None = None, page_cache_only: bool = False) -> AppendResult | None:
    """A leader append with the idempotence checks, run on the partition's storage queue (so atomic), or on the
    loop while that queue is idle (``page_cache_only``: None, with nothing changed, if the log's append would wait
    on more than a page-cache write). ``txn_guards`` (a produce that verified its transactional batches): see
    ``check_guards``."""
    # Idempotency keys live only in this leader's memory, so their TTL runs on the monotonic clock: a wall-clock
    # step (NTP) must neither forget them early (a retried REST produce would be written twice) nor keep them past
    # their TTL.
    now = time.monotonic_ns() // 1_000_000
    if key is not None and keys is not None:
        hit = keys.get(key, now)
        if hit is not None:
            return DuplicateAppend(hit[0], hit[1], hit[2], -1, None, log_.log_start_offset)
    headers = [h for _, h in iter_batch_headers(batches)]
    if state is None or not any(h.producer_id >= 0 for h in headers):
        plain = log_.append(batches, leader_epoch=epoch, page_cache_only=page_cache_only)
        if plain is None:
            return None
        result = plain
        if state is not None:
            state.map_end_offset = max(state.map_end_offset, result.last_offset + 1)
    else:
        checked = _checked_append(log_, batches, epoch, state, headers, txn_guards, page_cache_only)
        if checked is None:
            return None
        result = checked
    if key is not None and keys is not None:
        keys.put(key, result.first_offset, result.last_offset, result.record_count, now)
    return result


def _checked_append(log_: Log, batches: bytes | bytearray, epoch: int, state: ProducerStateManager,
                    headers: list[BatchHeader], txn_guards: dict[int, object] | None = None,
                    page_cache_only: bool = False) -> AppendResult | None:
    verdict = state.check(headers)
    dups, new_from = verdict
    if txn_guards is not None and new_from < len(headers):
        state.check_guards(headers[new_from:], txn_guards)
    if new_from == 0:
        result = log_.append(batches, leader_epoch=epoch, page_cache_only=page_cache_only)
        if result is None:
            return None
        state.record_leader_append(headers, result.first_offset)
        return result
    count = sum(d.last_offset - d.first_offset + 1 for d in dups)
    starts = [d.first_offset for d in dups]
    if new_from == len(headers):
        out = DuplicateAppend(dups[0].first_offset, dups[-1].last_offset, count, -1, None, log_.log_start_offset)
    else:
        pos = sum(h.size for h in headers[:new_from])
        tail = headers[new_from:]
        appended = log_.append(memoryview(batches)[pos:], leader_epoch=epoch, page_cache_only=page_cache_only)
        if appended is None:
            return None
        state.record_leader_append(tail, appended.first_offset)
        offset = appended.first_offset
        for h in tail:
            starts.append(offset)
            offset += h.last_offset_delta + 1
        out = DuplicateAppend(dups[0].first_offset, appended.last_offset, count + appended.record_count,
                              appended.max_timestamp, appended.log_append_time, appended.log_start_offset)
    expected = dups[0].first_offset
    contiguous = True
    for s, h in zip(starts, headers, strict=True):
        contiguous = contiguous and s == expected
        expected = s + h.last_offset_delta + 1
    if not contiguous:
        out.batch_offsets = tuple(starts)
    return out


def follower_append(log_: Log, data: bytes, state: ProducerStateManager | None, *,
                    page_cache_only: bool = False) -> bool:
    """A follower's copy: append as the leader wrote it, then learn its producers' batches. With
    ``page_cache_only``, False (and nothing done) if the append would wait on more than a page-cache write
    (``Log.append_replicated_to_page_cache``)."""
    if page_cache_only:
        if log_.append_replicated_to_page_cache(data) is None:
            return False
    else:
        log_.append_replicated(data)
    if state is not None:
        state.apply(data)
    return True


def marker_append(log_: Log, batch: bytes, epoch: int, state: ProducerStateManager, producer_id: int,
                  producer_epoch: int, kind: int, coordinator_epoch: int = -1) -> AppendResult | None:
    """The leader appends a transaction marker (on the partition's storage queue, so atomic with the state);
    None when this transaction's marker is written here already (``check_marker``)."""
    if not state.check_marker(producer_id, producer_epoch, coordinator_epoch):
        return None
    result = log_.append(batch, leader_epoch=epoch)
    state.end_transaction(producer_id, producer_epoch, kind, result.first_offset, time.time_ns() // 1_000_000,
                          coordinator_epoch)
    state.map_end_offset = max(state.map_end_offset, result.last_offset + 1)
    return result
