"""Writing a transaction's markers (COMMIT or ABORT control batches) on the leaders of its partitions.

The coordinator (coordinator.py) is given ``LeaderMarkerWriter.write`` at construction: it calls it once per
partition of a transaction it completes, and a marker is written on the partition's leader, here or on the
broker that leads it (one hop: the leader's ``POST /transactions/markers`` calls ``append(forwarded=True)``,
which never forwards again, so a leadership moving in between is a retriable NOT_LEADER_OR_FOLLOWER, not a loop).

Why protocols and not the broker's classes: this package sits below ``broker`` in the package layers (an
import-linter contract in pyproject.toml). The broker hands over its leader router's ``await_route`` (its
``Partition`` is a ``LocalLeader``, its ``Remote`` a ``RemoteLeader``) and a function that POSTs JSON to another
broker and raises the remote's typed error; unit tests pass small fakes.

Invariants: a marker carries its transaction's coordinator epoch (``TxnState.coordinator_epoch``, capped to int32,
the field's width), so a leader writes each transaction's marker once and refuses an older transaction's (a retry or
a deposed coordinator's late write cannot end the producer's next transaction); one ``append`` is bounded by
``timeout_ms`` (routing and appending share the deadline); ``write`` retries only retriable errors, with a capped
backoff, and after ``attempts`` tries raises the last error. """

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import orjson

from odradek.protocol.errors import NotLeaderOrFollowerError
from odradek.protocol.records.control import ABORT, COMMIT, encode_marker

MARKER_TIMEOUT_MS = 30_000
MARKERS_PATH = "/transactions/markers"
INT32_MAX = 2**31 - 1


class AppendedMarker(Protocol):
    @property
    def first_offset(self) -> int: ...


@runtime_checkable
class LocalLeader(Protocol):
    """This broker's leader replica of the partition: appends a control batch (``kind`` COMMIT or ABORT)."""

    async def append_marker(self, batch: bytes, producer_id: int, producer_epoch: int, kind: int,
                            timeout_ms: int, coordinator_epoch: int = -1) -> AppendedMarker: ...


class RemoteLeader(Protocol):
    """Another broker leads the partition; ``url`` is its base URL."""

    @property
    def url(self) -> str: ...


# (topic, partition, deadline in loop time) -> where the leader is, once there is one (or a routing error).
RouteLeader = Callable[[str, int, float], Awaitable[LocalLeader | RemoteLeader]]
# (url, JSON body, timeout in s) -> the decoded answer; raises the remote broker's typed error.
PostJson = Callable[[str, bytes, float], Awaitable[Any]]


class LeaderMarkerWriter:
    def __init__(self, route: RouteLeader, post_json: PostJson, *, timeout_ms: int = MARKER_TIMEOUT_MS,
                 attempts: int = 20) -> None:
        self._route = route
        self._post_json = post_json
        self._timeout_ms = timeout_ms
        self._attempts = attempts

    async def append(self, topic: str, partition: int, pid: int, epoch: int, commit: bool, coordinator_epoch: int,
                     *, forwarded: bool = False) -> int:
        """Write one marker on the partition's leader, here or (unless ``forwarded``) on the broker that leads
        it; answers the marker's offset (-1: this transaction's marker was there already)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout_ms / 1000
        route = await self._route(topic, partition, deadline)
        if not isinstance(route, LocalLeader):
            if forwarded:
                raise NotLeaderOrFollowerError(f"this broker does not lead {topic}-{partition}")
            answer = await self._post_json(
                f"{route.url}{MARKERS_PATH}",
                orjson.dumps({"topic": topic, "partition": partition, "producer_id": pid, "producer_epoch": epoch,
                              "commit": commit, "coordinator_epoch": coordinator_epoch}),
                self._timeout_ms / 1000 + 5)
            return int(answer["offset"])
        coordinator_epoch = min(coordinator_epoch, INT32_MAX)
        batch = encode_marker(pid, epoch, commit, coordinator_epoch, int(time.time() * 1000))
        remaining_ms = max(1, int((deadline - loop.time()) * 1000))  # at least 1: 0 would mean "do not wait"
        result = await route.append_marker(batch, pid, epoch, COMMIT if commit else ABORT, remaining_ms,
                                           coordinator_epoch)
        return result.first_offset

    async def write(self, topic: str, partition: int, pid: int, epoch: int, commit: bool, coord_epoch: int) -> None:
        """The coordinator's marker writer: retried until written (a leader moving is retriable)."""
        for attempt in range(self._attempts):
            try:
                await self.append(topic, partition, pid, epoch, commit, coord_epoch)
                return
            except Exception as e:
                if not getattr(e, "retriable", False) or attempt == self._attempts - 1:
                    raise
                await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
