"""What a page-cache write costs on this machine right now: the floor under every produce figure's CPU-seconds.

    .venv/bin/python bench/page_cache_probe.py [--mb 1024] [--dir .]

A broker's append is a ``pwritev`` into the page cache (no fsync by default, as Kafka's), and on our VMs its cost
depends on the guest memory it lands in: memory the guest has never touched since it booted (or that was handed
back to the host) is faulted in from the host on first touch, several times dearer than memory the kernel freed
and reuses. A produce bench writes gigabytes, so whether its pages are fresh or reused moves its CPU-seconds per
million records more than most code changes. This writes ``--mb`` of 20 KB ``pwritev`` calls (the size of one
partition's share of a 1,000-record REST produce) to a new file in ``--dir``, deletes it, and writes it again
(now into the pages just freed): the CPU microseconds per write and MB per CPU-second of each pass. Benches
print it beside their figures (``probe()``). Not a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

WRITE = 20_000


@dataclass(frozen=True)
class Probe:
    fresh_us: float  # CPU µs per 20 KB write into pages the file system had not used since the probe began
    reused_us: float  # the same, into the pages the first pass freed

    def __str__(self) -> str:
        return (f"page cache: {self.fresh_us:.1f} µs CPU per 20 KB pwritev into new pages, {self.reused_us:.1f} "
                f"into reused ones ({WRITE / self.fresh_us:.0f} / {WRITE / self.reused_us:.0f} MB per CPU-second)")


def _pass(directory: Path, count: int) -> float:
    buf = os.urandom(WRITE)
    fd, name = tempfile.mkstemp(prefix="page-cache-probe-", dir=directory)
    try:
        start = time.process_time()
        for i in range(count):
            os.pwritev(fd, [buf], i * WRITE)
        return (time.process_time() - start) / count * 1e6
    finally:
        os.close(fd)
        os.unlink(name)


def probe(directory: Path, mb: int = 1024) -> Probe:
    count = max(1, mb * 1_000_000 // WRITE)
    fresh = _pass(directory, count)
    return Probe(fresh, _pass(directory, count))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024)
    ap.add_argument("--dir", type=Path, default=Path("."))
    args = ap.parse_args()
    print(probe(args.dir, args.mb))


if __name__ == "__main__":
    main()
