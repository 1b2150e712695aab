"""Commit-log throughput against the disk's own limit. Prints figures; it is not a test and asserts nothing.

Measures, on the same disk and with the same bytes (batches of ``--batch`` records of ``--record-size``-byte
values, Kafka v2 format):

* raw write: plain ``os.write`` of the batch bytes to one file (the ceiling for appends, page cache only);
  it alternates with the flush-off append (and the read) ``--repeat`` times, and the best of each is shown;
* append, flush off: ``Log.append`` with the default flush policy (left to the OS, as in Kafka);
* raw write + fsync per batch, and append with ``flush.messages=1`` (an fsync per append);
* sequential read: ``Log.read`` from the start to the end in ``--read-bytes`` chunks, from the page cache;
* decode: ``decode_records`` on a sample, i.e. what a Python consumer pays per record (for scale only).

Usage: ``python bench/log_bench.py [--records 2000000] [--dir DIR]``. The data goes to a temporary directory
under ``<repo>/var`` (the repository's disk) unless ``--dir`` says otherwise, and is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from broker.log import Log, LogConfig  # noqa: E402
from odradek.protocol.records import decode_records, encode_batch  # noqa: E402


def make_batches(count: int, per_batch: int, record_size: int, distinct: int = 32) -> list[bytes]:
    """``count`` producer batches; ``distinct`` different ones cycled (contents do not matter to the log)."""
    now = int(time.time() * 1000)
    made = [
        encode_batch([(None, os.urandom(record_size), now + i, ()) for i in range(per_batch)]) for _ in range(distinct)
    ]
    return [made[i % distinct] for i in range(count)]


def raw_write(path: Path, batches: list[bytes], fsync: bool) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for b in batches:
            os.write(fd, b)
            if fsync:
                os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        path.unlink()


def append(directory: Path, batches: list[bytes], config: LogConfig) -> tuple[float, Log]:
    log = Log.open(directory, config)
    start = time.perf_counter()
    for b in batches:
        log.append(b, leader_epoch=0)
    return time.perf_counter() - start, log


def sequential_read(log: Log, max_bytes: int) -> tuple[float, int, int]:
    offset, records, size = log.log_start_offset, 0, 0
    end = log.log_end_offset
    start = time.perf_counter()
    while offset < end:
        result = log.read(offset, max_bytes)
        size += len(result.data)
        records += result.next_offset - offset
        offset = result.next_offset
    return time.perf_counter() - start, records, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000, help="records per run (default 2,000,000)")
    parser.add_argument("--record-size", type=int, default=100, help="value bytes per record (default 100)")
    parser.add_argument("--batch", type=int, default=1000, help="records per batch (default 1000)")
    parser.add_argument(
        "--fsync-records",
        type=int,
        default=None,
        help="records for the fsync-per-batch runs (default: same as --records)",
    )
    parser.add_argument("--read-bytes", type=int, default=1 << 20, help="max_bytes per read (default 1 MiB)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of each page-cache measurement, interleaved; the best is shown (default 3)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir in <repo>/var)")
    args = parser.parse_args()

    parent = args.dir or REPO / "var"
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="log-bench-", dir=parent))
    batches_n = max(1, args.records // args.batch)
    records = batches_n * args.batch
    fsync_n = max(1, (args.fsync_records or records) // args.batch)
    try:
        batches = make_batches(batches_n, args.batch, args.record_size)
        total = sum(len(b) for b in batches)
        fsync_batches = batches[:fsync_n]
        fsync_records = fsync_n * args.batch
        fsync_total = sum(len(b) for b in fsync_batches)

        # Page-cache speeds are noisy on a shared machine: raw and append runs alternate, best of each kept.
        raw_secs = append_secs = read_secs = float("inf")
        for i in range(args.repeat):
            raw_secs = min(raw_secs, raw_write(work / "raw.bin", batches, fsync=False))
            secs, log = append(work / f"bench-{i}", batches, LogConfig())
            append_secs = min(append_secs, secs)
            secs, read_records, read_bytes = sequential_read(log, args.read_bytes)
            assert read_records == records and read_bytes == total
            read_secs = min(read_secs, secs)
            if i == args.repeat - 1:
                sample = log.read(0, 4 << 20).data
                start = time.perf_counter()
                decoded = len(decode_records(sample))
                decode_secs = time.perf_counter() - start
            log.close()
            shutil.rmtree(work / f"bench-{i}")

        raw_sync_secs = raw_write(work / "raw-sync.bin", fsync_batches, fsync=True)
        sync_secs, log = append(
            work / "bench-sync", fsync_batches, LogConfig.from_topic_config({"flush.messages": "1"})
        )
        log.close()

        rows = [  # name, records, bytes, seconds, raw seconds to compare with
            ("raw write (os.write)", records, total, raw_secs, None),
            ("append, flush off", records, total, append_secs, raw_secs),
            ("raw write + fsync/batch", fsync_records, fsync_total, raw_sync_secs, None),
            ("append, fsync/batch", fsync_records, fsync_total, sync_secs, raw_sync_secs),
            ("sequential read", records, total, read_secs, None),
            ("decode_records (sample)", decoded, len(sample), decode_secs, None),
        ]
        print(
            f"records={records:,} record_size={args.record_size} batch={args.batch} "
            f"batch_bytes={len(batches[0]):,} data={total / 1e6:.1f} MB repeat={args.repeat} dir={work.parent}"
        )
        print(f"{'operation':<26}{'records':>11}{'seconds':>9}{'records/s':>13}{'MB/s':>9}{'vs raw':>8}")
        for name, n, size, secs, raw in rows:
            ratio = f"{raw / secs:.2f}x" if raw else ""
            print(f"{name:<26}{n:>11,}{secs:>9.3f}{n / secs:>13,.0f}{size / secs / 1e6:>9.1f}{ratio:>8}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
