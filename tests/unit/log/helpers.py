"""Small builders shared by the log tests: batches, a settable clock, log factories."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from broker.log import Log, LogConfig
from broker.log.base import ReadResult
from broker.log.reads import SliceResult
from odradek.protocol.records import decode_records, encode_batch, iter_batch_headers


class FakeClock:
    """A clock the test moves by hand (seconds, like ``time.time``)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, ms: int) -> None:
        self.ms += ms


def batch(
    n: int = 3, *, key: bytes | None = b"k", value_size: int = 20, ts: int = 1_000, tag: int = 0, compression: int = 0
) -> bytes:
    """A producer batch of ``n`` records (base offset 0), values tagged so tests can tell batches apart."""
    return encode_batch(
        [(key, f"{tag}:{i}:".encode().ljust(value_size, b"x"), ts + i, ()) for i in range(n)],
        compression=compression,
    )


def keyed_batch(items: Sequence[tuple[bytes, bytes | None]], ts: int = 1_000, compression: int = 0) -> bytes:
    return encode_batch([(k, v, ts, ()) for k, v in items], compression=compression)


def config(**kafka_names: object) -> LogConfig:
    """``config(segment_bytes=1024)`` -> LogConfig from Kafka names (underscores become dots)."""
    return LogConfig.from_topic_config({k.replace("_", "."): str(v) for k, v in kafka_names.items()})


def open_log(
    path: Path, cfg: LogConfig | Mapping[str, object] | None = None, clock: FakeClock | None = None, **kwargs: object
) -> Log:
    if cfg is None or isinstance(cfg, Mapping):
        cfg = config(file_delete_delay_ms=0, **(cfg or {}))
    return Log.open(path, cfg, now=clock or FakeClock(), **kwargs)  # type: ignore[arg-type]


def read_all(log: Log, start: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Every byte from ``start`` (default: log start) to the log end, by repeated reads."""
    offset = log.log_start_offset if start is None else start
    out = bytearray()
    while offset < log.log_end_offset:
        result = log.read(offset, max_bytes)
        if not result.data:
            break
        out += result.data
        offset = result.next_offset
    return bytes(out)


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """``(base offset, last offset)`` of each batch in ``data``."""
    return [(h.base_offset, h.last_offset) for _pos, h in iter_batch_headers(data)]


def values_by_offset(log: Log) -> dict[int, tuple[bytes | None, bytes | None]]:
    return {r.offset: (r.key, r.value) for r in decode_records(read_all(log))}


def read_bytes(result: SliceResult | ReadResult) -> bytes:
    """A read's bytes, whether it came back as bytes or as file ranges (which are closed)."""
    if isinstance(result, ReadResult):
        return result.data
    try:
        return b"".join(os.pread(s.fd, s.length, s.position) for s in result.slices)
    finally:
        result.close()


def nowait_supported(directory: Path) -> bool:
    """Whether the filesystem of ``directory`` reads with ``RWF_NOWAIT`` (tmpfs does not: ``Log.read_cached`` is
    then always None)."""
    path = directory / "probe"
    path.write_bytes(b"x" * 4096)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, (bytearray(16),), 0, os.RWF_NOWAIT)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        path.unlink()


DROP_ATTEMPTS = 20


def drop_from_page_cache(log: Log) -> None:
    """Flush the log and ask the kernel to drop its segments' pages. It may keep some (pages still in another
    CPU's LRU batch are skipped), so a test retries what it checks (``DROP_ATTEMPTS``); and a ``RWF_NOWAIT``
    read that finds a page missing starts reading it in, so nothing here looks before the test does."""
    log.flush()
    for seg in log.segments():
        fd = os.open(seg.path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
