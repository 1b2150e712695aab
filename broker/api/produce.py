"""POST /topics/{t}[/partitions/{p}] (REST Proxy v2 JSON produce) and POST .../batches (binary path).

Both wait, within the request's ``timeout_ms``, for a topic this broker has not heard of yet (when ZooKeeper
knows it) and for a leader to be elected and active (see broker/produce/routing.py). The JSON path then
forwards to another broker's leadership; the binary path is leader-only and names the leader instead.
"""

from __future__ import annotations

from aiohttp import web

from broker.admin.topics import validate_topic_name
from broker.api.context import BROKER, json_response
from broker.api.embedded import parse_produce_body, produce_format, record_error, require_supported
from broker.api.params import int_param, partition_param
from broker.produce.routing import deadline_after, remaining_ms
from broker.produce.service import parse_acks
from odradek.protocol import media
from odradek.protocol.errors import UnsupportedMediaTypeError


async def produce_json(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    validate_topic_name(topic)
    fixed = partition_param(request) if "partition" in request.match_info else None
    fmt = produce_format(request.content_type)
    acks = parse_acks(request.query.get("acks"))
    timeout_ms = int_param(request, "timeout_ms", 30000)
    rows, named = parse_produce_body(await request.read(), fmt)
    deadline = deadline_after(timeout_ms)
    await broker.produce.router.await_topic(topic, deadline)
    require_supported(fmt, topic, topic_exists=True)  # schema formats: 422, but only once the topic is known
    partitions = broker.produce.choose_partitions(topic, rows, named, fixed)
    results = await broker.produce.produce(topic, rows, partitions, acks, timeout_ms, deadline)
    seen: dict[int, int] = {}
    offsets = []
    for p in partitions:
        r = results[p]
        index = seen.get(p, 0)
        seen[p] = index + 1
        if r.error is not None:
            offsets.append({"partition": p, "offset": None, **record_error(r.error)})
        else:
            offset = None if acks == 0 or r.base_offset is None or r.base_offset < 0 else r.base_offset + index
            offsets.append({"partition": p, "offset": offset, "error_code": None, "error": None})
    leaders = sorted({r.leader for r in results.values() if r.leader is not None})
    response = json_response({"key_schema_id": None, "value_schema_id": None, "offsets": offsets},
                             content_type=media.KAFKA_V2)
    if leaders:
        response.headers[media.LEADER] = ",".join(map(str, leaders))
    return response


async def produce_batches(request: web.Request) -> web.Response:
    broker = request.app[BROKER]
    topic = request.match_info["topic"]
    partition = partition_param(request)
    if request.content_type != media.BATCHES:
        raise UnsupportedMediaTypeError(f"the batch path takes {media.BATCHES}, not {request.content_type}")
    acks = parse_acks(request.query.get("acks"))
    timeout_ms = int_param(request, "timeout_ms", 30000)
    data = bytearray(await request.read())
    deadline = deadline_after(timeout_ms)
    part = await broker.produce.router.await_leader(topic, partition, deadline)
    result = await part.append(data, acks, remaining_ms(deadline))
    return json_response({
        "topic": topic, "partition": partition, "base_offset": result.first_offset,
        "last_offset": result.last_offset, "record_count": result.record_count,
        "log_append_time": result.log_append_time, "leader": broker.broker_id, "leader_epoch": part.leader_epoch,
    })
