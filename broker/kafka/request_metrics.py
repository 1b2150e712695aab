"""The Kafka door's requests in /metrics: counted per API and outcome, timed per API, as the HTTP middleware
counts routes (broker/api/app.py).

Outermost in the dispatch chain, so every request a connection sends is counted, SASL's and throttled ones
included. The API is read from the frame's first two bytes (every request header starts with it), without
decoding anything: an API key Kafka does not define counts as ``unknown``, so a client sending garbage cannot
grow the label set.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from kio.schema.index import api_key_map

from broker.kafka.frames import ResponseFrame
from broker.kafka.network import CloseConnection, Connection, Dispatch

if TYPE_CHECKING:
    from broker.metrics import BrokerMetrics


_API_NAMES = {key: "".join(part.capitalize() for part in name.split("_")) for key, name in api_key_map.items()}


def api_name(frame: bytes) -> str:
    """Kafka's name of the frame's API (``Fetch``, ``OffsetForLeaderEpoch``), or ``unknown``."""
    if len(frame) < 2:
        return "unknown"
    return _API_NAMES.get(int.from_bytes(frame[:2], "big", signed=True), "unknown")


class MeteredDispatch:
    def __init__(self, dispatch: Dispatch, metrics: BrokerMetrics) -> None:
        self._dispatch = dispatch
        self._metrics = metrics
        # The labelled children, looked up once each: ``labels()`` takes a lock and builds a key per call, a
        # cost per request on the hot APIs. Bounded: Kafka's API names plus ``unknown``, times five outcomes.
        self._counters: dict[tuple[str, str], Any] = {}
        self._timers: dict[str, Any] = {}

    async def dispatch(self, conn: Connection, frame: bytes) -> bytes | ResponseFrame | None:
        api = api_name(frame)
        started = time.perf_counter()
        outcome = "failed"
        try:
            response = await self._dispatch(conn, frame)
            outcome = "ok" if response is not None else "no_response"
            return response
        except CloseConnection:
            outcome = "closed"
            raise
        except asyncio.CancelledError:  # the connection went (or the broker stops) while it was served
            outcome = "cancelled"
            raise
        finally:
            counter = self._counters.get((api, outcome))
            if counter is None:
                counter = self._counters[api, outcome] = self._metrics.kafka_requests.labels(api, outcome)
            counter.inc()
            timer = self._timers.get(api)
            if timer is None:
                timer = self._timers[api] = self._metrics.kafka_latency.labels(api)
            timer.observe(time.perf_counter() - started)
