"""Executor side of a read: fetch one offset range from its partition's leader and decode it into Arrow.

Why the decoder looks the way it does: a Python loop that builds one object per record costs a microsecond or
more per record, which on a two-core machine caps a read well below a million records a second. So the only
per-record Python left finds where each record starts (one lookup in a 64K table of "varint width + length"
per record), and even that is skipped for runs of equal-sized records, which are guessed and checked with numpy
(see :func:`_record_starts`). Every field after that is decoded for all the records of a fetch at once with
numpy (varints by masks and gathers), and keys and values become Arrow binary columns without a Python
``bytes`` per record: an Arrow array over the fetched buffer whose offsets alternate between "a value" and "the
bytes between two values" is filtered to its even elements, one C++ memcpy per value. Headers, rare in bulk
data, are decoded in Python only for the records that have them. About 0.1 µs a record for fixed-size records
and 0.2 µs for variable-size ones, against 1-2 µs for building record tuples.

Each fetch becomes one ``pyarrow.RecordBatch`` in exactly the schema Spark expects (see :func:`arrow_schema`),
so PySpark hands it to the JVM as is. While a batch is decoded the next fetch is already in flight on a
helper thread (sockets release the GIL).

Offsets: a range ``[from_offset, until_offset)`` is end-exclusive; records below ``from_offset`` in the first
fetched batch are dropped, and so are records at or beyond ``until_offset``. Failures: a leader that moved or
died is found again through fresh metadata and the read continues from the next unread offset, so a failover
changes neither which records are returned nor how many; only ``kafkaConsumer.pollTimeoutMs`` without progress
fails the task.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import crc32c
import pyarrow as pa

try:
    import numpy as np
except ModuleNotFoundError as exc:  # pragma: no cover - an environment problem, said plainly
    raise ModuleNotFoundError("odradek_spark's reader needs numpy (it comes with pyspark[sql]; pip install numpy) "
                              "in the Python that runs Spark's workers") from exc

from odradek.protocol.errors import (
    CorruptRecordError,
    LeaderNotAvailableError,
    OdradekError,
    OffsetOutOfRangeError,
    UnknownPartitionError,
    UnknownTopicError,
)
from odradek.protocol.records import (
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NONE,
    TIMESTAMP_TYPE_MASK,
    check_counts,
    decode_headers,
    decode_varint,
    decompress,
    iter_batch_headers,
)
from odradek_spark.cluster import Cluster, Fetched
from odradek_spark.options import SourceOptions
from odradek_spark.planning import DataLossError, OffsetRange

__all__ = ["ArrowDecoder", "arrow_schema", "read_range", "report_data_loss"]

log = logging.getLogger(__name__)

_COMPRESSION_MASK = 0x07
_CRC_START = 21  # the CRC covers attributes .. end of batch
_PAD = bytes(16)  # lets vectorised reads of up to 10 varint bytes run past the last record safely
_ARANGE10 = np.arange(10, dtype=np.int64)
_SHIFTS10 = (np.arange(10, dtype=np.uint64) * np.uint64(7)).astype(np.uint64)

HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the Kafka source schema, exactly as PySpark derives it from the Spark schema.

    PySpark compares the first batch's schema with this one and refuses a mismatch, so types, names and
    nullability must match to the letter (timestamps are microseconds in UTC).
    """
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


# ------------------------------------------------------------------------------------------------ decoding


def _build_advance_table() -> np.ndarray:
    # Index: first byte | second byte << 8 of a record's length varint. Entry: varint width + length, i.e. how
    # far the next record starts; 0 for "three bytes or more, or negative: take the exact path".
    idx = np.arange(65536, dtype=np.int64)
    b0, b1 = idx & 0xFF, idx >> 8
    one = b0 < 0x80
    two = ~one & (b1 < 0x80)
    z = np.where(one, b0, (b0 & 0x7F) | (b1 << 7))
    value = (z >> 1) ^ -(z & 1)
    return np.where((one | two) & (value >= 0), np.where(one, 1, 2) + value, 0)


