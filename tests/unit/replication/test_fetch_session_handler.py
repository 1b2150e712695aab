"""The follower's side of incremental fetch sessions (broker/replication/fetch_session_handler.py), driven
against the leader's real session cache (broker/fetch/sessions.py): what each request sends and forgets, how
answers and failures move the session, and that both sides always agree on the session's partitions."""

from __future__ import annotations

import random

import pytest

from broker.fetch import sessions as leader
from broker.fetch.sessions import FINAL_EPOCH, INITIAL_EPOCH, next_epoch
from broker.replication.fetch_session_handler import (
    MAX_EPOCH,
    NO_SESSION,
    FetchSessionHandler,
    PartitionData,
    SessionRequest,
)

TP = tuple[str, int]


class Leader:
    """The leader's cache and logs: ``ends`` are the partitions' log end offsets (records below them are new to a
    fetch at a lower offset); ``hw`` the high watermark it reports."""

    def __init__(self, max_sessions: int = 10) -> None:
        self.cache = leader.FetchSessionCache(max_sessions, 1000, clock_ms=lambda: 0, rng=random.Random(3))
        self.ends: dict[TP, int] = {}
        self.hw = 0
        self.seen: list[SessionRequest] = []

    def answer(self, request: SessionRequest) -> tuple[int, int, list[TP]]:
        """(error code, session id, partitions carried), as a Fetch answer would say them."""
        self.seen.append(request)
        wanted = [leader.PartitionFetch(t, p, d.fetch_offset, d.max_bytes, d.current_leader_epoch,
                                        d.last_fetched_epoch, d.log_start_offset)
                  for (t, p), d in request.partitions.items()]
        context = self.cache.new_context(request.session_id, request.epoch, wanted, request.forgotten,
                                         privileged=True)
        if context.error is not None:
            return context.error.kafka_code, NO_SESSION, []
        outcomes = [leader.PartitionOutcome(max(0, self.ends.get(f.key, 0) - f.fetch_offset), self.hw, 0)
                    for f in context.partitions]
        reply = context.respond(outcomes)
        if reply.error is not None:
            return reply.error.kafka_code, NO_SESSION, []
        return 0, reply.session_id, [context.partitions[i].key for i in reply.carried]

    def session_partitions(self, session_id: int) -> set[TP]:
        session = self.cache.get(session_id)
        return set(session.partitions) if session is not None else set()


def want(offsets: dict[TP, int]) -> dict[TP, PartitionData]:
    return {tp: PartitionData(o, 0, 1 << 20, 5) for tp, o in offsets.items()}


def round_trip(h: FetchSessionHandler, ld: Leader, offsets: dict[TP, int]) -> tuple[SessionRequest, list[TP]]:
    request = h.build(want(offsets))
    code, session_id, carried = ld.answer(request)
    result = h.handle_response(code, session_id, carried)
    assert result.ok == (code == 0)
    return request, carried


A, B, C = ("t", 0), ("t", 1), ("u", 0)


def test_full_then_incremental_sends_only_what_changed_and_forgets_what_is_gone() -> None:
    h, ld = FetchSessionHandler(), Leader()
    ld.ends = {A: 10, B: 0, C: 0}
    first, carried = round_trip(h, ld, {A: 0, B: 0, C: 0})
    assert first.full and (first.session_id, first.epoch) == (NO_SESSION, INITIAL_EPOCH)
    assert set(first.partitions) == {A, B, C} and set(carried) == {A, B, C}  # a full answer carries all
    assert h.session_id != NO_SESSION and h.epoch == 1
    assert ld.session_partitions(h.session_id) == {A, B, C} == set(h.partitions)

    # A's fetch moved (its records were appended); B and C are idle: only A is sent, and only A has news
    second, carried = round_trip(h, ld, {A: 10, B: 0, C: 0})
    assert not second.full and second.epoch == 1 and set(second.partitions) == {A} and second.forgotten == ()
    assert carried == []  # nothing new at 10 for A, and B, C unchanged
    ld.ends[B] = 3
    third, carried = round_trip(h, ld, {A: 10, B: 0, C: 0})
    assert third.partitions == {} and carried == [B]  # B's news reaches the follower without B being sent

    # C goes (its leadership moved): forgotten once, and the leader's session agrees
    fourth, _ = round_trip(h, ld, {A: 10, B: 3})
    assert fourth.forgotten == (C,) and set(fourth.partitions) == {B}
    assert ld.session_partitions(h.session_id) == {A, B} == set(h.partitions)
    assert h.epoch == 4  # 1 after the full fetch, one more per incremental answer


