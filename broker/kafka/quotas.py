"""Client quotas on the Kafka door: the broker's ``ClientQuotaManager`` (broker/quotas.py) applied to Produce and
Fetch, answered as Kafka answers them (KIP-219).

Who: the user is the connection's principal (``User:alice`` -> ``alice``; none for ``User:ANONYMOUS``), the client
id the request header's (``client.id``; none is Kafka's empty client id), so the quota that applies, and whose
budget it spends, is chosen by the same KIP-55 precedence as on the HTTP door, from the same
``/config/users``/``/config/clients`` entities: a client using both doors spends one budget. Nothing is exempt
here: the Kafka door carries no inter-broker traffic (replicas fetch over HTTP), and Kafka throttles super
users' clients too.

What is counted, as Kafka counts it: a produce request's size (the whole request frame) against
``producer_byte_rate``; a fetch response's size (the whole response frame) against ``consumer_byte_rate``; and,
for both, the time the broker spent on the request (from the request taken to its answer built, waits included,
as the HTTP door counts it) against ``request_percentage``.

How: the response leaves at once with ``throttle_time_ms`` set to the longest throttle the request earned, and
the connection is muted for that long (broker/kafka/network.py: its next request is not processed before); for
clients older than KIP-219 (Produce below v6, Fetch below v8) the response itself waits, as Kafka does. Unlike
Kafka, a throttled fetch still carries its data (Kafka sends it empty and lets the consumer fetch again): the
token bucket's debt holds the long-run rate either way, and no fetch larger than a quota window can starve.

Cost: with no quota configured anywhere, a request costs one identity check (``ClientQuotaManager.active``).
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
from typing import TYPE_CHECKING, Any

from kio.serial import entity_reader

from broker.kafka import codec, fetch_response
from broker.kafka.codec import FETCH, PRODUCE
from broker.kafka.frames import ResponseFrame
from broker.kafka.network import Connection, Dispatch
from broker.quotas import FETCH as FETCH_RATE
from broker.quotas import PRODUCE as PRODUCE_RATE
from broker.quotas import REQUEST
from broker.security.authorizer import ANONYMOUS
from odradek.protocol.errors import InvalidRequestError

if TYPE_CHECKING:
    from broker.quotas import ClientQuotaManager

KINDS = {PRODUCE: PRODUCE_RATE, FETCH: FETCH_RATE}
# KIP-219: from these versions on, a client throttles itself on throttle_time_ms; older ones are answered late.
CLIENT_THROTTLES_FROM = {PRODUCE: 6, FETCH: 8}


def user_of(principal: str) -> str | None:
    """The quota user of a principal (``User:alice`` -> ``alice``); None for the anonymous one."""
    return None if not principal or principal == ANONYMOUS else principal.removeprefix("User:")


def with_throttle_time(frame: bytes | ResponseFrame, api_key: int, version: int,
                       throttle_ms: int) -> bytes | ResponseFrame:
    """The response ``frame`` (size prefix included) re-encoded with ``throttle_time_ms`` set; unchanged when the
    response has no such field. Only throttled answers pay for it, and those are bounded by the quota.

    A :class:`ResponseFrame` (a Fetch answer with file ranges) is not read back: its first piece, which holds the
    header and the body's first field ``throttle_time_ms``, is rewritten; the new frame names the same file ranges
    and takes them over (the old one is dropped unclosed)."""
    cls = codec.response_class(api_key, version)
    if not codec.has_field(cls, "throttle_time"):
        return frame
    if isinstance(frame, ResponseFrame):
        if api_key != FETCH:
            raise ValueError(f"only a Fetch answer is a frame of pieces, not API {api_key}'s")
        first = bytearray(frame.pieces[0])  # type: ignore[arg-type]
        _THROTTLE.pack_into(first, fetch_response.throttle_position(version), throttle_ms)
        return ResponseFrame([bytes(first), *frame.pieces[1:]], frame.records)
    header, used = _reader(cls.__header_schema__)(frame, 4)
    body, _ = _reader(cls)(frame, 4 + used)
    body = dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return codec.encode_response(api_key, version, int(header.correlation_id), body)


_THROTTLE = struct.Struct(">i")
_READERS: dict[type[Any], Any] = {}


def _reader(cls: type[Any]) -> Any:
    reader = _READERS.get(cls)
    if reader is None:
        reader = _READERS[cls] = entity_reader(cls)
    return reader


class KafkaQuotas:
    """The dispatcher that meters Produce and Fetch in front of ``KafkaApis`` (behind the SASL gate, so the
    principal is known)."""

    def __init__(self, dispatch: Dispatch, quotas: ClientQuotaManager | None) -> None:
        self._dispatch = dispatch
        self._quotas = quotas

    async def dispatch(self, conn: Connection, frame: bytes) -> bytes | ResponseFrame | None:
        quotas = self._quotas
        if quotas is None or not quotas.active():
            return await self._dispatch(conn, frame)
        try:
            header = codec.read_header(frame)
        except InvalidRequestError:
            return await self._dispatch(conn, frame)  # KafkaApis closes the connection
        kind = KINDS.get(header.api_key)
        if kind is None:
            return await self._dispatch(conn, frame)
        user, client_id = user_of(conn.principal), header.client_id or ""
        data, work = quotas.match(kind, user, client_id), quotas.match(REQUEST, user, client_id)
        if data is None and work is None:
            return await self._dispatch(conn, frame)
        started = time.perf_counter()
        response = await self._dispatch(conn, frame)
        throttle_ms = 0
        if data is not None:
            amount = len(frame) if kind == PRODUCE_RATE else len(response or b"")
            throttle_ms = quotas.record_match(data, amount, client_id, user)
        if work is not None:
            throttle_ms = max(throttle_ms, quotas.record_match(work, time.perf_counter() - started, client_id, user))
        if throttle_ms > 0:
            conn.throttle(throttle_ms,
                          hold_response=header.api_version < CLIENT_THROTTLES_FROM[header.api_key])
            if response is not None:
                response = with_throttle_time(response, header.api_key, header.api_version, throttle_ms)
        return response