_ADVANCE_NP = _build_advance_table()
_ADVANCE: list[int] = _ADVANCE_NP.tolist()  # a list: what the per-record loop indexes fastest


class _Stalled(Exception):
    """The fast paths met a length they do not handle (or a corrupt one): redo the block exactly."""


def _record_starts(buf: bytes, b: np.ndarray, blocks: list[tuple[int, int, int]], total: int) -> np.ndarray:
    """Start position of every record in the concatenated record blocks ``(begin, end, count)``.

    Finding record starts is inherently sequential (each record's length says where the next begins), so it is
    the one per-record loop of the read path, about 100 ns a record in Python. Producers often write runs of
    records of one size (fixed-size payloads; the varint widths of offset and timestamp deltas change only
    every 64 or 8192 records), so first a run is *guessed* (the next records all as long as this one) and
    checked at once with numpy; the records up to the first wrong guess are certain. Guesses start small and
    grow while they hold; where sizes vary the loop takes over and guesses again only after exponentially longer
    stretches, so variable-size data pays almost nothing for the attempt.
    """
    out = np.empty(total, dtype=np.int64)
    finder = _StartFinder(buf, b)
    i = 0
    for begin, end, count in blocks:
        try:
            finder.block(begin, end, count, out[i : i + count])
        except (_Stalled, IndexError):
            exact: list[int] = []
            _record_starts_exact(buf, begin, end, count, exact)
            out[i : i + count] = exact
        i += count
    return out


