"""Fetch answers sent with sendfile (broker/kafka/frames.py): the pieces encoding against today's bytes encoding,
the response limits cutting file ranges as they cut bytes, and the socket server writing frames of bytes and file
ranges over real sockets on 127.0.0.1, with every duplicated descriptor closed whatever happens to the answer
(counted in /proc/self/fd).

Nothing is a stand-in where it matters: ranges are on real files (a real ``Log``'s segments for the fetch rules),
bodies are kio's Fetch response classes, and the expected bytes are ``codec.encode_response``'s for the same
answer with the records as bytes."""

from __future__ import annotations

import asyncio
import datetime
import os
import random
import socket
import struct
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader

from broker.fetch.service import FetchRequest, PartitionData
from broker.kafka import codec, fetch_response
from broker.kafka.codec import FETCH, make, nested
from broker.kafka.errors import NONE, code
from broker.kafka.fetch import FetchWant, _whole_batches, close_all, fetch
from broker.kafka.fetch_response import PartitionAnswer, TopicAnswer
from broker.kafka.frames import FileRecordsValue, ResponseFrame, is_file_range
from broker.kafka.listeners import KafkaListener
from broker.kafka.network import Connection, KafkaServer
from broker.kafka.quotas import with_throttle_time
from broker.log import Log
from broker.log.base import ReadResult
from broker.log.reads import SENDFILE_MIN_BYTES, FileSlice, SliceResult
from odradek.protocol.errors import NotLeaderOrFollowerError
from odradek.protocol.records import encode_batch, iter_batch_headers

