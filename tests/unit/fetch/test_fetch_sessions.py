"""Incremental fetch sessions (broker/fetch/sessions.py, KIP-227): which kind of fetch a request is, what an
incremental request changes, which partitions its answer carries, the epochs and their errors, and Kafka's
eviction rules, with a clock the test moves."""

from __future__ import annotations

import asyncio
import random

from broker.fetch.sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchContext,
    FetchSessionCache,
    PartitionFetch,
    PartitionOutcome,
    next_epoch,
)
from odradek.protocol.errors import FetchSessionIdNotFoundError, InvalidFetchSessionEpochError

EVICTION_MS = 1000


class Clock:
    def __init__(self) -> None:
        self.now = 50_000

    def __call__(self) -> int:
        return self.now


def cache(max_sessions: int = 10) -> tuple[FetchSessionCache, Clock]:
    clock = Clock()
    return FetchSessionCache(max_sessions, EVICTION_MS, clock_ms=clock, rng=random.Random(7)), clock


def p(partition: int, offset: int = 0, topic: str = "t", max_bytes: int = 1000) -> PartitionFetch:
    return PartitionFetch(topic, partition, offset, max_bytes)


def quiet(hw: int = 10, start: int = 0) -> PartitionOutcome:
    return PartitionOutcome(0, hw, start)


def data(hw: int = 10, start: int = 0) -> PartitionOutcome:
    return PartitionOutcome(100, hw, start)


def keys(context: FetchContext) -> list[tuple[str, int]]:
    return [(x.topic, x.partition) for x in context.partitions]


def open_session(c: FetchSessionCache, *partitions: PartitionFetch, privileged: bool = False) -> int:
    context = c.new_context(0, INITIAL_EPOCH, list(partitions), privileged=privileged)
    assert context.kind == "full"
    reply = context.respond([quiet() for _ in partitions])
    assert reply.error is None and reply.session_id > 0 and reply.carried == tuple(range(len(partitions)))
    return reply.session_id


def test_a_sessionless_fetch_carries_every_partition_and_keeps_nothing() -> None:
    c, _ = cache()
    context = c.new_context(0, FINAL_EPOCH, [p(0), p(1)])
    reply = context.respond([quiet(), quiet()])
    assert (context.kind, reply.session_id, reply.carried) == ("sessionless", 0, (0, 1))
    assert len(c) == 0


def test_a_full_fetch_opens_a_session_whose_next_request_is_epoch_one() -> None:
    c, _ = cache()
    sid = open_session(c, p(0), p(1))
    session = c.get(sid)
    assert session is not None and session.epoch == 1 and session.size == 2
    assert c.new_context(sid, 1, []).kind == "incremental"
    assert c.get(sid).epoch == 2  # type: ignore[union-attr]


def test_an_incremental_answer_carries_only_what_changed() -> None:
    c, _ = cache()
    sid = open_session(c, p(0), p(1), p(2), p(3))
    context = c.new_context(sid, 1, [])
    assert keys(context) == [("t", 0), ("t", 1), ("t", 2), ("t", 3)]  # an incremental request reads the session's
    reply = context.respond([quiet(), data(), quiet(hw=11), quiet(start=4)])
    # records, a new high watermark, a new log start offset: carried; an unchanged partition: left out
    assert reply.error is None and reply.session_id == sid and reply.carried == (1, 2, 3)
    context = c.new_context(sid, 2, [])
    now = {("t", 0): quiet(), ("t", 1): quiet(), ("t", 2): quiet(hw=11), ("t", 3): quiet(start=4)}
    assert context.respond([now[k] for k in keys(context)]).carried == ()  # what the client was told is kept


def test_a_partition_that_answered_records_is_fetched_last_next_time() -> None:
    c, _ = cache()
    sid = open_session(c, p(0), p(1), p(2))
    c.new_context(sid, 1, []).respond([data(), quiet(), quiet()])
    assert keys(c.new_context(sid, 2, [])) == [("t", 1), ("t", 2), ("t", 0)]


def test_an_error_is_always_carried_and_its_partition_is_sent_again_once_it_clears() -> None:
    c, _ = cache()
    sid = open_session(c, p(0))
    assert c.new_context(sid, 1, []).respond([PartitionOutcome(0, -1, -1, error=True)]).carried == (0,)
    assert c.new_context(sid, 2, []).respond([PartitionOutcome(0, -1, -1, error=True)]).carried == (0,)
    assert c.new_context(sid, 3, []).respond([quiet()]).carried == (0,)  # back to normal: said once
    assert c.new_context(sid, 4, []).respond([quiet()]).carried == ()


def test_partitions_are_added_updated_and_forgotten() -> None:
    c, _ = cache()
    sid = open_session(c, p(0, offset=5), p(1))
    context = c.new_context(sid, 1, [p(0, offset=9), p(2, topic="u")], forgotten=[("t", 1), ("t", 7)])
    assert [(x.topic, x.partition, x.fetch_offset) for x in context.partitions] == [("t", 0, 9), ("u", 2, 0)]
    reply = context.respond([quiet(), quiet()])
    assert reply.carried == (1,)  # the added partition was never answered: carried; the updated one unchanged
    assert c.get(sid).size == 2  # type: ignore[union-attr]


