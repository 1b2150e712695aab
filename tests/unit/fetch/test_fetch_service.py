"""The fetch service (broker/fetch/service.py) against fakes of its collaborators: a leader router that hands out
partition doubles or remote leaders, a follower-fetch service double, and the fake inter-broker client. Which read
a request gets (consumer, read_committed, follower), what the answer carries, and how the REST read forwards and
waits out leader changes."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.fetch.service import (
    READ_COMMITTED,
    AbortedTransaction,
    FetchRequest,
    FetchService,
    FileRecords,
    ReplicaFetch,
)
from broker.log.log import ReadResult
from broker.log.reads import FileSlice, SliceResult
from broker.produce.forwarding import LAST_STABLE_OFFSET
from broker.produce.routing import Remote
from broker.replication.follower_fetch import FollowerFetch
from odradek.protocol import media
from odradek.protocol.errors import (
    FencedLeaderEpochError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from tests.unit.fakes.interbroker import FakeInterBroker, reply

T = TypeVar("T")
ME = 1


def run(aw: Awaitable[T]) -> T:
    async def main() -> T:
        return await aw

    return asyncio.run(main())


class FakePartition:
    """A leader replica's read API. Its high watermark moves during every read, so an answer's offsets show
    whether they were taken after the read."""

    topic, partition = "t", 0

    def __init__(self, result: Any = None) -> None:
        self.leader_epoch, self.log_start_offset, self.log_end_offset = 5, 2, 20
        self.high_watermark, self.first_unstable = 15, 12
        self.result = result if result is not None else ReadResult(b"batches", 9, 2, 20)
        self.reads: list[tuple[Any, ...]] = []
        self.failures: list[Exception] = []

    @property
    def last_stable_offset(self) -> int:
        return min(self.first_unstable, self.high_watermark)

    async def read(self, offset: int, max_bytes: int, timeout_ms: int, stable: bool = False,
                   zero_copy: bool = False) -> Any:
        self.reads.append(("read", offset, max_bytes, timeout_ms, zero_copy))
        if self.failures:
            raise self.failures.pop(0)
        self.high_watermark += 1
        return self.result

    async def read_committed(self, offset: int, max_bytes: int, timeout_ms: int) -> ReadResult:
        self.reads.append(("read_committed", offset, max_bytes, timeout_ms))
        return ReadResult(b"committed", offset + 4, 2, 20)

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int, int]]:
        self.reads.append(("aborted_between", start, end))
        return [(70, 3, 5)]

    def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        return (min(epoch, self.leader_epoch), 11)


class FakeRouter:
    """Answers each look with the next route given (a partition, a Remote, or an error to raise)."""

    broker_id = ME

    def __init__(self, *routes: Any) -> None:
        self.routes = list(routes)
        self.looks: list[str] = []
        self.waits = 0

    def _next(self) -> Any:
        route = self.routes.pop(0) if len(self.routes) > 1 else self.routes[0]
        if isinstance(route, Exception):
            raise route
        return route

    async def await_leader(self, topic: str, partition: int, deadline: float) -> Any:
        self.looks.append("await_leader")
        route = self._next()
        if isinstance(route, Remote):
            raise NotLeaderOrFollowerError(f"broker {route.leader} is", leader=route.leader)
        return route

    async def await_route(self, topic: str, partition: int, deadline: float) -> Any:
        self.looks.append("await_route")
        return self._next()

    def leader(self, topic: str, partition: int) -> Any:
        return self._next()

    async def wait_for_change(self, deadline: float) -> bool:
        self.waits += 1
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(0.001)
        return True


class FakeFollowerFetches:
    def __init__(self) -> None:
        self.fetches: list[tuple[Any, FollowerFetch, bool]] = []

    async def fetch(self, part: Any, fetch: FollowerFetch, *, zero_copy: bool = True) -> ReadResult:
        self.fetches.append((part, fetch, zero_copy))
        return ReadResult(b"for-follower", fetch.offset + 1, 2, 20)


def _service(router: FakeRouter, interbroker: FakeInterBroker | None = None
             ) -> tuple[FetchService, FakeFollowerFetches, FakeInterBroker]:
    followers, ib = FakeFollowerFetches(), interbroker or FakeInterBroker()
    return FetchService(ME, router, followers, ib), followers, ib  # type: ignore[arg-type]


def test_a_consumer_fetch_reads_from_the_log_start_with_offsets_taken_after_the_read() -> None:
    part = FakePartition()
    service, _, _ = _service(FakeRouter(part))
    data = run(service.fetch(FetchRequest("t", 0, max_bytes=100, max_wait_ms=50), zero_copy=True))
    assert part.reads == [("read", 2, 100, 50, True)]  # offset None: the log start offset
    assert (data.fetch_offset, data.records, data.high_watermark) == (2, b"batches", 16)  # 16: after the read
    assert (data.last_stable_offset, data.log_start_offset, data.log_end_offset) == (12, 2, 20)
    assert (data.leader_epoch, data.leader, data.aborted_transactions) == (5, ME, ())


def test_min_bytes_zero_answers_at_once_whatever_the_max_wait() -> None:
    part = FakePartition()
    service, _, _ = _service(FakeRouter(part))
    run(service.fetch(FetchRequest("t", 0, offset=4, max_wait_ms=500, min_bytes=0)))
    assert part.reads == [("read", 4, FetchRequest("t", 0).max_bytes, 0, False)]


def test_a_read_committed_fetch_reads_below_the_lso_as_bytes_and_names_the_aborted_transactions() -> None:
    part = FakePartition()
    service, _, _ = _service(FakeRouter(part))
    data = run(service.fetch(FetchRequest("t", 0, offset=3, max_bytes=10, isolation_level=READ_COMMITTED)))
    assert part.reads == [("read_committed", 3, 10, 0), ("aborted_between", 3, 7)]
    assert data.records == b"committed" and data.aborted_transactions == (AbortedTransaction(70, 3),)
    # Zero copy: the stable read is looked at first; an aborted transaction in its range sends the fetch to the
    # filtered read, in bytes, as without zero copy.
    part.reads.clear()
    data = run(service.fetch(FetchRequest("t", 0, offset=3, max_bytes=10, isolation_level=READ_COMMITTED),
                             zero_copy=True))
    assert part.reads == [("read", 3, 10, 0, True), ("aborted_between", 3, 9), ("read_committed", 3, 10, 0),
                          ("aborted_between", 3, 7)]
    assert data.records == b"committed" and data.aborted_transactions == (AbortedTransaction(70, 3),)


def test_a_read_committed_zero_copy_fetch_with_no_aborted_transaction_is_the_stable_read_as_file_ranges(
        tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(b"x" * 100)
    ranges = SliceResult((FileSlice(os.open(path, os.O_RDONLY), 10, 40),), 9, 2, 20)
    stable_reads: list[bool] = []

    class NothingAborted(FakePartition):
        async def read(self, offset: int, max_bytes: int, timeout_ms: int, stable: bool = False,
                       zero_copy: bool = False) -> Any:
            stable_reads.append(stable)
            return await super().read(offset, max_bytes, timeout_ms, stable, zero_copy)

        def aborted_between(self, start: int, end: int) -> list[tuple[int, int, int]]:
            self.reads.append(("aborted_between", start, end))
            return []

    part = NothingAborted(ranges)
    service, _, _ = _service(FakeRouter(part))
    data = run(service.fetch(FetchRequest("t", 0, offset=3, max_bytes=10, max_wait_ms=30,
                                          isolation_level=READ_COMMITTED), zero_copy=True))
    assert part.reads == [("read", 3, 10, 30, True), ("aborted_between", 3, 9), ("aborted_between", 3, 9)]
    assert stable_reads == [True]  # below the LSO, as read_committed reads
    assert data.records is ranges and data.aborted_transactions == ()
    data.close()


def test_a_follower_fetch_goes_through_the_follower_fetch_service_with_the_leaders_epoch_by_default() -> None:
    part = FakePartition()
    service, followers, _ = _service(FakeRouter(part))
    request = FetchRequest("t", 0, offset=8, max_bytes=64, max_wait_ms=30, isolation_level=READ_COMMITTED,
                           replica=ReplicaFetch(2, 102))
    data = run(service.fetch(request, zero_copy=True))
    assert followers.fetches == [(part, FollowerFetch(2, 102, 5, 8, 64, 30), True)]
    assert part.reads == [] and data.records == b"for-follower"  # isolation does not apply to followers
    run(service.fetch(FetchRequest("t", 0, offset=8, replica=ReplicaFetch(2, 102, leader_epoch=6))))
    assert followers.fetches[-1][1].leader_epoch == 6  # the follower's claim is what is validated


def test_file_ranges_are_returned_only_when_there_is_something_to_send(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(b"x" * 100)
    fd = os.open(path, os.O_RDONLY)
    ranges = SliceResult((FileSlice(fd, 10, 40),), 9, 2, 20)
    service, _, _ = _service(FakeRouter(FakePartition(ranges)))
    data = run(service.fetch(FetchRequest("t", 0), zero_copy=True))
    assert isinstance(data.records, FileRecords) and data.size == 40
    data.close()
    with pytest.raises(OSError):
        os.fstat(fd)  # the duplicated descriptor is released with the answer
    empty, _, _ = _service(FakeRouter(FakePartition(SliceResult((), 2, 2, 20))))
    assert run(empty.fetch(FetchRequest("t", 0), zero_copy=True)).records == b""


def test_fetch_is_leader_only() -> None:
    service, _, ib = _service(FakeRouter(Remote(2, "http://b2")))
    with pytest.raises(NotLeaderOrFollowerError):
        run(service.fetch(FetchRequest("t", 0)))
    assert ib.sent == []


def test_a_rest_read_is_forwarded_once_to_the_remote_leader_with_its_isolation() -> None:
    headers = {media.HIGH_WATERMARK: "30", LAST_STABLE_OFFSET: "28", media.LOG_START_OFFSET: "7",
               media.LOG_END_OFFSET: "31", media.LEADER_EPOCH: "9", media.LEADER: "2"}
    ib = FakeInterBroker(answer=lambda sent: reply(raw=b"remote-batches", headers=headers))
    service, _, _ = _service(FakeRouter(Remote(2, "http://b2")), ib)
    data = run(service.fetch_anywhere(FetchRequest("t", 0, max_bytes=5, isolation_level=READ_COMMITTED)))
    [sent] = ib.sent
    assert sent.where == "http://b2" and sent.request.path == "/topics/t/partitions/0/batches"
    assert dict(sent.request.params or {}) == {"max_bytes": "5", "timeout_ms": "0", "isolation": "read_committed"}
    assert (data.records, data.fetch_offset, data.high_watermark, data.last_stable_offset) == (b"remote-batches", 7,
                                                                                                30, 28)
    assert (data.log_end_offset, data.leader_epoch, data.leader) == (31, 9, 2)


def test_a_rest_read_waits_out_a_leadership_that_moved_until_its_deadline() -> None:
    part = FakePartition()
    part.failures.append(NotLeaderOrFollowerError("lost leadership", leader=2))
    router = FakeRouter(part)
    service, _, _ = _service(router)
    data = run(service.fetch_anywhere(FetchRequest("t", 0, offset=3, max_wait_ms=5_000)))
    assert router.waits == 1 and data.records == b"batches" and len(part.reads) == 2
    # At its deadline, the routing error itself comes back (retriable for the client); a zero wait looks once.
    part = FakePartition()
    part.failures.extend(NotLeaderOrFollowerError("lost leadership", leader=2) for _ in range(10_000))
    router = FakeRouter(part)
    service, _, _ = _service(router)
    with pytest.raises(NotLeaderOrFollowerError):
        run(service.fetch_anywhere(FetchRequest("t", 0, max_wait_ms=20)))
    assert router.waits >= 2
    router = FakeRouter(part)
    service, _, _ = _service(router)
    with pytest.raises(NotLeaderOrFollowerError):
        run(service.fetch_anywhere(FetchRequest("t", 0)))
    assert router.looks == ["await_route"]


def test_requests_are_checked_when_built() -> None:
    with pytest.raises(InvalidRequestError, match="isolation must be one of"):
        FetchRequest("t", 0, isolation_level="dirty")
    service, _, _ = _service(FakeRouter(FakePartition()))
    with pytest.raises(InvalidRequestError):
        run(service.fetch_anywhere(FetchRequest("t", 0, replica=ReplicaFetch(2))))


def test_epoch_end_offset_is_the_leaders() -> None:
    service, _, _ = _service(FakeRouter(FakePartition()))
    answer = service.epoch_end_offset("t", 0, 3)
    assert (answer.leader_epoch, answer.end_offset) == (3, 11)


def test_a_consumers_leader_epoch_is_checked_before_reading_and_asking_an_epochs_end() -> None:
    """KIP-320: an epoch older than the leader's (5) is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH."""
    part = FakePartition()
    service, _, _ = _service(FakeRouter(part))
    for epoch, error in ((4, FencedLeaderEpochError), (6, UnknownLeaderEpochError)):
        with pytest.raises(error):
            run(service.fetch(FetchRequest("t", 0, 3, current_leader_epoch=epoch)))
        with pytest.raises(error):
            service.epoch_end_offset("t", 0, 3, current_leader_epoch=epoch)
    assert part.reads == []
    assert run(service.fetch(FetchRequest("t", 0, 3, current_leader_epoch=5))).records == b"batches"
    assert service.epoch_end_offset("t", 0, 3, current_leader_epoch=5).end_offset == 11
    # a follower's fetch is checked by the follower-fetch service (its own rules), not here
    run(service.fetch(FetchRequest("t", 0, 3, replica=ReplicaFetch(2), current_leader_epoch=4)))
