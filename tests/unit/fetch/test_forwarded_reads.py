"""The coalescer of forwarded reads (broker/fetch/forwarded_reads.py) against a fake leader: identical waiting
reads share one upstream read, different reads never do, a waiter that leaves does not take the others' read
with it, an upstream error reaches every waiter, each waiter is answered by its own deadline, and the number of
upstream long-polls is bounded (beyond it, a long-poll waits for room holding no connection, and reads once at
its deadline if none came)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from broker.fetch.forwarded_reads import GRACE_S, ForwardedReads, ReadKey
from broker.fetch.service import READ_COMMITTED, FetchRequest, FetchService
from broker.produce.forwarding import LAST_STABLE_OFFSET, RemoteBatches
from broker.produce.routing import Remote
from odradek.protocol import media
from odradek.protocol.errors import BrokerNotAvailableError, OffsetOutOfRangeError
from tests.unit.fakes.interbroker import FakeInterBroker, reply

T = TypeVar("T")

KEY = ReadKey("http://b2", "t", 0, 5, 1024, committed=False)
SLACK_S = 2.0  # scheduling slack on a busy machine: far below any long-poll these tests would sit out


def run(aw: Awaitable[T]) -> T:
    async def main() -> T:
        return await aw

    return asyncio.run(main())


def batches(data: bytes, hw: int = 5) -> RemoteBatches:
    return RemoteBatches(data, hw, hw, 0, hw, 3, 2)


class FakeLeader:
    """A leader's binary fetch: answers at once when records are there for the key's offset, else parks up to the
    read's ``poll_ms`` and answers empty. ``produce`` appends (and wakes parked reads); ``fail`` makes every read
    raise that error; ``calls`` records each upstream read (key, poll_ms)."""

    def __init__(self) -> None:
        self.records: dict[ReadKey, bytes] = {}
        self.calls: list[tuple[ReadKey, int]] = []
        self.cancelled = 0
        self.fail: Exception | None = None
        self._appended = asyncio.Event()

    def produce(self, key: ReadKey, data: bytes) -> None:
        self.records[key] = data
        self._appended.set()
        self._appended = asyncio.Event()

    async def read(self, key: ReadKey, poll_ms: int) -> RemoteBatches:
        self.calls.append((key, poll_ms))
        try:
            if key not in self.records and poll_ms > 0:
                deadline = asyncio.get_running_loop().time() + poll_ms / 1000
                while key not in self.records:
                    remaining = deadline - asyncio.get_running_loop().time()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(self._appended.wait(), remaining)
                    except TimeoutError:
                        break
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.fail is not None:
            raise self.fail
        return batches(self.records.get(key, b""))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_identical_waiters_share_one_upstream_read_and_its_bytes() -> None:
    async def main() -> None:
        leader = FakeLeader()
        reads = ForwardedReads(leader.read)
        waiters = [asyncio.create_task(reads.read(KEY, 5_000)) for _ in range(1000)]
        await settle()
        assert reads.flights() == 1 and reads.long_flights == 1
        leader.produce(KEY, b"the-record")
        answers = await asyncio.wait_for(asyncio.gather(*waiters), SLACK_S)
        assert len(leader.calls) == 1 and leader.calls[0][0] == KEY and reads.started == 1
        assert all(a is answers[0] for a in answers) and answers[0].data == b"the-record"  # shared, not copied
        assert reads.flights() == 0 and reads.long_flights == 0  # nothing kept once answered

    run(main())


def test_reads_that_differ_in_what_the_leader_answers_never_share() -> None:
    keys = [KEY, ReadKey("http://b2", "t", 0, 6, 1024, False), ReadKey("http://b2", "t", 0, 5, 1, False),
            ReadKey("http://b2", "t", 0, 5, 1024, True), ReadKey("http://b3", "t", 0, 5, 1024, False),
            ReadKey("http://b2", "t", 1, 5, 1024, False), ReadKey("http://b2", "u", 0, 5, 1024, False),
            ReadKey("http://b2", "t", 0, None, 1024, False)]

    async def main() -> None:
        leader = FakeLeader()
        reads = ForwardedReads(leader.read)
        waiters = {k: [asyncio.create_task(reads.read(k, 5_000)) for _ in range(3)] for k in keys}
        await settle()
        assert sorted(map(repr, (c[0] for c in leader.calls))) == sorted(map(repr, keys))  # one call per key
        for i, k in enumerate(keys):
            leader.produce(k, b"for-%d" % i)
        for i, k in enumerate(keys):
            answers = await asyncio.wait_for(asyncio.gather(*waiters[k]), SLACK_S)
            assert {a.data for a in answers} == {b"for-%d" % i}  # each gets only what it asked for
        assert len(leader.calls) == len(keys)

    run(main())


def test_a_waiter_that_leaves_does_not_cancel_the_others_read() -> None:
    async def main() -> None:
        leader = FakeLeader()
        reads = ForwardedReads(leader.read)
        waiters = [asyncio.create_task(reads.read(KEY, 5_000)) for _ in range(10)]
        await settle()
        waiters[0].cancel()  # the first, who started the upstream read: its client went away
        waiters[5].cancel()
        await settle()
        assert waiters[0].cancelled() and waiters[5].cancelled()
        assert leader.cancelled == 0 and reads.flights() == 1
        leader.produce(KEY, b"still-answered")
        answers = await asyncio.wait_for(asyncio.gather(*(w for i, w in enumerate(waiters) if i not in (0, 5))),
                                         SLACK_S)
        assert [a.data for a in answers] == [b"still-answered"] * 8 and len(leader.calls) == 1

        # When every waiter has left, the upstream read is cancelled (its connection freed) and forgotten.
        other = ReadKey("http://b2", "t", 0, 9, 1024, False)
        alone = [asyncio.create_task(reads.read(other, 5_000)) for _ in range(3)]
        await settle()
        for w in alone:
            w.cancel()
        await settle()
        assert leader.cancelled == 1 and reads.flights() == 0 and reads.long_flights == 0

    run(main())


def test_an_upstream_error_reaches_every_waiter_each_with_its_own_copy() -> None:
    async def main() -> None:
        leader = FakeLeader()
        leader.fail = OffsetOutOfRangeError("offset 5 is out of range", log_start_offset=7, log_end_offset=9)
        reads = ForwardedReads(leader.read)
        waiters = [asyncio.create_task(reads.read(KEY, 0)) for _ in range(50)]
        results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), SLACK_S)
        assert len(leader.calls) == 1
        assert all(isinstance(e, OffsetOutOfRangeError) and e.details == {"log_start_offset": 7, "log_end_offset": 9}
                   and e.message == "offset 5 is out of range" for e in results)
        assert len({id(e) for e in results}) == 50  # raised in 50 tasks: 50 objects, 50 short tracebacks
        assert reads.flights() == 0

        # A long-poll's error too (the leader unreachable mid-wait), to every waiter of that flight.
        leader.fail = BrokerNotAvailableError("lost the connection to http://b2")
        waiters = [asyncio.create_task(reads.read(KEY, 200)) for _ in range(20)]
        results = await asyncio.wait_for(asyncio.gather(*waiters, return_exceptions=True), SLACK_S)
        assert len(leader.calls) == 2 and all(isinstance(e, BrokerNotAvailableError) for e in results)

    run(main())


def test_each_waiter_is_answered_by_its_own_deadline_and_later_ones_poll_again_as_one() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        leader = FakeLeader()
        reads = ForwardedReads(leader.read)
        long = asyncio.create_task(reads.read(KEY, 30_000))
        await settle()
        # A shorter long-poll cannot join a read that ends 30 s from now: it gets one of its own, ending at its
        # deadline, and answers empty then, not after 30 s.
        start = loop.time()
        short = await asyncio.wait_for(reads.read(KEY, 200), SLACK_S + 0.2)
        took = loop.time() - start
        assert short.data == b"" and 0.15 <= took < 0.2 + GRACE_S + SLACK_S
        assert [c[1] for c in leader.calls][:1] == [30_000] and len(leader.calls) == 2
        assert not long.done()

        # 100 waiters whose deadlines are later than the flight they join: answered empty by it, they poll
        # again as one (one more upstream read), and that one brings them the record.
        leader.calls.clear()
        first = asyncio.create_task(reads.read(ReadKey("http://b2", "t", 0, 6, 1024, False), 100))
        await settle()
        later = [asyncio.create_task(reads.read(ReadKey("http://b2", "t", 0, 6, 1024, False), 2_000))
                 for _ in range(100)]
        assert (await asyncio.wait_for(first, SLACK_S)).data == b""
        await asyncio.sleep(0.05)
        leader.produce(ReadKey("http://b2", "t", 0, 6, 1024, False), b"late")
        answers = await asyncio.wait_for(asyncio.gather(*later), SLACK_S)
        assert {a.data for a in answers} == {b"late"} and len(leader.calls) == 2
        assert leader.calls[0][1] == 100 and 0 < leader.calls[1][1] <= 2_000
        long.cancel()

    run(main())


def test_a_read_without_a_wait_never_waits_for_a_long_poll_under_way() -> None:
    async def main() -> None:
        leader = FakeLeader()
        reads = ForwardedReads(leader.read, max_flights=1)
        long = asyncio.create_task(reads.read(KEY, 30_000))
        await settle()
        now = await asyncio.wait_for(reads.read(KEY, 0), SLACK_S)  # not counted against the cap either
        assert now.data == b"" and [c[1] for c in leader.calls] == [30_000, 0]
        long.cancel()

    run(main())


def test_long_polls_beyond_the_cap_wait_for_room_without_a_connection() -> None:
    async def main() -> None:
        leader = FakeLeader()
        reads = ForwardedReads(leader.read, max_flights=2)
        keys = [ReadKey("http://b2", "t", p, 5, 1024, False) for p in range(3)]
        held = [asyncio.create_task(reads.read(k, 30_000)) for k in keys[:2]]
        await settle()
        joined = asyncio.create_task(reads.read(keys[0], 30_000))  # a key under way: joins, whatever the cap
        queued = [asyncio.create_task(reads.read(keys[2], 30_000)) for _ in range(2)]
        await settle()
        assert len(leader.calls) == 2 and reads.long_flights == 2 and reads.queued == 2
        assert not any(t.done() for t in [*held, joined, *queued])
        leader.produce(keys[0], b"k0")  # a flight ends: room for one more, which both queued reads share
        assert {(await asyncio.wait_for(t, SLACK_S)).data for t in (held[0], joined)} == {b"k0"}
        await settle()
        assert len(leader.calls) == 3 and leader.calls[2][0] == keys[2] and reads.queued == 0
        leader.produce(keys[2], b"k2")
        assert [(await asyncio.wait_for(t, SLACK_S)).data for t in queued] == [b"k2", b"k2"]
        assert len(leader.calls) == 3
        held[1].cancel()

    run(main())


def test_a_long_poll_that_never_finds_room_is_answered_at_its_deadline() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        leader = FakeLeader()
        reads = ForwardedReads(leader.read, max_flights=1)
        held = asyncio.create_task(reads.read(KEY, 30_000))
        await settle()
        other = ReadKey("http://b2", "t", 1, 5, 1024, False)
        leader.records[other] = b"there-all-along"  # reached only by the read at its deadline
        start = loop.time()
        answer = await asyncio.wait_for(reads.read(other, 300), SLACK_S + 0.3)
        assert answer.data == b"there-all-along" and 0.25 <= loop.time() - start < 0.3 + SLACK_S
        assert [c[1] for c in leader.calls] == [30_000, 0]  # one read without a wait, not a long-poll
        assert reads.long_flights == 1 and not held.done()
        held.cancel()

    run(main())


# ----------------------------------------------------------------------------- through the fetch service


class RemoteRouter:
    """Every partition is led by broker 2 at http://b2."""

    broker_id = 1

    async def await_route(self, topic: str, partition: int, deadline: float) -> Any:
        return Remote(2, "http://b2")


