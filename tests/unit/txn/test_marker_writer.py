"""The transaction marker writer (transaction_coordinator/marker_writer.py) against fakes of what the broker hands
it: a leader route (a local leader, or another broker's URL) and a JSON POST to another broker."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from odradek.protocol.errors import InvalidRequestError, NotLeaderOrFollowerError
from odradek.protocol.records.control import ABORT, COMMIT, read_marker
from transaction_coordinator.marker_writer import LeaderMarkerWriter


@dataclass
class Appended:
    first_offset: int


class Leader:
    def __init__(self) -> None:
        self.appends: list[tuple[int, int, int, int]] = []

    async def append_marker(self, batch: bytes, producer_id: int, producer_epoch: int, kind: int,
                            timeout_ms: int, coordinator_epoch: int = -1) -> Appended:
        assert batch and 0 < timeout_ms <= 30_000
        assert read_marker(batch, 0) == (kind, coordinator_epoch)  # the batch says what the call says
        self.appends.append((producer_id, producer_epoch, kind, timeout_ms))
        return Appended(41)


@dataclass(frozen=True)
class Remote:
    url: str


def _writer(routes: list[Any], posts: list[tuple[str, dict[str, Any], float]]) -> LeaderMarkerWriter:
    async def route(topic: str, partition: int, deadline: float) -> Any:
        step = routes.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    async def post(url: str, body: bytes, timeout_s: float) -> Any:
        posts.append((url, orjson.loads(body), timeout_s))
        return {"offset": 7}

    return LeaderMarkerWriter(route, post)


def test_a_marker_for_a_local_leadership_is_appended_here() -> None:
    leader = Leader()
    posts: list[Any] = []
    assert asyncio.run(_writer([leader, leader], posts).append("t", 0, 5, 1, True, 3)) == 41
    asyncio.run(_writer([leader], posts).append("t", 0, 5, 1, False, 2**40))  # epoch capped to int32, no error
    assert [(a[0], a[1], a[2]) for a in leader.appends] == [(5, 1, COMMIT), (5, 1, ABORT)] and posts == []


def test_a_marker_for_another_brokers_leadership_is_forwarded_once() -> None:
    posts: list[Any] = []
    writer = _writer([Remote("http://b2"), Remote("http://b2")], posts)
    assert asyncio.run(writer.append("t", 1, 5, 1, True, 3)) == 7
    assert posts == [("http://b2/transactions/markers", {"topic": "t", "partition": 1, "producer_id": 5,
                                                         "producer_epoch": 1, "commit": True, "coordinator_epoch": 3},
                      35.0)]
    with pytest.raises(NotLeaderOrFollowerError):  # the leader's own endpoint never forwards again
        asyncio.run(writer.append("t", 1, 5, 1, True, 3, forwarded=True))


def test_write_retries_retriable_errors_and_raises_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(delay: float) -> None:
        return None

    monkeypatch.setattr(asyncio, "sleep", no_sleep)
    leader = Leader()
    moved = NotLeaderOrFollowerError("moved")
    asyncio.run(_writer([moved, moved, leader], []).write("t", 0, 5, 1, True, 3))
    assert len(leader.appends) == 1
    with pytest.raises(InvalidRequestError):
        asyncio.run(_writer([InvalidRequestError("bad"), leader], []).write("t", 0, 5, 1, True, 3))
    assert len(leader.appends) == 1
    with pytest.raises(NotLeaderOrFollowerError):  # gives up after its attempts
        asyncio.run(_writer([moved] * 20, []).write("t", 0, 5, 1, True, 3))