def test_a_session_left_without_partitions_is_closed() -> None:
    c, _ = cache()
    sid = open_session(c, p(0))
    context = c.new_context(sid, 1, [], forgotten=[("t", 0)])
    reply = context.respond([])
    assert (context.kind, reply.session_id, reply.carried, c.get(sid)) == ("sessionless", 0, (), None)


def test_an_unknown_session_and_a_wrong_epoch_are_refused() -> None:
    c, _ = cache()
    unknown = c.new_context(12345, 1, [p(0)])
    assert isinstance(unknown.error, FetchSessionIdNotFoundError) and unknown.error.kafka_code == 70
    assert unknown.respond([]).session_id == 0
    sid = open_session(c, p(0))
    for wrong in (0 + 2, 7):
        context = c.new_context(sid, wrong, [])
        assert isinstance(context.error, InvalidFetchSessionEpochError) and context.error.kafka_code == 71
        assert context.partitions == []
    assert c.new_context(sid, 1, []).error is None  # the session survived the bad requests
    assert c.new_context(0, 5, [p(0)]).kind == "error"  # an incremental fetch needs a session id


def test_a_duplicate_request_in_flight_makes_the_first_answer_an_epoch_error() -> None:
    c, _ = cache()
    sid = open_session(c, p(0))
    first = c.new_context(sid, 1, [])
    second = c.new_context(sid, 2, [])  # the client moved on (a retry on another connection)
    reply = first.respond([data()])
    assert isinstance(reply.error, InvalidFetchSessionEpochError) and reply.session_id == sid
    assert second.respond([data()]).carried == (0,)


def test_a_full_fetch_naming_a_session_closes_it() -> None:
    c, _ = cache()
    old = open_session(c, p(0))
    context = c.new_context(old, INITIAL_EPOCH, [p(0), p(1)])
    new = context.respond([quiet(), quiet()]).session_id
    assert c.get(old) is None and new not in (0, old) and c.get(new) is not None
    assert c.new_context(new, FINAL_EPOCH, [p(0)]).kind == "sessionless" and c.get(new) is None


def test_epochs_wrap_to_one() -> None:
    assert next_epoch(1) == 2 and next_epoch(2**31 - 1) == 1 and next_epoch(-1) == -1


def test_a_full_cache_evicts_an_idle_session_first() -> None:
    c, clock = cache(max_sessions=2)
    a = open_session(c, p(0), p(1), p(2))
    clock.now += 10
    b = open_session(c, p(0))
    assert c.new_context(0, INITIAL_EPOCH, [p(0)]).respond([quiet()]).session_id == 0  # full: nothing to evict
    clock.now += EVICTION_MS  # a has been idle past the eviction time, b not quite
    c.new_context(b, 1, [])
    clock.now += 5
    new = c.new_context(0, INITIAL_EPOCH, [p(0)]).respond([quiet()]).session_id
    assert new and c.get(a) is None and c.get(b) is not None  # the idle one, however large
    assert c.stats().evictions == 1


def test_without_idle_sessions_only_a_larger_session_evicts_an_old_enough_smaller_one() -> None:
    c, clock = cache(max_sessions=2)
    small = open_session(c, p(0))
    big = open_session(c, p(0), p(1), p(2))
    clock.now += EVICTION_MS + 1
    c.new_context(small, 1, [])  # both in use, both created long ago
    c.new_context(big, 1, [])
    assert c.new_context(0, INITIAL_EPOCH, [p(0)]).respond([quiet()]).session_id == 0  # not larger than small
    two = c.new_context(0, INITIAL_EPOCH, [p(0), p(1)]).respond([quiet(), quiet()]).session_id
    assert two and c.get(small) is None and c.get(big) is not None


def test_young_sessions_are_kept_from_consumers_but_not_from_followers() -> None:
    c, _ = cache(max_sessions=1)
    consumer = open_session(c, p(0))
    assert c.new_context(0, INITIAL_EPOCH, [p(0), p(1)]).respond([quiet(), quiet()]).session_id == 0
    follower = c.new_context(0, INITIAL_EPOCH, [p(0)], privileged=True).respond([quiet()]).session_id
    assert follower and c.get(consumer) is None and c.get(follower).privileged  # type: ignore[union-attr]
    # a consumer never evicts a follower's session that is in use, however small
    assert c.new_context(0, INITIAL_EPOCH, [p(0), p(1), p(2)]).respond([quiet()] * 3).session_id == 0


def test_no_slots_means_no_sessions() -> None:
    c, _ = cache(max_sessions=0)
    assert c.new_context(0, INITIAL_EPOCH, [p(0)]).respond([quiet()]).session_id == 0 and len(c) == 0