VERSIONS = [4, 7, 11, 12, 13, 15]
LISTENER = KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def batches(count: int, value_size: int, base: int = 0, seed: int = 1) -> bytes:
    """``count`` batches of 1-5 records of about ``value_size`` bytes each, offsets from ``base``."""
    rnd = random.Random(seed)
    out = []
    offset = base
    for _ in range(count):
        n = rnd.randint(1, 5)
        out.append(encode_batch([(b"k", rnd.randbytes(rnd.randint(value_size // 2, value_size)), 1, ())] * n,
                                base_offset=offset))
        offset += n
    return b"".join(out)


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[tuple[int, bytes]]:
    """An open file holding batches (its descriptor, its bytes): what ranges are cut from."""
    data = batches(40, 9000) + batches(3, 200_000, base=1000, seed=2) + batches(200, 100, base=2000, seed=3)
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    yield fd, data
    os.close(fd)


def ranges(fd: int, *spans: tuple[int, int], next_offset: int = 0) -> SliceResult:
    """File ranges over duplicates of ``fd`` (as ``Log.read_slices`` makes them: the holder closes them)."""
    return SliceResult(tuple(FileSlice(os.dup(fd), pos, length) for pos, length in spans), next_offset, 0, 0)


def batch_bounds(data: bytes) -> list[int]:
    return [pos for pos, _ in iter_batch_headers(data)] + [len(data)]


# ------------------------------------------------------------------------------------------ pieces encoding

def fetch_body(version: int, records: dict[tuple[str, int], Any], *, committed: bool) -> Any:
    """A Fetch response as ``KafkaApis.handle_fetch`` builds one: topics in order, a partition in error (b"")."""
    cls = codec.response_class(FETCH, version)
    part_cls, topic_cls = nested(cls, "PartitionData"), nested(cls, "FetchableTopicResponse")
    aborted_cls = nested(cls, "AbortedTransaction")
    leader_cls = nested(cls, "LeaderIdAndEpoch") if version >= 12 else None
    topics: dict[str, list[Any]] = {}
    for (topic, partition), value in records.items():
        if value is None:  # an error: NOT_LEADER_OR_FOLLOWER naming the leader from v12
            extra = {"current_leader": make(leader_cls, leader_id=2, leader_epoch=7)} if leader_cls else {}
            entry = make(part_cls, partition_index=partition, error_code=code(NotLeaderOrFollowerError("moved")),
                         high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                         aborted_transactions=() if committed else None, preferred_read_replica=-1, records=b"",
                         **extra)
        else:
            entry = make(part_cls, partition_index=partition, error_code=NONE, high_watermark=123_456,
                         last_stable_offset=123_400, log_start_offset=5,
                         aborted_transactions=(make(aborted_cls, producer_id=9, first_offset=1001),)
                         if committed else None, preferred_read_replica=-1, records=value)
        topics.setdefault(topic, []).append(entry)
    responses = tuple(make(topic_cls, topic=t, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, t),
                           partitions=tuple(ps)) for t, ps in topics.items())
    return make(cls, throttle_time=codec_ms(0), error_code=NONE, session_id=77, responses=responses)


def encode_frame(version: int, correlation_id: int, body: Any) -> bytes | ResponseFrame:
    """The broker's Fetch response writer (broker/kafka/fetch_response.py) given the answer a kio ``body`` holds:
    the bodies here are kio's, so that the expected bytes are kio's encoding of the same answer."""
    topics = [TopicAnswer(getattr(t, "topic", ""), getattr(t, "topic_id", None), [PartitionAnswer(
        p.partition_index, p.error_code.value, p.high_watermark, p.last_stable_offset,
        getattr(p, "log_start_offset", -1),
        None if p.aborted_transactions is None else [(a.producer_id, a.first_offset) for a in p.aborted_transactions],
        p.records,
        (p.current_leader.leader_id, p.current_leader.leader_epoch) if hasattr(p, "current_leader") else None)
        for p in t.partitions]) for t in body.responses]
    return fetch_response.encode(version, correlation_id, error_code=getattr(body, "error_code", NONE).value,
                                 session_id=getattr(body, "session_id", 0), topics=topics,
                                 throttle_ms=round(body.throttle_time.total_seconds() * 1000))


def codec_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


@pytest.mark.parametrize("committed", [False, True])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_frame_of_pieces_is_byte_for_byte_the_joined_encoding(segment: tuple[int, bytes], version: int,
                                                                 committed: bool) -> None:
    fd, data = segment
    bounds = batch_bounds(data)
    before = open_fds()
    spans = {("a", 0): [(0, bounds[30])],  # 30 batches of ~20 KB
             ("a", 2): [(bounds[40], bounds[41] - bounds[40]), (bounds[41], bounds[43] - bounds[41])],  # 2 ranges
             ("b", 1): [(bounds[43], bounds[-1] - bounds[43])]}  # many small batches
    small = data[bounds[30]:bounds[31]]
    as_bytes = {("a", 0): data[:bounds[30]], ("a", 1): small, ("a", 2): data[bounds[40]:bounds[43]],
                ("a", 3): b"", ("b", 0): None, ("b", 1): data[bounds[43]:]}
    as_files = {**as_bytes, **{key: FileRecordsValue(ranges(fd, *s)) for key, s in spans.items()}}
    expected = codec.encode_response(FETCH, version, 4242, fetch_body(version, as_bytes, committed=committed))

    frame = encode_frame(version, 4242, fetch_body(version, as_files, committed=committed))

    assert isinstance(frame, ResponseFrame)
    assert len(frame) == len(expected) and struct.unpack_from(">i", frame.pieces[0])[0] == len(expected) - 4
    assert frame.to_bytes() == expected
    files = [p for p in frame.pieces if is_file_range(p)]
    assert len(files) == 4 and frame.file_bytes == sum(p.length for p in files)  # type: ignore[union-attr]
    assert sum(len(p) for p in frame.pieces if not is_file_range(p)) == len(expected) - frame.file_bytes  # type: ignore[arg-type]
    # A client reads it as it reads the bytes answer.
    cls = codec.response_class(FETCH, version)
    _, used = entity_reader(cls.__header_schema__)(expected, 4)
    body, _ = entity_reader(cls)(frame.to_bytes(), 4 + used)
    assert [p.records for t in body.responses for p in t.partitions] == [
        v if v is not None else b"" for v in as_bytes.values()]
    # A throttled answer (KIP-219), its throttle time rewritten in the frame's first piece: the same ranges, the
    # same bytes as re-encoding the bytes answer, and the new frame takes the ranges over.
    throttled = with_throttle_time(frame, FETCH, version, 250)
    assert isinstance(throttled, ResponseFrame)
    assert throttled.to_bytes() == with_throttle_time(expected, FETCH, version, 250)
    assert open_fds() == before + 4
    throttled.close()
    frame.close()  # idempotent: the same values
    assert open_fds() == before


def test_a_body_without_file_ranges_is_encoded_as_bytes_as_before() -> None:
    body = fetch_body(12, {("a", 0): batches(2, 100), ("a", 1): b""}, committed=False)
    assert encode_frame(12, 1, body) == codec.encode_response(FETCH, 12, 1, body)


def test_a_dropped_value_closes_its_descriptors_and_a_failed_encoding_closes_them_all(
        segment: tuple[int, bytes]) -> None:
    fd, _ = segment
    before = open_fds()
    value = FileRecordsValue(ranges(fd, (0, 100)))
    assert open_fds() == before + 1
    del value  # the finalizer: an answer dropped unsent on a path nobody foresaw
    assert open_fds() == before
    cls = codec.response_class(FETCH, 12)
    values = [FileRecordsValue(ranges(fd, (0, 100))) for _ in range(3)]
    body = make(cls, throttle_time=codec_ms(0), error_code=NONE, session_id=0, responses=(make(
        nested(cls, "FetchableTopicResponse"), topic="a", partitions=(
            *(make(nested(cls, "PartitionData"), partition_index=i, error_code=NONE, high_watermark=1,
                   last_stable_offset=1, log_start_offset=0, preferred_read_replica=-1, records=v,
                   aborted_transactions=None)
              for i, v in enumerate(values)),
            make(nested(cls, "PartitionData"), partition_index=9, error_code=NONE, high_watermark="not an int",
                 last_stable_offset=1, log_start_offset=0, preferred_read_replica=-1, records=b"",
                 aborted_transactions=None))),))
    with pytest.raises(struct.error):
        encode_frame(12, 1, body)
    assert open_fds() == before


# ------------------------------------------------------------------------------------------ response limits

@pytest.mark.parametrize("at_least_one", [True, False])
def test_ranges_are_cut_at_the_batch_boundaries_bytes_are_cut_at(segment: tuple[int, bytes],
                                                                  at_least_one: bool) -> None:
    fd, data = segment
    bounds = batch_bounds(data)
    start, end = bounds[38], bounds[-1]  # small batches, three of 200 KB, then many small ones
    spans = [(start, bounds[41] - start), (bounds[41], end - bounds[41])]  # two ranges, split at a batch boundary
    whole = data[start:end]
    last = list(iter_batch_headers(whole))[-1][1]
    end_offset = last.base_offset + last.last_offset_delta + 1
    before = open_fds()
    limits = sorted({0, 1, 100, *(b - start + d for b in bounds[38:] for d in (-1, 0, 1) if b - start + d > 0),
                     len(whole) + 5})
    for limit in limits:
        cut = ranges(fd, *spans, next_offset=end_offset).cut(limit, at_least_one=at_least_one)
        expected = _whole_batches(whole, limit, at_least_one=at_least_one)
        got = b"".join(os.pread(s.fd, s.length, s.position) for s in cut.slices)
        assert got == expected, limit
        if expected:
            last = list(iter_batch_headers(expected))[-1][1]
            assert cut.next_offset == last.base_offset + last.last_offset_delta + 1
        else:
            assert not cut.slices  # nothing held: the descriptors of dropped ranges were closed
        cut.close()
        assert open_fds() == before, limit


class LogReader:
    """The fetch service's leader read over real logs: bytes, or (``zero_copy``) ``Log.read_slices``'s ranges,
    small reads as bytes, as ``Partition.read`` gives them."""

    def __init__(self, logs: dict[int, Log]) -> None:
        self.logs = logs

    async def fetch(self, request: FetchRequest, *, zero_copy: bool = False) -> PartitionData:
        log = self.logs[request.partition]
        assert request.offset is not None
        read: ReadResult | SliceResult = (
            log.read_slices(request.offset, request.max_bytes, copy_below=SENDFILE_MIN_BYTES) if zero_copy
            else log.read(request.offset, request.max_bytes))
        records = read.data if isinstance(read, ReadResult) else read if read.slices else b""
        end = log.log_end_offset
        return PartitionData(request.topic, request.partition, request.offset, records, end, end,
                             log.log_start_offset, end, 0, 1)

    async def wait_for_appends(self, partitions: Any, timeout_s: float) -> list[int]:
        return []

    def fetch_if_quiet(self, topic: str, partition: int, offset: int, replica: Any) -> None:
        return None  # every read goes the whole way here

    async def acknowledge_at_log_end(self, topic: str, partition: int, offset: int, replica: Any) -> None:
        return None


def records_bytes(read: PartitionData | None) -> bytes:
    if read is None:
        return b""
    if isinstance(read.records, bytes | bytearray):
        return bytes(read.records)
    return b"".join(os.pread(s.fd, s.length, s.position) for s in read.records.slices)


@pytest.mark.parametrize("max_bytes", [1, 150_000, 900_000, 1_500_000, 10 << 20])
def test_a_zero_copy_fetch_answers_the_bytes_a_copying_fetch_answers_within_the_same_limits(
        tmp_path: Path, max_bytes: int) -> None:
    logs = {p: Log.open(tmp_path / f"t-{p}") for p in range(4)}
    try:
        logs[0].append(batches(60, 9000, seed=10), leader_epoch=0)  # ~800 KB of 20 KB batches
        logs[1].append(batches(2, 200_000, seed=11), leader_epoch=0)  # two big batches
        logs[2].append(batches(3, 300, seed=12), leader_epoch=0)  # small: bytes either way
        logs[3].append(batches(300, 2000, seed=13), leader_epoch=0)
        reader = LogReader(logs)
        wants = [FetchWant("t", p, 0, 700_000) for p in range(4)]
        before = open_fds()

        async def both() -> tuple[list[Any], list[Any]]:
            copied = await fetch(reader, wants, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, committed=False)
            zero = await fetch(reader, wants, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, committed=False,
                               zero_copy=True)
            return copied, zero

        copied, zero = asyncio.run(both())
        assert [records_bytes(a.read) for a in zero] == [records_bytes(a.read) for a in copied]
        assert any(a.read is not None and not isinstance(a.read.records, bytes) for a in zero)
        assert sum(a.size for a in zero) == sum(a.size for a in copied)
        close_all(zero)
        assert open_fds() == before
    finally:
        for log in logs.values():
            log.close()


def test_a_cancelled_zero_copy_fetch_closes_the_reads_that_returned(tmp_path: Path) -> None:
    logs = {p: Log.open(tmp_path / f"t-{p}") for p in range(3)}
    try:
        for p, log in logs.items():
            log.append(batches(20, 9000, seed=p), leader_epoch=0)
        release = asyncio.Event()

        class Slow(LogReader):
            async def fetch(self, request: FetchRequest, *, zero_copy: bool = False) -> PartitionData:
                if request.partition == 2:  # a long-poll: waits, then reads
                    await release.wait()
                return await super().fetch(request, zero_copy=zero_copy)

        before = open_fds()

        async def main() -> None:
            on_loop = open_fds()  # the loop's own descriptors counted
            task = asyncio.create_task(fetch(Slow(logs), [FetchWant("t", p, 0, 1 << 20) for p in range(3)],
                                             max_wait_ms=0, min_bytes=1, max_bytes=1 << 24, committed=False,
                                             zero_copy=True))
            await asyncio.sleep(0.05)
            assert open_fds() == on_loop + 2  # partitions 0 and 1 read, their ranges held by finished tasks
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        assert open_fds() == before
    finally:
        for log in logs.values():
            log.close()


# ------------------------------------------------------------------------------------------ the socket server

def request_frame(payload: bytes = b"fetch") -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(4)
    return head + await reader.readexactly(struct.unpack(">i", head)[0])


class FrameDoor:
    """A dispatcher answering every request with a Fetch answer of file ranges (new duplicates each time) over
    the segment: with ``copies``, that many more partitions of the whole segment, so that a client that does not
    read leaves the send waiting (loopback buffers hold a few MB)."""

    def __init__(self, fd: int, data: bytes, *, short: bool = False, copies: int = 0) -> None:
        bounds = batch_bounds(data)
        self.fd, self.short = fd, short
        self.spans = {("a", 0): (0, bounds[40]), ("a", 2): (bounds[40], bounds[43] - bounds[40]),
                      ("b", 0): (bounds[43], len(data) - bounds[43]),
                      **{("c", i): (0, len(data)) for i in range(copies)}}
        self.parts = {("a", 0): data[:bounds[40]], ("a", 1): b"", ("a", 2): data[bounds[40]:bounds[43]],
                      ("b", 0): data[bounds[43]:], **{("c", i): data for i in range(copies)}}
        self.expected = codec.encode_response(FETCH, 12, 1, fetch_body(12, self.parts, committed=False))
        self.made: list[ResponseFrame] = []

    async def dispatch(self, conn: Connection, request: bytes) -> ResponseFrame:
        spans = dict(self.spans)
        if self.short:  # past the end of the file: sendfile comes up short
            spans[("a", 2)] = (spans[("a", 2)][0], spans[("a", 2)][1] + 10_000_000)
        values = {key: FileRecordsValue(ranges(self.fd, span)) for key, span in spans.items()}
        frame = encode_frame(12, 1, fetch_body(12, {**self.parts, **values}, committed=False))
        assert isinstance(frame, ResponseFrame)
        self.made.append(frame)
        return frame


def serve(door: FrameDoor, test: Callable[[KafkaServer, int], Awaitable[None]],
          sent: list[tuple[int, int]]) -> None:
    async def main() -> None:
        server = KafkaServer((LISTENER,), door.dispatch, sent_bytes=lambda w, s: sent.append((w, s)))
        await server.start()
        try:
            await asyncio.wait_for(test(server, server.bound_port("PLAINTEXT")), 60)
        finally:
            await server.stop()

    asyncio.run(main())


def test_frames_go_out_in_order_with_sendfile_and_every_descriptor_is_closed(segment: tuple[int, bytes]) -> None:
    fd, data = segment
    door = FrameDoor(fd, data)
    sent: list[tuple[int, int]] = []
    before = open_fds()

    async def test(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(10):  # one at a time
            writer.write(request_frame())
            assert await read_frame(reader) == door.expected
        writer.write(request_frame() * 5)  # pipelined: answered in order, each whole
        for _ in range(5):
            assert await read_frame(reader) == door.expected
        writer.close()
        await writer.wait_closed()

    serve(door, test, sent)
    assert len(sent) == 15
    file_bytes = door.made[0].file_bytes
    assert sent == [(len(door.expected) - file_bytes, file_bytes)] * 15 and file_bytes > 1_000_000
    assert open_fds() == before


def first_difference(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def small_door(fd: int, data: bytes) -> FrameDoor:
    """A door whose answers (about 30 KB) a loopback socket takes at once."""
    door = FrameDoor(fd, data)
    bounds = batch_bounds(data)
    door.spans = {("a", 0): (0, bounds[2]), ("a", 2): (bounds[2], bounds[3] - bounds[2]),
                  ("b", 0): (bounds[43], bounds[50] - bounds[43])}
    door.parts = {("a", 0): data[:bounds[2]], ("a", 1): b"", ("a", 2): data[bounds[2]:bounds[3]],
                  ("b", 0): data[bounds[43]:bounds[50]]}
    door.expected = codec.encode_response(FETCH, 12, 1, fetch_body(12, door.parts, committed=False))
    return door


def test_an_answer_the_socket_takes_at_once_is_written_corked_without_the_loops_sendfile(
        segment: tuple[int, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    fd, data = segment
    door = small_door(fd, data)
    corks: list[int] = []
    real_setsockopt = socket.socket.setsockopt

    async def no_loop_sendfile(*args: Any, **kwargs: Any) -> int:
        raise AssertionError("loop.sendfile used for an answer the socket takes at once")

    sent: list[tuple[int, int]] = []
    before = open_fds()

    async def test(server: KafkaServer, port: int) -> None:
        monkeypatch.setattr(asyncio.get_running_loop(), "sendfile", no_loop_sendfile)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(5):
            writer.write(request_frame())
            assert await read_frame(reader) == door.expected
        writer.close()
        await writer.wait_closed()

    def setsockopt(self: socket.socket, level: int, option: int, value: Any, *rest: Any) -> None:
        if level == socket.IPPROTO_TCP and option == socket.TCP_CORK:
            corks.append(value)
        real_setsockopt(self, level, option, value, *rest)

    monkeypatch.setattr(socket.socket, "setsockopt", setsockopt)
    serve(door, test, sent)
    file_bytes = door.made[0].file_bytes
    assert 0 < file_bytes < 60_000
    assert sent == [(len(door.expected) - file_bytes, file_bytes)] * 5
    assert corks == [1, 0] * 5  # corked for each answer, and uncorked after it
    assert open_fds() == before


def test_an_answer_larger_than_the_socket_takes_goes_on_through_the_transport_in_order(
        segment: tuple[int, bytes]) -> None:
    fd, data = segment
    door = FrameDoor(fd, data, copies=6)  # about 10 MB: the direct write stops partway (EAGAIN)
    sent: list[tuple[int, int]] = []
    before = open_fds()

    async def test(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=2**16)
        for _ in range(3):
            writer.write(request_frame())
            await asyncio.sleep(0.05)  # a slow reader: the socket fills
            got = await read_frame(reader)
            assert got == door.expected, f"{len(got)} bytes, differing from {first_difference(got, door.expected)}"
        writer.close()
        await writer.wait_closed()

    serve(door, test, sent)
    file_bytes = door.made[0].file_bytes
    assert file_bytes > 9_000_000 and sent == [(len(door.expected) - file_bytes, file_bytes)] * 3
    assert open_fds() == before


def test_a_dropped_connection_leaks_no_descriptor(segment: tuple[int, bytes]) -> None:
    fd, data = segment
    before = open_fds()

    async def drop(server: KafkaServer, port: int) -> None:
        for read_some in (0, 100_000, 3_000_000):  # gone before, while, or after the sendfile started
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request_frame() * 3)
            if read_some:
                await reader.readexactly(read_some)
            writer.transport.abort()  # RST: the server's sends fail
            await asyncio.sleep(0.2)
        while server.connection_count:
            await asyncio.sleep(0.05)

    door = FrameDoor(fd, data)
    serve(door, drop, [])
    assert open_fds() == before and door.made


def test_a_range_that_comes_up_short_breaks_the_connection_and_leaks_no_descriptor(
        segment: tuple[int, bytes]) -> None:
    fd, data = segment
    before = open_fds()
    async def short(server: KafkaServer, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_frame())
        with pytest.raises(asyncio.IncompleteReadError):  # a broken answer, never a wrong one
            await read_frame(reader)
        writer.close()

    door = FrameDoor(fd, data, short=True)  # held: only the send path may close its frames' ranges
    serve(door, short, [])
    assert open_fds() == before and door.made


def test_a_server_stopped_mid_send_leaks_no_descriptor(segment: tuple[int, bytes]) -> None:
    fd, data = segment
    before = open_fds()
    async def stuck(server: KafkaServer, port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.pause_reading()  # never reads: the send waits on a full socket
        writer.write(request_frame() * 2)
        await asyncio.sleep(0.3)
        assert door.made and not sent, "the first answer is still being sent"
        await server.stop()  # cancels the serving task mid-send
        writer.close()

    door = FrameDoor(fd, data, copies=20)  # 34 MB
    sent: list[tuple[int, int]] = []
    serve(door, stuck, sent)
    assert open_fds() == before and len(door.made) == 1


# ------------------------------------------------------------------------------------------ the Kafka door

def test_the_kafka_door_answers_replicas_and_consumers_byte_for_byte_as_it_did_with_copies(tmp_path: Path) -> None:
    """KafkaApis over the real fetch service, follower-fetch service and partitions (test_replica_fetch's
    leader): the same Fetch on a PLAINTEXT connection (file ranges: a ResponseFrame) and on an SSL one (bytes, as
    before) gives the same bytes, for a replica's v15 fetch and for consumers' v4, v11, v12 and v15 fetches,
    read_uncommitted and read_committed."""
    from tests.unit.kafka.test_apis import CONN
    from tests.unit.kafka.test_replica_fetch import EPOCH, Leader, fetch_body

    tls = Connection("tls", KafkaListener("SSL", "127.0.0.1", 0, "SSL"), "127.0.0.1", 50001)
    assert tls.listener.tls and not CONN.listener.tls

    def request(version: int, fields: dict[str, Any]) -> bytes:
        cls = codec.request_class(FETCH, version)
        return codec.encode_request(FETCH, version, 7, "unit", make(cls, **fields))[4:]

    async def same(apis: Any, version: int, fields: dict[str, Any]) -> ResponseFrame:
        """The answer on both connections: file ranges on PLAINTEXT, bytes on SSL, byte for byte the same."""
        zero = await apis.handle(CONN, request(version, fields))
        copied = await apis.handle(tls, request(version, fields))
        assert isinstance(zero, ResponseFrame) and isinstance(copied, bytes)
        assert zero.to_bytes() == copied
        return zero

    async def main() -> None:
        leader = Leader(tmp_path)
        apis = await leader.start()
        for p, part in leader.parts.items():
            data = batches(40, 9000, seed=p)
            for pos, h in iter_batch_headers(data):
                await part.append(bytearray(data[pos:pos + h.size]), acks=1, timeout_ms=1000)
        before = open_fds()
        ends = {p: part.log_end_offset for p, part in leader.parts.items()}
        replica = fetch_body(15, {0: 0, 1: 0}, replica=2, broker_epoch=EPOCH[2], leader_epoch=4)
        (await same(apis, 15, replica)).close()
        # The follower acknowledges the log ends: the high watermark moves, consumers may read. Nothing to read:
        # bytes (an empty read holds no descriptor) on both connections.
        ack = request(15, fetch_body(15, ends, replica=2, broker_epoch=EPOCH[2], leader_epoch=4))
        assert await apis.handle(CONN, ack) == await apis.handle(tls, ack)
        assert all(part.high_watermark == ends[p] for p, part in leader.parts.items())
        for version in (4, 11, 12, 15):
            for isolation in (0, 1):  # read_committed with no aborted transaction: the stable read as it is
                frame = await same(apis, version, fetch_body(version, {0: 0, 1: 3}, isolation=isolation))
                assert frame.file_bytes > 2 * SENDFILE_MIN_BYTES
                frame.close()
            # A response limit that cuts the second partition: cut in the ranges as in the bytes.
            limited = {**fetch_body(version, {0: 0, 1: 0}), "max_bytes": 300_000}
            (await same(apis, version, limited)).close()
        assert open_fds() == before

    asyncio.run(main())


def test_a_fetch_quota_counts_the_whole_frame_and_a_throttled_frame_keeps_its_ranges(
        segment: tuple[int, bytes]) -> None:
    """KafkaQuotas (the broker's ClientQuotaManager, a consumer_byte_rate of 100 KB/s) over a door answering a
    ResponseFrame: the bytes counted are the frame's size on the wire, ranges included, and the answer that goes
    out is a frame naming the same ranges, with throttle_time_ms set, byte for byte the re-encoded bytes answer."""
    from broker.kafka.quotas import KafkaQuotas
    from broker.metadata.cache import MetadataCache
    from broker.quotas import ClientQuotaManager
    from tests.unit.kafka.test_kafka_quotas import Clock, fetch_request

    fd, data = segment
    door = FrameDoor(fd, data)
    cache = MetadataCache()
    cache.dynamic = {("clients", "app"): {"consumer_byte_rate": "100000"}}
    quotas = KafkaQuotas(door.dispatch, ClientQuotaManager(cache, now=Clock()))
    conn = Connection("c", LISTENER, "127.0.0.1", 1)
    before = open_fds()
    out = asyncio.run(quotas.dispatch(conn, fetch_request(12)))
    assert isinstance(out, ResponseFrame) and out.records == door.made[0].records
    mute_s, _ = conn.take_throttle()
    assert abs(mute_s * 1000 - len(door.expected) / 100) <= 1  # every byte of the frame counted, at 100 KB/s
    throttled = with_throttle_time(door.expected, FETCH, 12, round(mute_s * 1000))
    assert out.to_bytes() == throttled and len(out) == len(door.expected)
    out.close()
    assert open_fds() == before
