"""Forwarding to partition leaders, over the binary path: a broker that does not lead a partition passes the
batch bytes on (produce) or fetches them (reads), so ``curl`` against any broker works."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from odradek.protocol import media
from odradek.protocol.errors import BrokerNotAvailableError, error_for


async def _raise_for_error(resp: aiohttp.ClientResponse) -> None:
    if resp.status < 400:
        return
    raw = await resp.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = {"message": raw[:200].decode("utf-8", "replace")}
    extra = {k: v for k, v in body.items() if k not in ("error", "error_code", "message", "retriable")}
    raise error_for(body.get("error"), body.get("error_code"), body.get("message") or "", **extra)


def _partition_url(leader_url: str, topic: str, partition: int) -> str:
    return f"{leader_url}/topics/{topic}/partitions/{partition}"


async def produce_batches(session: aiohttp.ClientSession, leader_url: str, topic: str, partition: int,
                          data: bytes, acks: str, timeout_ms: int,
                          idempotency_key: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": media.BATCHES}
    if idempotency_key is not None:
        headers[media.IDEMPOTENCY_KEY] = idempotency_key
    try:
        async with session.post(
            f"{_partition_url(leader_url, topic, partition)}/batches",
            params={"acks": acks, "timeout_ms": str(timeout_ms)},
            data=data, headers=headers,
        ) as resp:
            await _raise_for_error(resp)
            return orjson.loads(await resp.read())
    except aiohttp.ClientConnectorError as e:  # never connected: nothing was sent (a TLS failure will not heal)
        extra = {} if isinstance(e, aiohttp.ClientSSLError) else {"sent": False}
        raise BrokerNotAvailableError(f"cannot connect to the leader at {leader_url}: {e}", **extra) from None
    except (aiohttp.ClientConnectionError, TimeoutError) as e:
        # After the request may have gone out (a reset, a dropped keep-alive connection, a timeout): the leader may
        # have appended it, so this is the client's ambiguous failure to retry, never ours (service.retry_is_safe).
        raise BrokerNotAvailableError(f"lost the connection to the leader at {leader_url}, the produce may or may "
                                      f"not have been written: {e}") from None


async def fetch_batches(session: aiohttp.ClientSession, leader_url: str, topic: str, partition: int,
                        offset: int | None, max_bytes: int, timeout_ms: int,
                        committed: bool = False) -> tuple[bytes, dict[str, int]]:
    """The leader's batches from ``offset`` (its log start offset when None) and its offsets (``committed``:
    a read_committed read, whose ``high_watermark`` is then the leader's last stable offset)."""
    params = {"max_bytes": str(max_bytes), "timeout_ms": str(timeout_ms)}
    if committed:
        params["isolation"] = "read_committed"
    if offset is not None:
        params["offset"] = str(offset)
    try:
        async with session.get(f"{_partition_url(leader_url, topic, partition)}/batches", params=params) as resp:
            await _raise_for_error(resp)
            data = await resp.read()
            offsets = {
                "high_watermark": int(resp.headers["Odradek-Last-Stable-Offset" if committed
                                                   else media.HIGH_WATERMARK]),
                "log_start_offset": int(resp.headers[media.LOG_START_OFFSET]),
                "leader": int(resp.headers[media.LEADER]),
            }
            return data, offsets
    except (aiohttp.ClientConnectionError, TimeoutError) as e:
        raise BrokerNotAvailableError(f"cannot reach the leader at {leader_url}: {e}") from None


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    try:
        async with session.get(url) as resp:
            await _raise_for_error(resp)
            return orjson.loads(await resp.read())
    except (aiohttp.ClientConnectionError, TimeoutError) as e:
        raise BrokerNotAvailableError(f"cannot reach {url}: {e}") from None


async def request_json(session: aiohttp.ClientSession, method: str, url: str, data: bytes | None = None, *,
                       headers: dict[str, str] | None = None, timeout_s: float | None = None) -> Any:
    """Any JSON request to another broker (group requests forwarded to their coordinator), with the same error
    translation as above: the remote broker's typed error is raised here."""
    timeout = aiohttp.ClientTimeout(total=timeout_s) if timeout_s is not None else aiohttp.helpers.sentinel
    try:
        async with session.request(method, url, data=data, headers=headers, timeout=timeout) as resp:
            await _raise_for_error(resp)
            raw = await resp.read()
            return orjson.loads(raw) if raw else {}
    except (aiohttp.ClientConnectionError, TimeoutError) as e:
        raise BrokerNotAvailableError(f"cannot reach {url}: {e}") from None
