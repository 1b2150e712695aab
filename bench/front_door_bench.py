"""What the Kafka front door's connection handling costs per request, without any API behind it.

    .venv/bin/python bench/front_door_bench.py [--requests 10000] [--passes 5] [--size 40]

In one process, over a real socket on 127.0.0.1: the broker's socket server (broker/kafka/network.py) with an echo
dispatcher (tests/unit/kafka/test_network.py's), and a client sending one request at a time and reading its answer.
Prints the process's CPU microseconds per round trip (client and server together: the client's part is the same
from one checkout to the next), the median over each pass. What it moves: framing, the serving task's wait for the
next frame, the idle timeout's bookkeeping, the answer's write. Compare checkouts by running it from each. Not a
test.

The client's stream reads ``recv`` up to 256 KiB into a new bytes object each time; whether glibc serves that from
the heap or maps and unmaps it per read (three system calls, some 40 µs a round trip here) depends on the allocator's
history in the process (its dynamic mmap threshold), and so varied from one checkout's run to another's for
reasons that had nothing to do with the code measured. The bench fixes the thresholds first (``mallopt``), so that
what it compares is the server's code.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.kafka.network import KafkaServer
from tests.unit.kafka.test_network import LISTENER, echo, frame, read_frame


async def passes(requests: int, count: int, size: int) -> list[float]:
    server = KafkaServer((LISTENER,), echo)
    await server.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_port("PLAINTEXT"))
        request = frame(b"x" * size)
        out = []
        for _ in range(count + 1):  # the first pass warms the allocator and the caches
            t0 = time.process_time()
            for _ in range(requests):
                writer.write(request)
                await read_frame(reader)
            out.append((time.process_time() - t0) / requests * 1e6)
        writer.close()
        return out[1:]
    finally:
        await server.stop()


def fix_malloc_thresholds() -> None:
    """Blocks up to 4 MiB from the heap, and the heap kept (glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD)."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 4 << 20)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD


def main() -> None:
    fix_malloc_thresholds()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10000)
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--size", type=int, default=40, help="request bytes")
    args = ap.parse_args()
    got = asyncio.run(passes(args.requests, args.passes, args.size))
    print(f"round trip: {statistics.median(got):.1f} µs of CPU (client and server; passes "
          f"{' '.join(f'{g:.1f}' for g in got)})")


if __name__ == "__main__":
    main()