def test_a_leader_without_room_answers_session_0_and_every_request_stays_full() -> None:
    h, ld = FetchSessionHandler(), Leader(max_sessions=0)
    for _ in range(3):
        request, carried = round_trip(h, ld, {A: 0, B: 0})
        assert request.full and (request.session_id, request.epoch) == (NO_SESSION, INITIAL_EPOCH)
        assert set(carried) == {A, B}
    assert h.session_id == NO_SESSION


@pytest.mark.parametrize("what", ["evicted", "wrong epoch", "transport failure"])
def test_a_lost_session_is_replaced_by_a_full_fetch(what: str) -> None:
    h, ld = FetchSessionHandler(), Leader()
    round_trip(h, ld, {A: 0, B: 0})
    old = h.session_id
    if what == "evicted":
        ld.cache.remove(old)
        request = h.build(want({A: 0, B: 0}))
        code, sid, carried = ld.answer(request)
        assert code == 70  # FETCH_SESSION_ID_NOT_FOUND
        assert not h.handle_response(code, sid, carried).ok
        assert (h.session_id, h.epoch) == (NO_SESSION, INITIAL_EPOCH)
    elif what == "wrong epoch":
        h.epoch = 7  # as if a request were lost after the leader moved on
        request = h.build(want({A: 0, B: 0}))
        code, sid, carried = ld.answer(request)
        assert code == 71  # INVALID_FETCH_SESSION_EPOCH
        assert not h.handle_response(code, sid, carried).ok
        assert (h.session_id, h.epoch) == (old, INITIAL_EPOCH)  # the next one closes it and opens another
    else:
        h.build(want({A: 0, B: 0}))
        h.handle_error()
        assert (h.session_id, h.epoch) == (old, INITIAL_EPOCH)
    request, carried = round_trip(h, ld, {A: 0, B: 0})
    assert request.full and set(carried) == {A, B}
    assert h.session_id not in (NO_SESSION, old) and h.epoch == 1
    assert ld.cache.get(old) is None  # the old session was closed, not left to be evicted
    assert ld.session_partitions(h.session_id) == {A, B}


def test_an_answer_naming_a_partition_outside_the_session_is_refused_and_the_next_request_is_full() -> None:
    h, ld = FetchSessionHandler(), Leader()
    round_trip(h, ld, {A: 0})
    h.build(want({A: 0}))
    result = h.handle_response(0, h.session_id, [B])
    assert not result.ok and result.unexpected == (B,)
    assert h.build(want({A: 0})).full


def test_epochs_wrap_to_1_and_final_stays_final() -> None:
    assert next_epoch(1) == 2 and next_epoch(MAX_EPOCH) == 1 and next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    h, ld = FetchSessionHandler(), Leader()
    round_trip(h, ld, {A: 0})
    h.epoch = MAX_EPOCH
    ld.cache.get(h.session_id).epoch = MAX_EPOCH  # type: ignore[union-attr]
    round_trip(h, ld, {A: 0})
    assert h.epoch == 1
    request, _ = round_trip(h, ld, {A: 0})
    assert not request.full and request.epoch == 1


def test_an_answer_without_a_request_is_a_bug() -> None:
    with pytest.raises(RuntimeError):
        FetchSessionHandler().handle_response(0, 5, [])
