"""Forwarding to partition leaders and other brokers, over the binary path: a broker that does not lead a
partition passes the batch bytes on (produce) or fetches them (reads), so ``curl`` against any broker works.

Every function here is one request through the broker's ``InterBrokerClient`` (broker/interbroker.py), which
owns the pool, TLS, credentials, timeouts and the decoding of error answers: a remote's typed error is raised
here as that same typed error; an unreachable broker is BROKER_NOT_AVAILABLE (``sent=False`` when nothing left).
"""

from __future__ import annotations

from typing import Any

from broker.interbroker import InterBrokerClient, Request
from odradek.protocol import media


def _partition_path(topic: str, partition: int) -> str:
    return f"/topics/{topic}/partitions/{partition}"


async def produce_batches(client: InterBrokerClient, leader_url: str, topic: str, partition: int,
                          data: bytes, acks: str, timeout_ms: int,
                          idempotency_key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": media.BATCHES}
    if idempotency_key is not None:
        headers[media.IDEMPOTENCY_KEY] = idempotency_key
    reply = await client.send_to(leader_url, Request(
        "POST", f"{_partition_path(topic, partition)}/batches",
        params={"acks": acks, "timeout_ms": str(timeout_ms)}, body=data, headers=headers, wait_ms=timeout_ms))
    return reply.json()  # type: ignore[no-any-return]


async def fetch_batches(client: InterBrokerClient, leader_url: str, topic: str, partition: int,
                        offset: int | None, max_bytes: int, timeout_ms: int,
                        committed: bool = False) -> tuple[bytes, dict[str, int]]:
    """The leader's batches from ``offset`` (its log start offset when None) and its offsets (``committed``:
    a read_committed read, whose ``high_watermark`` is then the leader's last stable offset)."""
    params = {"max_bytes": str(max_bytes), "timeout_ms": str(timeout_ms)}
    if committed:
        params["isolation"] = "read_committed"
    if offset is not None:
        params["offset"] = str(offset)
    reply = await client.send_to(leader_url, Request(
        "GET", f"{_partition_path(topic, partition)}/batches", params=params, wait_ms=timeout_ms))
    offsets = {
        "high_watermark": int(reply.headers["Odradek-Last-Stable-Offset" if committed else media.HIGH_WATERMARK]),
        "log_start_offset": int(reply.headers[media.LOG_START_OFFSET]),
        "leader": int(reply.headers[media.LEADER]),
    }
    return reply.body, offsets


async def get_json(client: InterBrokerClient, url: str) -> Any:
    """GET an absolute URL of another broker (a leader named in an error's ``leader_url`` plus a path)."""
    base, path = _split(url)
    return (await client.send_to(base, Request("GET", path))).json()


async def request_json(client: InterBrokerClient, method: str, url: str, data: bytes | None = None, *,
                       headers: dict[str, str] | None = None, timeout_s: float | None = None) -> Any:
    """Any JSON request to another broker (group requests forwarded to their coordinator)."""
    base, path = _split(url)
    return (await client.send_to(base, Request(method, path, body=data, headers=headers or {},
                                               timeout_s=timeout_s))).json()


def _split(url: str) -> tuple[str, str]:
    """``scheme://host:port`` and the rest (path and query), so the client builds the URL one way."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host}", f"{slash}{path}"
