"""GET .../records (JSON read by offset), GET .../batches (binary fetch, consumers and followers) and
GET .../epoch_end_offset (followers' divergence check).

Handlers decode a FetchRequest, call the fetch service (broker/fetch/service.py) and render its PartitionData:
which replica serves a read, how long it waits and what it may return are the service's. Reads wait for a
leader like produces do, bounded by their own long-poll timeout: a read with ``timeout=0`` answers at once. The
JSON read may be forwarded to another broker's leadership (identical waiting reads then share one upstream read,
broker/fetch/forwarded_reads.py: its answer is batches as bytes, rendered here per request, so the embedded
format never splits it); the binary paths are leader-only and name the leader instead.
"""

from __future__ import annotations

import asyncio
import os
import weakref

import orjson
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from broker.api.context import BROKER, json_response
from broker.api.embedded import BINARY, SCHEMA_TYPES, read_format, record_json
from broker.api.large_body import body_response
from broker.api.params import INT32_MAX, int_param, isolation_param, optional_int_param, partition_param, wait_param
from broker.fetch.service import (
    DEFAULT_MAX_BYTES,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    FetchRequest,
    FileRecords,
    PartitionData,
    ReplicaFetch,
)
from broker.produce.forwarding import LAST_STABLE_OFFSET
from odradek.protocol import media, speedups
from odradek.protocol.records import decode_records, last_batch_header


async def read_records(request: web.Request) -> web.StreamResponse:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    partition = partition_param(request)
    fmt, content_type = read_format(request.headers.get("Accept", ""))
    max_bytes = int_param(request, "max_bytes", DEFAULT_MAX_BYTES, minimum=1, maximum=INT32_MAX)
    timeout_ms = wait_param(request, "timeout")
    requested = optional_int_param(request, "offset")
    level = isolation_param(request)
    read = await broker.fetches.fetch_anywhere(FetchRequest(topic, partition, requested, max_bytes, timeout_ms, level))
    data, offset, lso, leader = read.records, read.fetch_offset, read.log_start_offset, read.leader  # bytes
    # A read_committed reader's end is the LSO: the answer's ``high_watermark`` says where its reads end.
    hw = read.last_stable_offset if level == READ_COMMITTED else read.high_watermark
    # The batches of a read are in offset order: the last one ends furthest (never past ``hw``).
    last = last_batch_header(data)
    next_offset = offset if last is None else max(offset, min(last.next_offset, hw))
    answer = {"topic": topic, "partition": partition, "high_watermark": hw, "log_start_offset": lso,
              "next_offset": next_offset}
    if fmt in SCHEMA_TYPES:  # avro, jsonschema: each key and value decoded by its schema id from the registry
        registry, schema_type = broker.schema_registry, SCHEMA_TYPES[fmt]
        records = [r for r in decode_records(data) if r.offset >= offset]
        await registry.await_ids([r.key for r in records] + [r.value for r in records])
        answer["records"] = [record_json(topic, partition, r, fmt,
                                         lambda data: registry.decode_framed(data, schema_type))
                             for r in records]
        body = orjson.dumps(answer)
    elif speedups.COMPILED:
        # One C pass from the batches to the whole body, written once: the answer's other fields (orjson, as
        # json_response would write them) are its head, ``records`` is last. Byte for byte json_response's.
        body = speedups.render_records(data, offset, speedups.read_prefix(topic, partition), fmt == BINARY,
                                       orjson.dumps(answer)[:-1] + b',"records":', b"}")
    else:
        answer["records"] = [record_json(topic, partition, r, fmt) for r in decode_records(data) if r.offset >= offset]
        body = orjson.dumps(answer)
    return body_response(body, content_type, {media.LEADER: str(leader)})


