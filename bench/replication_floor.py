"""What the bytes of an acks=all RF 3 produce cost this machine's kernel, against RF 1, without any broker code.

    .venv/bin/python bench/replication_floor.py [--records 1000000] [--batch-bytes 110000] [--rounds 3]
                                                   [--rf1-cpu 0.8]

Why: issue 25 asks for acks=all RF 3 at 0.6 of RF 1's rate (Kafka's published 0.51 ran each broker on its own
machine). Here the three brokers, ZooKeeper and the client share one 2-core VM, so every byte an RF 3 produce adds
is paid on the same CPUs as RF 1's: written into the page cache three times instead of once, and sent twice more
over loopback TCP (read from the leader's segment, sent, received by a follower). This bench does exactly those
system calls, in big batches so that Python's share is negligible, and prints their CPU per million 110-byte
records: RF 1 = the client's send and the leader's receive and ``pwrite``; RF 3 = that plus, for each of two
followers, the leader's ``pread`` and ``send`` and the follower's receive and ``pwrite``. Pages are written into new
files (as a log's new segments are), which on our VMs costs several times a rewrite of freed pages
(docs/performance.md); every run starts after a ``sync``, with no dirty pages of the one before. RF 3 costs at least
RF 1's whole path plus the difference printed here, so with ``--rf1-cpu`` (RF 1's CPU-s/M as a cluster run
measured it, the brokers' and the client's) it prints the highest RF 3 / RF 1 a CPU-bound run could reach if
replication cost nothing but these system calls. Not a test.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

RECORD_BYTES = 110


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def link() -> tuple[socket.socket, socket.socket]:
    """A loopback TCP connection, as between a client and a broker or two brokers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return a, b


def transfer(batches: Callable[[int], bytes], count: int, size: int, into: int) -> None:
    """``count`` sends of ``batches(i)`` (``size`` bytes each) over a fresh loopback connection, received by a
    thread that appends each to the file ``into``."""
    tx, rx = link()

    def receive() -> None:
        buf = bytearray(size)
        view = memoryview(buf)
        pos = 0
        for _ in range(count):
            got = 0
            while got < size:
                got += rx.recv_into(view[got:])
            pos += os.pwrite(into, buf, pos)

    t = threading.Thread(target=receive)
    t.start()
    for i in range(count):
        tx.sendall(batches(i))
    t.join()
    tx.close()
    rx.close()


def one(workdir: Path, records: int, batch_bytes: int, followers: int) -> float:
    """CPU seconds per million records for the bytes of a produce replicated to ``followers`` followers."""
    batch = os.urandom(batch_bytes)
    count = max(1, records * RECORD_BYTES // batch_bytes)
    files = [os.open(workdir / f"log{i}-{time.monotonic_ns()}", os.O_RDWR | os.O_CREAT, 0o644)
             for i in range(1 + followers)]
    os.sync()  # no dirty pages of an earlier run: the kernel's writeback would bill this one
    try:
        start = cpu()
        leader = files[0]
        transfer(lambda i: batch, count, batch_bytes, leader)  # client -> leader, into the leader's log
        for f in files[1:]:  # leader's log -> follower's log: pread, send, receive, pwrite
            transfer(lambda i: os.pread(leader, batch_bytes, i * batch_bytes), count, batch_bytes, f)
        used = cpu() - start
    finally:
        for f in files:
            os.close(f)
        for p in workdir.glob("log*"):
            p.unlink()
    return used / (count * batch_bytes / RECORD_BYTES) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch-bytes", type=int, default=110_000, help="bytes per produce batch (1,000 records)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rf1-cpu", type=float, default=None,
                    help="RF 1's measured CPU-s/M, brokers and client (the bound is printed with it)")
    ap.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temp dir in <repo>/var)")
    args = ap.parse_args()
    root = args.dir or Path(__file__).resolve().parent.parent / "var"
    root.mkdir(parents=True, exist_ok=True)
    rf1s, rf3s = [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(dir=root) as d:
            order = (0, 2) if r % 2 == 0 else (2, 0)
            got = {f: one(Path(d), args.records, args.batch_bytes, f) for f in order}
        rf1s.append(got[0])
        rf3s.append(got[2])
        print(f"round {r + 1}: RF 1 {got[0]:.3f} CPU-s/M, RF 3 {got[2]:.3f} CPU-s/M: RF 3 adds "
              f"{got[2] - got[0]:.3f} CPU-s/M in the kernel", flush=True)
    rf1, rf3 = sorted(rf1s)[len(rf1s) // 2], sorted(rf3s)[len(rf3s) // 2]
    extra = sorted(b - a for a, b in zip(rf1s, rf3s, strict=True))[len(rf1s) // 2]
    print(f"median: RF 1 {rf1:.3f}, RF 3 {rf3:.3f} CPU-s/M; RF 3 adds {extra:.3f} CPU-s/M of system calls")
    if args.rf1_cpu:
        print(f"with RF 1 at {args.rf1_cpu:.3f} CPU-s/M, a CPU-bound RF 3 / RF 1 is at most "
              f"{args.rf1_cpu / (args.rf1_cpu + extra):.2f} (replication code free, the bytes' system calls paid)")


if __name__ == "__main__":
    sys.exit(main())