HEADERS = {media.HIGH_WATERMARK: "30", LAST_STABLE_OFFSET: "28", media.LOG_START_OFFSET: "7",
           media.LOG_END_OFFSET: "31", media.LEADER_EPOCH: "9", media.LEADER: "2"}


def test_the_fetch_service_forwards_identical_concurrent_reads_once() -> None:
    ib = FakeInterBroker(answer=lambda sent: reply(raw=b"batches", headers=HEADERS))
    service = FetchService(1, RemoteRouter(), None, ib)  # type: ignore[arg-type]

    async def main() -> list[Any]:
        return await asyncio.gather(*(service.fetch_anywhere(FetchRequest("t", 0, 30, isolation_level=level))
                                      for level in ["read_uncommitted"] * 100 + [READ_COMMITTED] * 100))

    answers = run(main())
    assert len(ib.sent) == 2  # one per isolation level, whatever the number of waiting reads
    assert {a.records for a in answers} == {b"batches"} and {a.fetch_offset for a in answers} == {30}
    assert sorted(dict(s.request.params or {}).get("isolation", "-") for s in ib.sent) == ["-", "read_committed"]


def test_the_fetch_service_bounds_forwarded_long_polls_as_configured() -> None:
    service = FetchService(1, RemoteRouter(), None, FakeInterBroker(), max_forwarded_polls=7)  # type: ignore[arg-type]
    assert service.forwarded_reads.max_flights == 7
