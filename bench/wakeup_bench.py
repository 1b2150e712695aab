"""What a hand-off between threads costs on this machine, free to cross CPUs and on one CPU: a thread ping-pong,
the broker's storage hop, and six partitions' jobs awaited together (why ``--cpu-affinity`` matters here).

    .venv/bin/python bench/wakeup_bench.py [--hops 5000] [--cpu 0]

Each figure is measured twice in its own child process, once with every CPU this process may use and once on
``--cpu`` alone (``os.sched_setaffinity`` before any thread starts), and printed as CPU and wall microseconds per
hand-off (``time.process_time`` and ``perf_counter`` over ``--hops`` of them in a row, three rounds):

* ping-pong: two Python threads, a ``queue.SimpleQueue`` each way;
* storage hop: ``await StorageExecutor.run(key, fn)`` of a no-op job from an event loop (the executor's 8 threads);
* six jobs: ``StorageExecutor.start`` for six partition keys of a job of about 10 µs each, then one ``gather``
  (what a REST produce request of six partitions does), with 8 and with 1 storage threads.

Not a test: on our VMs a wake-up of a thread sleeping on another CPU costs several times one on the same CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.log.executor import StorageExecutor


def ping_pong(n: int) -> tuple[float, float]:
    there: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    back: queue.SimpleQueue[int] = queue.SimpleQueue()

    def echo() -> None:
        while (x := there.get()) is not None:
            back.put(x)

    t = threading.Thread(target=echo)
    t.start()
    c0, w0 = time.process_time(), time.perf_counter()
    for i in range(n):
        there.put(i)
        back.get()
    c, w = time.process_time() - c0, time.perf_counter() - w0
    there.put(None)
    t.join()
    return c / n * 1e6, w / n * 1e6


def _job() -> int:
    x = 0
    for i in range(200):  # about 10 µs
        x += i
    return x


async def storage(n: int, threads: int, together: int) -> tuple[float, float]:
    ex = StorageExecutor(threads=threads)
    try:
        await ex.run(None, _job)
        c0, w0 = time.process_time(), time.perf_counter()
        for i in range(n):
            if together == 1:
                await ex.run(("k", i % 6), lambda: None)
            else:
                await asyncio.gather(*(ex.start(("k", p), _job) for p in range(together)))
        c, w = time.process_time() - c0, time.perf_counter() - w0
    finally:
        ex.shutdown()
    return c / n * 1e6, w / n * 1e6


def child(kind: str, n: int) -> None:
    rounds = []
    for _ in range(3):
        if kind == "ping-pong":
            rounds.append(ping_pong(n))
        elif kind == "storage hop":
            rounds.append(asyncio.run(storage(n, 8, 1)))
        else:
            rounds.append(asyncio.run(storage(n // 2, 8 if kind == "six jobs, 8 threads" else 1, 6)))
        time.sleep(0.1)
    print(" ".join(f"{c:.0f}/{w:.0f}" for c, w in rounds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hops", type=int, default=5000)
    ap.add_argument("--cpu", type=int, default=min(os.sched_getaffinity(0)))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pinned", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        if args.pinned:
            os.sched_setaffinity(0, {args.cpu})
        child(args.child, args.hops)
        return
    print(f"CPU/wall µs per hand-off, 3 rounds of {args.hops:,}; free: CPUs "
          f"{sorted(os.sched_getaffinity(0))}, pinned: CPU {args.cpu}")
    for kind in ("ping-pong", "storage hop", "six jobs, 8 threads", "six jobs, 1 thread"):
        for pinned in (False, True):
            out = subprocess.run([sys.executable, __file__, "--child", kind, "--hops", str(args.hops), "--cpu",
                                  str(args.cpu), *(["--pinned"] if pinned else [])],
                                 capture_output=True, text=True, check=True, timeout=600).stdout.strip()
            print(f"{kind:22} {'pinned' if pinned else 'free':7} {out}", flush=True)


if __name__ == "__main__":
    main()