class _StartFinder:
    """Guess-then-walk state for one fetch: a backoff learnt on one batch carries over to the next."""

    MIN_GUESS = 64  # smaller batches are just walked: a guess costs a few microseconds of numpy calls

    def __init__(self, buf: bytes, b: np.ndarray) -> None:
        self.buf = buf
        self.b = b
        self.backoff = 0  # records to walk before the next guess, after guesses failed

    def block(self, begin: int, end: int, count: int, out: np.ndarray) -> None:
        buf, b = self.buf, self.b
        adv = _ADVANCE
        table = _ADVANCE_NP
        i, pos = 0, begin
        walk = count if count < self.MIN_GUESS else min(self.backoff, count)
        window = self.MIN_GUESS
        while i < count:
            if walk <= 0:
                step = adv[buf[pos] | buf[pos + 1] << 8]
                room = min(count - i, (end - pos) // step, window) if step else 0
                if room <= 0:
                    raise _Stalled
                guess = np.arange(pos, pos + step * room, step, dtype=np.int64)
                sizes = table[b[guess] | (b[guess + 1].astype(np.int64) << 8)]
                wrong = np.flatnonzero(sizes != step)
                run = int(wrong[0]) if len(wrong) else room  # >= 1: the first guess is the record itself
                out[i : i + run] = guess[:run]
                i += run
                pos += step * run
                if run == room:
                    window = min(window * 4, 1 << 16)
                    self.backoff = 0
                elif run < 16:
                    self.backoff = min(max(2 * self.backoff, 16), 1 << 16)
                    walk = self.backoff
                    window = self.MIN_GUESS
                continue
            n = min(walk, count - i)
            walked: list[int] = []
            add = walked.append
            for _ in range(n):
                add(pos)
                pos += adv[buf[pos] | buf[pos + 1] << 8]
            out[i : i + n] = walked
            i += n
            walk -= n
        if pos != end:
            raise _Stalled


def _record_starts_exact(buf: bytes, begin: int, end: int, count: int, out: list[int]) -> None:
    pos = begin
    for _ in range(count):
        if pos >= end:
            raise CorruptRecordError("records end before the batch's record count")
        out.append(pos)
        length, pos = decode_varint(buf, pos)
        if length < 0:
            raise CorruptRecordError(f"negative record length {length}")
        pos += length
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes follow the last of {count} records")


def _varints(b: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """Zig-zag varints at positions ``pos`` of ``b``: (values, widths). One- and two-byte ones are the norm."""
    b0 = b[pos]
    if not len(pos) or int(b0.max()) < 0x80:
        z = b0.astype(np.int64)
        return (z >> 1) ^ -(z & 1), 1
    b1 = b[pos + 1]
    wide = b0 >= 0x80
    if not (wide & (b1 >= 0x80)).any():
        z = np.where(wide, (b0 & 0x7F).astype(np.int64) | (b1.astype(np.int64) << 7), b0.astype(np.int64))
        return (z >> 1) ^ -(z & 1), 1 + wide.astype(np.int64)
    m = b[pos[:, None] + _ARANGE10]
    cont = m >= 0x80
    if cont.all(axis=1).any():
        raise CorruptRecordError("varint longer than 10 bytes")
    width = cont.argmin(axis=1) + 1
    parts = (m & 0x7F).astype(np.uint64) << _SHIFTS10
    zu = np.where(width[:, None] > _ARANGE10, parts, np.uint64(0)).sum(axis=1, dtype=np.uint64)
    return (zu >> np.uint64(1)).astype(np.int64) ^ -(zu & np.uint64(1)).astype(np.int64), width


class ArrowDecoder:
    """Turns fetch answers of one partition into RecordBatches of the source schema."""

    def __init__(self, topic: str, partition: int, include_headers: bool, *, verify_crc: bool = True) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.schema = arrow_schema(include_headers)
        self.verify_crc = verify_crc
        self._topic_scalar = pa.scalar(topic, pa.string())
        self._partition_scalar = pa.scalar(partition, pa.int32())

    def decode(self, body: bytes, start: int, until: int) -> tuple[pa.RecordBatch | None, int]:
        """Records with ``start <= offset < until`` from whole batches, and the offset after the last batch read.

        The returned offset is where the next fetch starts: past control batches and compaction gaps, and never
        below ``start``. Batches are CRC-checked, as Kafka consumers do by default.
        """
        view = memoryview(body)
        parts: list[bytes | memoryview] = []
        blocks: list[tuple[int, int, int]] = []
        bases: list[int] = []
        first_ts: list[int] = []
        append_time: list[int] = []  # -1, or the LogAppendTime every record of the batch takes
        counts: list[int] = []
        cursor = 0
        next_offset = start
        for pos, h in iter_batch_headers(body):
            if h.base_offset >= until:
                break
            nxt = h.base_offset + h.last_offset_delta + 1
            if nxt <= start:
                continue
            next_offset = max(next_offset, nxt)
            size = h.batch_length + LOG_OVERHEAD
            if h.magic != MAGIC:
                raise CorruptRecordError(f"batch at offset {h.base_offset} has magic {h.magic}")
            if self.verify_crc and crc32c.crc32c(view[pos + _CRC_START : pos + size]) != h.crc:
                raise CorruptRecordError(f"batch at offset {h.base_offset} of {self.topic}-{self.partition} "
                                         "failed its CRC")
            check_counts(h, pos)
            if h.attributes & CONTROL_MASK or not h.record_count:
                continue
            codec = h.attributes & _COMPRESSION_MASK
            raw = view[pos + HEADER_SIZE : pos + size]
            block = raw if codec == NONE else decompress(codec, raw)
            parts.append(block)
            blocks.append((cursor, cursor + len(block), h.record_count))
            cursor += len(block)
            bases.append(h.base_offset)
            first_ts.append(h.first_timestamp)
            append_time.append(h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else -1)
            counts.append(h.record_count)
        if not blocks:
            return None, next_offset
        parts.append(_PAD)
        buf = b"".join(parts)
        try:
            batch = self._columns(buf, cursor, blocks, bases, first_ts, append_time, counts, start, until)
        except IndexError:
            raise CorruptRecordError(f"a record of {self.topic}-{self.partition} runs past its batch") from None
        return batch, next_offset

    def _columns(self, buf: bytes, total: int, blocks: list[tuple[int, int, int]], bases: list[int],
                 first_ts: list[int], append_time: list[int], counts: list[int], start: int,
                 until: int) -> pa.RecordBatch | None:
        n = sum(counts)
        b = np.frombuffer(buf, dtype=np.uint8)
        s = _record_starts(buf, b, blocks, n)
        ends = np.empty(n, dtype=np.int64)
        ends[:-1] = s[1:]
        ends[-1] = total  # blocks are back to back: a record ends where the next begins
        _, w = _varints(b, s)
        p = s + w + 1  # skip the length and the (unused) record attributes byte
        ts_delta, w = _varints(b, p)
        p = p + w
        offset_delta, w = _varints(b, p)
        p = p + w
        key_len, w = _varints(b, p)
        p = p + w
        key_pos = p
        p = p + np.maximum(key_len, 0)
        value_len, w = _varints(b, p)
        p = p + w
        value_pos = p
        p = p + np.maximum(value_len, 0)
        header_count, w = _varints(b, p)
        p = p + w
        if (key_len < -1).any() or (value_len < -1).any() or (header_count < 0).any():
            raise CorruptRecordError(f"negative key, value or header count in {self.topic}-{self.partition}")
        headers: dict[int, list[tuple[str, bytes | None]]] = {}
        with_headers = np.flatnonzero(header_count)
        if len(with_headers):
            p = p.copy()
            for i in with_headers.tolist():
                headers[i], p[i] = decode_headers(buf, int(p[i]), int(header_count[i]))
        if not np.array_equal(p, ends):
            raise CorruptRecordError(f"a record's length does not match its fields in {self.topic}-{self.partition}")

        count_arr = np.array(counts, dtype=np.int64)
        offsets = np.repeat(np.array(bases, dtype=np.int64), count_arr) + offset_delta
        timestamps = np.repeat(np.array(first_ts, dtype=np.int64), count_arr) + ts_delta
        log_append = np.array(append_time, dtype=np.int64)
        ts_type = np.repeat((log_append >= 0).astype(np.int32), count_arr)
        if (log_append >= 0).any():
            per_record = np.repeat(log_append, count_arr)
            timestamps = np.where(per_record >= 0, per_record, timestamps)

        keep = (offsets >= start) & (offsets < until)
        if not keep.all():
            idx = np.flatnonzero(keep)
            if not len(idx):
                return None
            offsets, timestamps, ts_type = offsets[idx], timestamps[idx], ts_type[idx]
            key_pos, key_len, value_pos, value_len = key_pos[idx], key_len[idx], value_pos[idx], value_len[idx]
            if headers:
                remap = {int(old): new for new, old in enumerate(idx.tolist())}
                headers = {remap[i]: h for i, h in headers.items() if i in remap}
            n = len(idx)

        data = pa.py_buffer(buf)
        arrays = [
            self._binary(data, key_pos, key_len),
            self._binary(data, value_pos, value_len),
            pa.repeat(self._topic_scalar, n),
            pa.repeat(self._partition_scalar, n),
            pa.array(offsets, type=pa.int64()),
            pa.Array.from_buffers(pa.timestamp("us", tz="UTC"), n,
                                  [None, pa.py_buffer(np.ascontiguousarray(timestamps * 1000))]),
            pa.array(ts_type, type=pa.int32()),
        ]
        if self.include_headers:
            arrays.append(_headers_array(headers, n))
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _binary(self, data: pa.Buffer, pos: np.ndarray, length: np.ndarray) -> pa.Array:
        """A binary column of ``data[pos[i] : pos[i] + length[i]]`` (null where length is -1), no per-value Python.

        The fields sit in one buffer in increasing order with other bytes between them, so offsets
        ``pos0, end0, pos1, end1, ...`` describe a valid Arrow array of 2n elements whose even ones are the
        wanted values; ``filter`` copies those out.
        """
        n = len(pos)
        valid = length >= 0
        if not valid.any():
            return pa.nulls(n, pa.binary())
        size = np.where(valid, length, 0)
        offs = np.empty(2 * n + 1, dtype=np.int32)
        offs[0 : 2 * n : 2] = pos
        offs[1 : 2 * n : 2] = pos + size
        offs[2 * n] = offs[2 * n - 1]
        validity = None
        if not valid.all():
            bits = np.ones(2 * n, dtype=bool)
            bits[0::2] = valid
            validity = pa.py_buffer(np.packbits(bits, bitorder="little"))
        both = pa.Array.from_buffers(pa.binary(), 2 * n, [validity, pa.py_buffer(offs), data])
        return both.filter(_even_mask(2 * n))


_EVEN: list[pa.Array] = []  # one growing [True, False, True, ...] mask per process, sliced for each column


def _even_mask(size: int) -> pa.Array:
    if not _EVEN or len(_EVEN[0]) < size:
        _EVEN[:] = [pa.array(np.tile(np.array([True, False]), max(size, 1 << 18) // 2 + 1))]
    return _EVEN[0].slice(0, size)


def _headers_array(headers: dict[int, list[tuple[str, bytes | None]]], n: int) -> pa.Array:
    """Headers as ``array<struct<key, value>>``; null for records without headers, as Spark's Kafka source has."""
    if not headers:
        return pa.nulls(n, HEADERS_TYPE)
    offsets = np.zeros(n + 1, dtype=np.int32)
    valid = np.zeros(n, dtype=bool)
    keys: list[str] = []
    values: list[bytes | None] = []
    for i in sorted(headers):
        valid[i] = True
        offsets[i + 1] = len(headers[i])
        for k, v in headers[i]:
            keys.append(k)
            values.append(v)
    np.cumsum(offsets, out=offsets)
    struct = pa.StructArray.from_arrays([pa.array(keys, pa.string()), pa.array(values, pa.binary())],
                                        fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array(offsets), struct, type=HEADERS_TYPE, mask=pa.array(~valid))


# ---------------------------------------------------------------------------------------------- fetching


def report_data_loss(message: str, fail: bool) -> None:
    """``failOnDataLoss``: raise, or warn and let the caller skip what is gone."""
    if fail:
        raise DataLossError(message + ". If you want the query to go on instead, set the option "
                            "failOnDataLoss to false (the skipped records are then not read)")
    log.warning("%s; failOnDataLoss is false, so the query goes on without them", message)


def _last_batch_end(body: bytes, offset: int) -> int:
    end = offset
    for _, h in iter_batch_headers(body):
        end = max(end, h.base_offset + h.last_offset_delta + 1)
    return end


def read_range(cluster: Cluster, options: SourceOptions, rng: OffsetRange,
               leader_hint: str | None = None) -> Iterator[pa.RecordBatch]:
    """Every record of ``[from_offset, until_offset)``, one RecordBatch per fetch, from the partition's leader.

    Retries leader changes and unreachable brokers until ``kafkaConsumer.pollTimeoutMs`` passes without
    progress. Offsets below the log start (retention) or that never come (a truncated or deleted partition)
    are data loss: fatal with ``failOnDataLoss=true``, skipped with a warning otherwise.
    """
    topic, partition, until = rng.topic, rng.partition, rng.until_offset
    decoder = ArrowDecoder(topic, partition, options.include_headers)
    timeout = options.poll_timeout_ms / 1000.0
    max_bytes = options.fetch_max_bytes
    hint = leader_hint
    backoff = 0.05
    offset = rng.from_offset
    last_progress = time.monotonic()
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-prefetch")
    ahead: tuple[int, Future[Fetched]] | None = None

    def leader() -> str:
        nonlocal hint
        if hint:
            return hint
        url = cluster.leader_url(topic, partition)
        if url is None:
            cluster.metadata.refresh([topic])
            url = cluster.leader_url(topic, partition)
        if url is None:
            raise LeaderNotAvailableError(f"{topic}-{partition} has no leader right now", topic=topic)
        hint = url
        return url

    def fetch(at: int, wait_ms: int) -> Fetched:
        return cluster.fetch(leader(), topic, partition, at, max_bytes, wait_ms)

    try:
        wait_ms = 0
        while offset < until:
            try:
                fetched = ahead[1].result() if ahead is not None and ahead[0] == offset else fetch(offset, wait_ms)
                ahead = None
            except OffsetOutOfRangeError as exc:
                ahead = None
                lso = exc.details.get("log_start_offset")
                hw = exc.details.get("high_watermark")
                if lso is not None and offset < int(lso):
                    report_data_loss(f"offsets {offset} to {min(int(lso), until) - 1} of {topic}-{partition} were "
                                     f"deleted (the log now starts at {lso})", options.fail_on_data_loss)
                    offset = int(lso)
                    last_progress = time.monotonic()
                    continue
                # Beyond the leader's high watermark: a new leader still catching up, or a truncated log.
                if time.monotonic() - last_progress > timeout:
                    report_data_loss(f"offsets {offset} to {until - 1} of {topic}-{partition} are beyond the high "
                                     f"watermark {hw} after {timeout:.0f} s", options.fail_on_data_loss)
                    return
                hint = None
                cluster.on_error(exc, topic, partition)
                time.sleep(backoff)
                continue
            except (UnknownTopicError, UnknownPartitionError) as exc:
                ahead = None
                report_data_loss(f"{topic}-{partition} no longer exists ({exc}); offsets {offset} to {until - 1} "
                                 "cannot be read", options.fail_on_data_loss)
                return
            except OdradekError as exc:
                ahead = None
                if time.monotonic() - last_progress > timeout:
                    raise OdradekError(f"reading {topic}-{partition} from offset {offset} made no progress for "
                                       f"{timeout:.0f} s (kafkaConsumer.pollTimeoutMs); last error: {exc}") from exc
                if exc.retriable:
                    log.info("fetch of %s-%d at %d failed with %s; retrying", topic, partition, offset, exc.name)
                    hint = None
                    cluster.on_error(exc, topic, partition)
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 1.0)
                    cluster.metadata.maybe_refresh()
                    continue
                raise

            if fetched.log_start_offset > offset:  # the broker should have said OFFSET_OUT_OF_RANGE; be safe
                report_data_loss(f"offsets {offset} to {min(fetched.log_start_offset, until) - 1} of {topic}-"
                                 f"{partition} were deleted", options.fail_on_data_loss)
                offset = fetched.log_start_offset
                continue
            nxt = _last_batch_end(fetched.body, offset)
            if nxt <= offset:
                # Nothing at `offset` yet: after a leader change the new leader's high watermark may trail the
                # old one's for a moment. Long-poll until the planned end shows up, within the timeout.
                if fetched.high_watermark > offset and fetched.body == b"":
                    max_bytes = min(max_bytes * 2, 64 << 20)  # a batch larger than max_bytes: ask for more
                if time.monotonic() - last_progress > timeout:
                    report_data_loss(f"offsets {offset} to {until - 1} of {topic}-{partition} did not become "
                                     f"available within {timeout:.0f} s (high watermark "
                                     f"{fetched.high_watermark})", options.fail_on_data_loss)
                    return
                wait_ms = 200
                continue
            wait_ms = 0
            backoff = 0.05
            if nxt < until:
                ahead = (nxt, pool.submit(fetch, nxt, 0))
            batch, _ = decoder.decode(fetched.body, offset, until)
            offset = nxt
            last_progress = time.monotonic()
            if batch is not None and batch.num_rows:
                yield batch
    finally:
        if ahead is not None:
            ahead[1].cancel()
        pool.shutdown(wait=False)