def test_stats_count_fetches_by_kind() -> None:
    c, _ = cache()
    sid = open_session(c, p(0), p(1))
    c.new_context(sid, 1, [])
    c.new_context(sid, 9, [])
    c.new_context(0, FINAL_EPOCH, [p(0)])
    stats = c.stats()
    assert (stats.sessions, stats.partitions) == (1, 2)
    assert stats.contexts == {"sessionless": 1, "full": 1, "incremental": 1, "error": 1}


def test_a_partition_named_twice_is_fetched_once_in_its_first_place_with_its_last_values() -> None:
    c, _ = cache()
    context = c.new_context(0, INITIAL_EPOCH, [p(0, offset=1), p(1), p(0, offset=3)])
    assert [(x.partition, x.fetch_offset) for x in context.partitions] == [(0, 3), (1, 0)]


# ------------------------------------------------------------------- a follower's session: quiet partitions

def follower_session(c: FetchSessionCache, *partitions: PartitionFetch) -> int:
    """Broker 2's session, opened by a full fetch, every partition then looked at in one incremental round and
    found quiet (as the leader's partitions mark them)."""
    full = c.new_context(0, INITIAL_EPOCH, list(partitions), privileged=True, replica_id=2)
    session_id = full.respond([quiet()] * len(partitions)).session_id
    round_ = c.new_context(session_id, 1, [], replica_id=2, privileged=True)
    assert round_.marks is not None and len(round_.marks) == len(partitions)
    for entry in round_.marks:
        entry.quiet = True  # what Partition.acknowledge_if_quiet does
    round_.respond([quiet()] * len(partitions))
    return session_id


def test_a_followers_round_leaves_its_quiet_partitions_out_and_records_when_it_fetched() -> None:
    c, clock = cache()
    session_id = follower_session(c, p(0), p(1), p(2))
    clock.now += 700
    context = c.new_context(session_id, 2, [], replica_id=2, privileged=True)
    assert (keys(context), context.joinable) == ([], True)
    (entry, *_) = c.get(session_id).partitions.values()  # type: ignore[union-attr]
    clock.now += 300
    assert (entry.replica_id, entry.fetched_ms_ago()) == (2, 300)  # the round's fetch time, on the cache's clock


def test_only_the_followers_current_registration_has_its_quiet_partitions_left_out() -> None:
    """The caller says whose registration is current (``replica_id``); another replica's request on the session,
    or one whose registration is stale (replica -1), looks at every partition and moves no fetch time."""
    c, clock = cache()
    session_id = follower_session(c, p(0), p(1))
    fetched = c.get(session_id).last_fetch_ms  # type: ignore[union-attr]
    clock.now += 500
    for epoch, replica in ((2, 3), (3, -1)):
        context = c.new_context(session_id, epoch, [], replica_id=replica, privileged=True)
        assert (keys(context), context.joinable) == ([("t", 0), ("t", 1)], False)
    assert c.get(session_id).last_fetch_ms == fetched  # type: ignore[union-attr]


def test_a_partition_asked_anew_or_forgotten_is_no_longer_quiet_and_its_mark_goes_dead() -> None:
    c, _ = cache()
    session_id = follower_session(c, p(0), p(1), p(2))
    entries = list(c.get(session_id).partitions.values())  # type: ignore[union-attr]
    context = c.new_context(session_id, 2, [p(1, offset=5)], [("t", 2)], replica_id=2, privileged=True)
    assert keys(context) == [("t", 1)]
    assert [e.quiet for e in entries] == [True, False, False]
    entries[2].unquiet()  # the leader's partition clearing a dead mark: nothing joins
    assert context.take_joined() == []


def test_a_cleared_partition_joins_the_waiting_round_once_and_wakes_it() -> None:
    async def main() -> None:
        c, _ = cache()
        session_id = follower_session(c, p(0), p(1), p(2))
        entries = list(c.get(session_id).partitions.values())  # type: ignore[union-attr]
        context = c.new_context(session_id, 2, [], replica_id=2, privileged=True)
        entries[1].unquiet()  # before the round waits: its waiter is resolved as soon as it is armed
        waiter = asyncio.get_running_loop().create_future()
        context.arm(waiter)
        assert waiter.done()
        assert [p.key for p, _ in context.take_joined()] == [("t", 1)]
        waiter = asyncio.get_running_loop().create_future()
        context.arm(waiter)
        entries[2].unquiet()
        entries[2].unquiet()  # twice: one wake-up, one join
        assert waiter.done() and [p.key for p, _ in context.take_joined()] == [("t", 2)]
        context.disarm(waiter)
        assert c.get(session_id).waiter is None  # type: ignore[union-attr]
        # The answer covers the joined partitions after the others (none here), in the order they joined.
        reply = context.respond([quiet(hw=11), quiet(hw=10)])
        assert [keys(context)[i] for i in reply.carried] == [("t", 1)]  # its high watermark moved

    asyncio.run(main())
