"""OFFSET_OUT_OF_RANGE moves a consumer's position only when the position is really outside the log.

A fault run caught a group member rewinding partition 1 from offset 14222 to 0 within one generation: after a
failover the new leader (whose high watermark lagged the old one's) answered OFFSET_OUT_OF_RANGE and the consumer
applied ``auto_offset_reset="earliest"`` at once. The broker half (no such answer within the log end) is tested in
tests/unit/replication/test_consumer_read_range.py; this is the client half, on the decision and on a consumer's
state (no broker: the consumer points at a closed port and never fetches).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from odradek.client.consumer import CONFIRM, RESET, RETRY, Consumer, _Fetched, out_of_range_action
from odradek.client.types import TopicPartition
from odradek.protocol.errors import OffsetOutOfRangeError, UnknownTopicError

TP = TopicPartition("t", 1)


def oor(start: int, end: int | None, epoch: int | None, hw: int | None = None) -> OffsetOutOfRangeError:
    details = {"log_start_offset": start, "high_watermark": end if hw is None else hw}
    if end is not None:
        details["log_end_offset"] = end
    if epoch is not None:
        details["leader_epoch"] = epoch
    return OffsetOutOfRangeError("out of range", **details)


def test_the_decision() -> None:
    assert out_of_range_action(5, oor(10, 100, 3).details, 3, False) == RESET  # below the log start: gone
    assert out_of_range_action(14222, oor(0, 14222, 4).details, 3, False) == RETRY  # within the log: lagging HW
    assert out_of_range_action(14222, oor(0, 14300, 4, hw=14000).details, 3, True) == RETRY
    assert out_of_range_action(500, oor(0, 400, 3).details, 5, True) == RETRY  # a deposed leader: never believed
    assert out_of_range_action(500, oor(0, 400, 5).details, 5, False) == CONFIRM  # above the end: ask again first
    assert out_of_range_action(500, oor(0, 400, 5).details, 5, True) == RESET  # confirmed after a refresh
    assert out_of_range_action(500, oor(0, None, None).details, 5, False) == CONFIRM  # an answer without details


@pytest.fixture
def consumer() -> Iterator[Consumer]:
    c = Consumer("127.0.0.1:1", auto_offset_reset="earliest", retry_backoff_ms=10)
    c.assign([TP])
    yield c
    c.close()


def _answer(c: Consumer, error: OffsetOutOfRangeError) -> None:
    state = c._states[TP]
    with c._cond:
        c._on_fetch_error(TP, state, _Fetched(state.epoch, [], state.position or 0, error))


def test_a_new_leaders_lagging_high_watermark_never_rewinds_the_position(consumer: Consumer) -> None:
    consumer.seek(TP, 14222)
    consumer._states[TP].leader_epoch = 3
    # the old broker's answer: "out of range" above the new leader's HW although its log holds 14222
    _answer(consumer, oor(0, 14230, 4, hw=14100))
    assert consumer.position(TP) == 14222
    _answer(consumer, oor(0, 14230, 4, hw=14100))  # again, after a refresh: still inside the log
    assert consumer.position(TP) == 14222


def test_above_the_log_end_resets_only_once_confirmed_after_a_metadata_refresh(consumer: Consumer) -> None:
    consumer.seek(TP, 1000)
    _answer(consumer, oor(0, 20, 2))
    assert consumer.position(TP) == 1000  # one answer is not enough
    _answer(consumer, oor(0, 20, 2))
    assert consumer.position(TP) == 1000  # nor a second one before any metadata refresh
    consumer._metadata._view = consumer._metadata.view.__class__(None, None, {}, {})  # a refresh landed
    _answer(consumer, oor(0, 20, 2))
    assert consumer.position(TP) == 0  # confirmed: auto_offset_reset="earliest" applies


def test_a_deposed_leader_is_not_believed(consumer: Consumer) -> None:
    consumer.seek(TP, 1000)
    consumer._states[TP].leader_epoch = 6  # we already read from epoch 6
    for _ in range(3):
        consumer._metadata._view = consumer._metadata.view.__class__(None, None, {}, {})
        _answer(consumer, oor(0, 900, 5))  # the leader of epoch 5, still answering
    assert consumer.position(TP) == 1000


def test_below_the_log_start_resets_at_once(consumer: Consumer) -> None:
    consumer.seek(TP, 3)
    _answer(consumer, oor(10, 50, 1))
    assert consumer.position(TP) == 10


def test_an_unknown_topic_is_waited_for_not_raised_by_poll(consumer: Consumer) -> None:
    """A topic just created is unknown to a broker whose metadata trails the controller: poll waits and asks again
    (Kafka's consumer treats UNKNOWN_TOPIC_OR_PARTITION as retriable), and the offsets arrive on a later poll."""
    answers: list[dict[str, int] | Exception] = [UnknownTopicError("topic 't' does not exist"),
                                                 {"beginning_offset": 7, "end_offset": 9}]

    def offsets(tp: TopicPartition) -> dict[str, int]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    consumer._offsets = offsets  # type: ignore[method-assign]
    state = consumer._states[TP]
    consumer._resolve(TP, state, raise_errors=False)  # the poll path: no exception
    assert state.position is None and state.retry_at > 0
    consumer._resolve(TP, state, raise_errors=False)
    assert consumer.position(TP) == 7
    answers.append(UnknownTopicError("gone"))
    with pytest.raises(UnknownTopicError):  # a caller that asks for the answer now still gets the error
        consumer._resolve(TP, consumer._states[TP].__class__(None), raise_errors=True)


def test_an_offsets_lookup_during_a_failover_asks_for_metadata_and_the_next_broker(consumer: Consumer) -> None:
    """A reset's offsets lookup answered LEADER_NOT_AVAILABLE (a leader killed a moment ago) asks for a metadata
    refresh and goes on to the next broker, instead of failing on how the error is matched (a tuple of error
    classes `|` a class is a TypeError: a CI run's tail consumer died of it across leader kills)."""
    from odradek.protocol.errors import LeaderNotAvailableError

    asked: list[str] = []
    consumer._metadata.leader_url = lambda topic, partition: "http://a"  # type: ignore[method-assign]
    consumer._metadata.broker_urls = lambda: ["http://a", "http://b"]  # type: ignore[method-assign]
    refreshes: list[bool] = []
    consumer._metadata.request_update = lambda: refreshes.append(True)  # type: ignore[method-assign]

    def get_json(url: str, path: str, query: object = None) -> dict[str, int]:
        asked.append(url)
        if url == "http://a":
            raise LeaderNotAvailableError("t-1 has no leader right now")
        return {"beginning_offset": 3, "end_offset": 9}

    consumer._transport.get_json = get_json  # type: ignore[method-assign]
    assert consumer._offsets(TP) == {"beginning_offset": 3, "end_offset": 9}
    assert asked == ["http://a", "http://b"] and refreshes == [True]