async def fetch_batches(request: web.Request) -> web.StreamResponse:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    partition = partition_param(request)
    max_bytes = int_param(request, "max_bytes", DEFAULT_MAX_BYTES, minimum=1, maximum=INT32_MAX)
    timeout_ms = wait_param(request, "timeout_ms")
    replica_id = int_param(request, "replica_id", -1, minimum=-1, maximum=INT32_MAX)
    offset = optional_int_param(request, "offset")  # None: the log start offset
    replica = None
    if replica_id >= 0:  # a follower's fetch: its acknowledgement, checked by the service
        replica = ReplicaFetch(replica_id, int_param(request, "replica_epoch", -1, minimum=-1),
                               optional_int_param(request, "leader_epoch", minimum=-1, maximum=INT32_MAX))
    level = READ_UNCOMMITTED if replica is not None else isolation_param(request)
    # Zero-copy (Kafka's FileRecords + sendfile): the log names a file range, the kernel sends it.
    read = await broker.fetches.fetch(FetchRequest(topic, partition, offset, max_bytes, timeout_ms, level,
                                                   replica=replica), zero_copy=True)
    headers = _offset_headers(read)
    if isinstance(read.records, FileRecords):
        return SegmentResponse(read.records, headers)
    return web.Response(body=read.records, content_type=media.BATCHES, headers=headers)


def _offset_headers(read: PartitionData) -> dict[str, str]:
    return {
        media.HIGH_WATERMARK: str(read.high_watermark),
        LAST_STABLE_OFFSET: str(read.last_stable_offset),
        media.LOG_START_OFFSET: str(read.log_start_offset),
        media.LOG_END_OFFSET: str(read.log_end_offset),
        media.LEADER_EPOCH: str(read.leader_epoch),
        media.LEADER: str(read.leader),
    }


class SegmentResponse(web.StreamResponse):
    """A binary fetch answer sent from the segment file with ``sendfile``: the bytes never enter Python.

    Built by the handler, sent by aiohttp after the middlewares (which may still add headers) through
    ``prepare``, as ``web.FileResponse`` does. The status line and headers go out first (a StreamResponse sends
    them at once), then each file range; Content-Length is the ranges' total, so the body is byte for byte what
    the buffered answer was. The log's duplicated descriptors are closed once sent, or when the response is
    dropped unsent (a finalizer, at most once). A range that comes up short (the file was truncated under us,
    a leader demoted mid-send) closes the connection: the client sees a broken answer, never a wrong one.
    Over TLS, ``loop.sendfile`` falls back to reading and writing in chunks by itself.
    """

    def __init__(self, result: FileRecords, headers: dict[str, str]) -> None:
        super().__init__(headers=headers)
        self.content_type = media.BATCHES
        self.content_length = result.size
        self._slices = result.slices
        self._release = weakref.finalize(self, result.close)

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return await super().prepare(request)
        try:
            writer = await super().prepare(request)
            if request.method != "HEAD":
                transport = request.transport
                if transport is None:
                    raise ConnectionResetError("connection lost before the fetch answer was sent")
                await self.send_ranges(transport)
            await super().write_eof()
            return writer
        finally:
            self._release()

    async def send_ranges(self, transport: asyncio.BaseTransport) -> None:
        """The body: each file range with ``sendfile``, after what the transport holds (the head). Closes the
        connection on a short range. The hot routes' connections (broker/api/hot_routes.py) call it directly,
        after writing the head themselves, then ``release``."""
        loop = asyncio.get_running_loop()
        for s in self._slices:
            with os.fdopen(s.fd, "rb", buffering=0, closefd=False) as f:
                sent = await loop.sendfile(transport, f, s.position, s.length)  # type: ignore[arg-type]
            if sent != s.length:
                transport.close()
                raise ConnectionResetError(f"sent {sent} of {s.length} bytes: the segment shrank under the fetch")

    def release(self) -> None:
        """Close the ranges' descriptors (at most once; also done when the answer is dropped unsent)."""
        self._release()


async def epoch_end_offset(request: web.Request) -> web.Response:
    fetches = request.app[BROKER].fetches
    answer = fetches.epoch_end_offset(request.match_info["topic"], partition_param(request),
                                      int_param(request, "leader_epoch", minimum=-1))
    return json_response({"leader_epoch": answer.leader_epoch, "end_offset": answer.end_offset})
