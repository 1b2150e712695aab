"""What writing one Fetch answer of file ranges costs the Kafka socket server, the direct corked write against
the transport path, interleaved in one process.

    .venv/bin/python bench/fetch_send_bench.py [--answers 2000] [--partitions 3] [--partition-bytes 100000]
                                               [--rounds 6]

A ``KafkaServer`` on 127.0.0.1 answers every request with the same Fetch v12 answer: ``--partitions`` partitions,
each ``--partition-bytes`` of a segment file as a file range (what a leader sends a follower in a round, or a
consumer). A client in another process (plain blocking socket) sends a request, reads the whole answer, and
repeats ``--answers`` times. Each round runs both ways, the order alternating: ``direct`` is the server as it is
(the answer written under TCP_CORK with ``os.write`` and ``os.sendfile`` while the transport's buffer is empty),
``transport`` has the direct write switched off (bytes through the transport, file ranges with
``loop.sendfile``, as before), and ``copied`` (with ``--ways``) reads the records into bytes and answers with one
joined frame, as a read below the log's ``copy_below`` is answered. Prints, per way, the server process's CPU
microseconds per answer (``time.process_time``) and answers per second; the client's CPU is its own process's.
Not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from broker.kafka import codec, network
from broker.kafka.codec import FETCH, make, nested
from broker.kafka.errors import NONE
from broker.kafka.frames import FileRecordsValue
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import Connection, KafkaServer
from broker.log.reads import FileSlice, SliceResult
from odradek.protocol.records import encode_batch
from tests.unit.kafka.test_sendfile import encode_frame

CLIENT = r"""
import socket, struct, sys
port, answers = int(sys.argv[1]), int(sys.argv[2])
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
request = struct.pack(">i", 5) + b"fetch"
buf = bytearray(1 << 24)
view = memoryview(buf)
for _ in range(answers):
    s.sendall(request)
    got = 0
    while got < 4 or got < 4 + struct.unpack_from(">i", buf)[0]:
        n = s.recv_into(view[got:])
        if not n:
            sys.exit("closed")
        got += n
print("ok")
"""


def answer_body(partitions: int, values: list[FileRecordsValue] | list[bytes]) -> Any:
    cls = codec.response_class(FETCH, 12)
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    parts = tuple(make(part_cls, partition_index=p, error_code=NONE, high_watermark=1_000_000,
                       last_stable_offset=1_000_000, log_start_offset=0, aborted_transactions=None,
                       preferred_read_replica=-1, records=values[p]) for p in range(partitions))
    topic = make(topic_cls, topic="t", topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, "t"), partitions=parts)
    return make(cls, throttle_time=datetime.timedelta(0), error_code=NONE, session_id=1, responses=(topic,))


async def one_way(fd: int, length: int, partitions: int, answers: int, way: str) -> tuple[float, float]:
    async def dispatch(conn: Connection, request: bytes) -> Any:
        if way == "copied":  # the records read into bytes (a read below copy_below) and the answer joined
            return codec.encode_response(FETCH, 12, 1, answer_body(partitions, [
                os.pread(fd, length, 0) for _ in range(partitions)]))
        values = [FileRecordsValue(SliceResult((FileSlice(os.dup(fd), 0, length),), 0, 0, 0))
                  for _ in range(partitions)]
        return encode_frame(12, 1, answer_body(partitions, values))

    saved = network._write_now
    if way == "transport":
        network._write_now = lambda sock, pieces: (0, 0, 0)  # type: ignore[assignment]
    server = KafkaServer((KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT"),), dispatch)
    await server.start()
    try:
        port = server.bound_port("PLAINTEXT")
        cpu0, wall0 = time.process_time(), time.perf_counter()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CLIENT, str(port), str(answers),
                                                    stdout=subprocess.PIPE)
        out, _ = await proc.communicate()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        if proc.returncode or out.strip() != b"ok":
            raise RuntimeError(f"client failed: {proc.returncode} {out!r}")
    finally:
        await server.stop()
        network._write_now = saved
    return cpu / answers * 1e6, answers / wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--answers", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--partition-bytes", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--ways", default="direct,transport", help="comma list of: direct, transport, copied")
    args = ap.parse_args()
    ways = args.ways.split(",")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "00000000000000000000.log"
        data = bytearray()
        while len(data) < args.partition_bytes:
            data += encode_batch([(b"k", os.urandom(100), 1, ())] * 100, base_offset=len(data))
        path.write_bytes(bytes(data[:args.partition_bytes]))
        fd = os.open(path, os.O_RDONLY)
        results: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
        try:
            for r in range(args.rounds):
                for way in (ways if r % 2 == 0 else ways[::-1]):
                    cpu_us, rate = asyncio.run(one_way(fd, args.partition_bytes, args.partitions, args.answers,
                                                       way))
                    results[way].append((cpu_us, rate))
                    print(f"round {r + 1} {way:9}: server {cpu_us:6.1f} CPU-us per answer, {rate:8,.0f} answers/s "
                          f"(load average {os.getloadavg()[0]:.2f})", flush=True)
        finally:
            os.close(fd)
    print(f"\n{args.partitions} partitions x {args.partition_bytes:,} bytes per answer, {args.answers:,} answers "
          f"per run, {args.rounds} rounds")
    for way, rs in results.items():
        cpus = sorted(c for c, _ in rs)
        rates = sorted(x for _, x in rs)
        print(f"{way:9}: CPU-us per answer median {cpus[len(cpus) // 2]:.1f} (range {cpus[0]:.1f}-{cpus[-1]:.1f}), "
              f"answers/s median {rates[len(rates) // 2]:,.0f}")
    first = ways[0]
    for other in ways[1:]:
        wins = sum(1 for (a, _), (b, _) in zip(results[first], results[other], strict=True) if a < b)
        print(f"{first} used less server CPU than {other} in {wins} of {args.rounds} rounds")


if __name__ == "__main__":
    main()
