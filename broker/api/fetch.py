"""GET .../records (JSON read by offset), GET .../batches (binary fetch, consumers and followers) and
GET .../epoch_end_offset (followers' divergence check).

Reads wait for a leader like produces do (broker/produce/routing.py), bounded by their own long-poll timeout:
a read with ``timeout=0`` answers at once. The JSON read forwards to another broker's leadership; the binary
paths are leader-only and name the leader instead.
"""

from __future__ import annotations

import asyncio
import os
import weakref

import orjson
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from broker.api.context import BROKER, json_response
from broker.api.embedded import BINARY, read_format, record_json
from broker.api.params import INT32_MAX, int_param, partition_param, wait_param
from broker.produce import forwarding as forward
from broker.produce.routing import ROUTING_ERRORS, Remote, deadline_after, remaining_ms
from broker.replication.follower_fetch import FetchResult, FollowerFetch, SliceResult
from broker.replication.follower_fetch import close as release
from odradek.protocol import media, speedups
from odradek.protocol.errors import InvalidRequestError
from odradek.protocol.records import decode_records, iter_batch_headers
from transaction_coordinator.markers import ISOLATION_LEVELS, READ_COMMITTED, READ_UNCOMMITTED

DEFAULT_MAX_BYTES = 1024 * 1024
LAST_STABLE_OFFSET = "Odradek-Last-Stable-Offset"


async def read_records(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    partition = partition_param(request)
    fmt, content_type = read_format(request.headers.get("Accept", ""))
    max_bytes = int_param(request, "max_bytes", DEFAULT_MAX_BYTES, minimum=1, maximum=INT32_MAX)
    timeout_ms = wait_param(request, "timeout")
    requested = int_param(request, "offset") if request.query.get("offset") else None
    committed = read_committed(request)
    hw = 0
    deadline = deadline_after(timeout_ms)
    while True:
        route = await broker.produce.router.await_route(topic, partition, deadline)
        wait_ms = remaining_ms(deadline) if timeout_ms else 0
        try:
            if isinstance(route, Remote):
                data, meta = await forward.fetch_batches(broker.http_session, route.url, topic, partition, requested,
                                                         max_bytes, wait_ms, committed)
                hw, lso, leader = meta["high_watermark"], meta["log_start_offset"], meta["leader"]
                offset = lso if requested is None else requested
            else:
                offset = route.log_start_offset if requested is None else requested
                result = await (route.read_committed(offset, max_bytes, wait_ms) if committed
                                else route.read(offset, max_bytes, wait_ms))
                if committed:
                    hw = route.last_stable_offset
                data, hw, lso, leader = (result.data, hw if committed else route.high_watermark,
                                         route.log_start_offset, broker.broker_id)
            break
        except ROUTING_ERRORS:
            if not await broker.produce.router.wait_for_change(deadline):
                raise
    next_offset = offset
    for _, header in iter_batch_headers(data):
        next_offset = max(next_offset, min(header.next_offset, hw))
    answer = {"topic": topic, "partition": partition, "high_watermark": hw, "log_start_offset": lso,
              "next_offset": next_offset}
    if speedups.COMPILED:
        # One C pass from the batches to the whole body, written once: the answer's other fields (orjson, as
        # json_response would write them) are its head, ``records`` is last. Byte for byte json_response's.
        body = speedups.render_records(data, offset, speedups.read_prefix(topic, partition), fmt == BINARY,
                                       orjson.dumps(answer)[:-1] + b',"records":', b"}")
    else:
        answer["records"] = [record_json(topic, partition, r, fmt) for r in decode_records(data) if r.offset >= offset]
        body = orjson.dumps(answer)
    response = web.Response(body=body, content_type=content_type)
    response.headers[media.LEADER] = str(leader)
    return response


async def fetch_batches(request: web.Request) -> web.StreamResponse:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    partition = partition_param(request)
    max_bytes = int_param(request, "max_bytes", DEFAULT_MAX_BYTES, minimum=1, maximum=INT32_MAX)
    timeout_ms = wait_param(request, "timeout_ms")
    replica_id = int_param(request, "replica_id", -1, minimum=-1, maximum=INT32_MAX)
    part = await broker.produce.router.await_leader(topic, partition, deadline_after(timeout_ms))
    offset = int_param(request, "offset", part.log_start_offset)
    # Zero-copy (Kafka's FileRecords + sendfile): the log names a file range, the kernel sends it.
    if replica_id >= 0:
        fetch = FollowerFetch(
            replica_id=replica_id,
            replica_epoch=int_param(request, "replica_epoch", -1, minimum=-1),
            leader_epoch=int_param(request, "leader_epoch", part.leader_epoch, minimum=-1, maximum=INT32_MAX),
            offset=offset, max_bytes=max_bytes, timeout_ms=timeout_ms)
        result: FetchResult = await broker.follower_fetches.fetch(part, fetch)
    elif read_committed(request):  # filtered per batch (transaction_coordinator/markers.py): no zero-copy
        result = await part.read_committed(offset, max_bytes, timeout_ms)
    else:
        result = await part.read(offset, max_bytes, timeout_ms, zero_copy=True)
    headers = {
        media.HIGH_WATERMARK: str(part.high_watermark),
        LAST_STABLE_OFFSET: str(part.last_stable_offset),
        media.LOG_START_OFFSET: str(part.log_start_offset),
        media.LOG_END_OFFSET: str(part.log_end_offset),
        media.LEADER_EPOCH: str(part.leader_epoch),
        media.LEADER: str(broker.broker_id),
    }
    slices = getattr(result, "slices", None)
    if slices:
        return SegmentResponse(result, headers)  # type: ignore[arg-type]
    release(result)
    return web.Response(body=getattr(result, "data", b""), content_type=media.BATCHES, headers=headers)


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

    def __init__(self, result: SliceResult, headers: dict[str, str]) -> None:
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
                await self._send(request)
            await super().write_eof()
            return writer
        finally:
            self._release()

    async def _send(self, request: web.BaseRequest) -> None:
        loop = asyncio.get_running_loop()
        transport = request.transport
        if transport is None:
            raise ConnectionResetError("connection lost before the fetch answer was sent")
        for s in self._slices:
            with os.fdopen(s.fd, "rb", buffering=0, closefd=False) as f:
                sent = await loop.sendfile(transport, f, s.position, s.length)
            if sent != s.length:
                transport.close()
                raise ConnectionResetError(f"sent {sent} of {s.length} bytes: the segment shrank under the fetch")


def read_committed(request: web.Request) -> bool:
    """The ``isolation`` parameter: read_uncommitted (the default) or read_committed (docs/transactions.md)."""
    level = request.query.get("isolation", READ_UNCOMMITTED)
    if level not in ISOLATION_LEVELS:
        raise InvalidRequestError(f"isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {level[:40]!r}")
    return level == READ_COMMITTED


async def epoch_end_offset(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    part = broker.produce.router.leader(request.match_info["topic"], partition_param(request))
    epoch, end = part.epoch_end_offset(int_param(request, "leader_epoch", minimum=-1))
    return json_response({"leader_epoch": epoch, "end_offset": end})
