"""Frames cut out of a byte stream by the inter-broker client's ``_Wire`` (broker/kafka/channel.py): small ones
from the receive buffer, large ones read into a buffer the connection keeps and reuses. Whatever the sizes and
however the kernel splits the stream, each frame comes out whole, in order, and a later frame read into the kept
buffer never changes an earlier one."""

from __future__ import annotations

import asyncio
import random
import struct

from broker.kafka.channel import RECEIVE_BUFFER_BYTES, REUSED_BODY_BYTES, _Wire


def frames(rnd: random.Random) -> list[bytes]:
    sizes = [4, 100, RECEIVE_BUFFER_BYTES - 4, RECEIVE_BUFFER_BYTES, RECEIVE_BUFFER_BYTES + 1, 300_000, 1 << 20,
             200_000, REUSED_BODY_BYTES, REUSED_BODY_BYTES + 1, 50, 2 << 20, 70_000, 3 << 20]
    return [rnd.randbytes(n) for n in sizes]


def feed(wire: _Wire, stream: bytes, rnd: random.Random) -> None:
    """As asyncio's BufferedProtocol reading does: get_buffer, copy what the kernel would give, buffer_updated."""
    pos = 0
    while pos < len(stream):
        room = wire.get_buffer(-1)
        n = min(len(room), len(stream) - pos, rnd.choice([1, 7, 4096, 65536, 1 << 20, 1 << 30]))
        room[:n] = stream[pos:pos + n]
        wire.buffer_updated(n)
        pos += n


def test_every_frame_comes_out_whole_and_in_order_however_the_stream_is_split() -> None:
    async def run() -> None:
        for seed in range(6):
            rnd = random.Random(seed)
            wanted = frames(rnd)
            rnd.shuffle(wanted)
            stream = b"".join(struct.pack(">i", len(f)) + f for f in wanted)
            wire = _Wire(max_frame=64 << 20, max_queued=len(wanted) + 1)
            feed(wire, stream, rnd)
            got = [await wire.next_frame() for _ in wanted]
            assert [len(g) for g in got] == [len(w) for w in wanted]
            assert got == wanted  # the kept buffer was reused by later frames: earlier ones are unchanged

    asyncio.run(run())


def test_the_kept_buffer_is_bounded() -> None:
    async def run() -> None:
        rnd = random.Random(1)
        big = rnd.randbytes(REUSED_BODY_BYTES + 10)
        small = rnd.randbytes(RECEIVE_BUFFER_BYTES * 2)
        wire = _Wire(max_frame=64 << 20, max_queued=4)
        feed(wire, b"".join(struct.pack(">i", len(f)) + f for f in (big, small)), rnd)
        assert await wire.next_frame() == big
        assert await wire.next_frame() == small
        assert wire._bodies.kept_bytes == len(small)  # the oversized one was not kept

    asyncio.run(run())
