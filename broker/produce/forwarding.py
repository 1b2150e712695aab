"""Forwarding to partition leaders and other brokers, over the binary path: a broker that does not lead a
partition passes the batch bytes on (produce) or fetches them (reads), so ``curl`` against any broker works.

Every function here is one request through the broker's ``InterBrokerClient`` (broker/interbroker.py), which
owns the pool, TLS, credentials, timeouts and the decoding of error answers: a remote's typed error is raised
here as that same typed error; an unreachable broker is BROKER_NOT_AVAILABLE (``sent=False`` when nothing left).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.interbroker import InterBrokerClient, Request
from odradek.protocol import media

# A request one broker passed on to another (a coordinator's or the controller's work): the receiver answers it
# itself or refuses it (NOT_COORDINATOR, NOT_CONTROLLER), never passes it on again, so no request bounces.
FORWARDED = "Odradek-Forwarded"
COORDINATOR = "Odradek-Coordinator"  # the broker that coordinated a group's or transactional id's request
LAST_STABLE_OFFSET = "Odradek-Last-Stable-Offset"  # the binary fetch answer's LSO (beside media.HIGH_WATERMARK)


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


@dataclass(frozen=True, slots=True)
class RemoteBatches:
    """A leader's binary fetch answer: its batches and the offsets its headers carry (read after its read)."""

    data: bytes
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int
    leader: int


def _header(headers: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = headers.get(name)
    if raw is None:
        if default is None:
            raise KeyError(f"the answer has no {name} header")
        return default
    return int(raw)


async def fetch_remote(client: InterBrokerClient, leader_url: str, topic: str, partition: int,
                       offset: int | None, max_bytes: int, timeout_ms: int,
                       committed: bool = False) -> RemoteBatches:
    """The leader's batches from ``offset`` (its log start offset when None), read_committed when
    ``committed``, with its offsets."""
    params = {"max_bytes": str(max_bytes), "timeout_ms": str(timeout_ms)}
    if committed:
        params["isolation"] = "read_committed"
    if offset is not None:
        params["offset"] = str(offset)
    reply = await client.send_to(leader_url, Request(
        "GET", f"{_partition_path(topic, partition)}/batches", params=params, wait_ms=timeout_ms))
    headers = reply.headers
    hw = _header(headers, media.HIGH_WATERMARK)
    return RemoteBatches(
        reply.body, hw, _header(headers, LAST_STABLE_OFFSET, hw), _header(headers, media.LOG_START_OFFSET),
        _header(headers, media.LOG_END_OFFSET, -1), _header(headers, media.LEADER_EPOCH, -1),
        _header(headers, media.LEADER))


async def fetch_batches(client: InterBrokerClient, leader_url: str, topic: str, partition: int,
                        offset: int | None, max_bytes: int, timeout_ms: int,
                        committed: bool = False) -> tuple[bytes, dict[str, int]]:
    """:func:`fetch_remote` as bytes and a dict of offsets (``committed``: a read_committed read, whose
    ``high_watermark`` is then the leader's last stable offset)."""
    remote = await fetch_remote(client, leader_url, topic, partition, offset, max_bytes, timeout_ms, committed)
    offsets = {
        "high_watermark": remote.last_stable_offset if committed else remote.high_watermark,
        "log_start_offset": remote.log_start_offset,
        "leader": remote.leader,
    }
    return remote.data, offsets


async def list_offsets(client: InterBrokerClient, leader_url: str, topic: str, partition: int, *,
                       committed: bool = False, timestamp: int | None = None) -> Any:
    """The leader's offsets answer for a partition (``GET .../offsets``): its JSON object."""
    params: dict[str, str] = {}
    if committed:
        params["isolation"] = "read_committed"
    if timestamp is not None:
        params["timestamp"] = str(timestamp)
    reply = await client.send_to(leader_url, Request("GET", f"{_partition_path(topic, partition)}/offsets",
                                                     params=params or None))
    return reply.json()


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
