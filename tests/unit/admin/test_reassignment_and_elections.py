"""The admin services behind the reassignment and election endpoints (broker/admin/reassignment.py,
broker/admin/elections.py), against the fake ZooKeeper facade and a metadata cache filled by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.admin.elections import ElectionAdmin
from broker.admin.reassignment import CancelledReassignments, OngoingReassignment, ReassignmentAdmin
from broker.metadata.cache import MetadataCache
from odradek.protocol.errors import InvalidRequestError, UnknownPartitionError, UnknownTopicError
from odradek.protocol.model import BrokerInfo, TopicAssignment, TopicPartition
from tests.unit.fakes.zk import FakeZk

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def _cluster() -> tuple[FakeZk, MetadataCache]:
    zk = FakeZk()
    cache = MetadataCache()
    for b in (1, 2, 3):
        cache.brokers[b] = zk.add_broker(b)
    zk.add_topic("t", {0: [1, 2], 1: [2, 3]})
    cache.topics["t"] = zk.assignments["t"]
    return zk, cache


def test_moves_are_checked_against_the_metadata_in_order() -> None:
    zk, cache = _cluster()
    admin = ReassignmentAdmin(zk, cache)  # type: ignore[arg-type]
    assert admin.validate_moves([(T0, [3, 1]), (T1, [1, 2])]) == {T0: [3, 1], T1: [1, 2]}
    with pytest.raises(InvalidRequestError, match="duplicate partitions"):
        admin.validate_moves([(T0, [3, 1]), (T0, [1, 2])])
    with pytest.raises(UnknownTopicError):
        admin.validate_moves([(TopicPartition("nope", 0), [1])])
    with pytest.raises(UnknownPartitionError):
        admin.validate_moves([(TopicPartition("t", 2), [1])])
    with pytest.raises(InvalidRequestError, match=r"Unknown broker id\(s\) \[9\]"):
        admin.validate_moves([(T0, [1, 9])])


def test_a_lazy_decoder_error_after_a_bad_item_is_never_reached() -> None:
    """The first bad item is reported, whether the decoder or the metadata check finds it."""
    zk, cache = _cluster()

    def items() -> Iterator[tuple[TopicPartition, list[int]]]:
        yield TopicPartition("nope", 0), [1]
        raise InvalidRequestError("malformed second item")

    with pytest.raises(UnknownTopicError):
        ReassignmentAdmin(zk, cache).validate_moves(items())  # type: ignore[arg-type]


def test_a_second_reassignment_is_refused_unless_additional() -> None:
    zk, cache = _cluster()
    admin = ReassignmentAdmin(zk, cache)  # type: ignore[arg-type]
    assert admin.ongoing() == []
    assert admin.request({T0: [3, 1]}) is True
    assert admin.request({T1: [1, 2]}) is False
    assert zk.reassignment == {T0: [3, 1]}
    assert admin.request({T1: [1, 2]}, additional=True) is True
    assert zk.reassignment == {T0: [3, 1], T1: [1, 2]}


def test_ongoing_moves_show_what_the_assignment_adds_and_removes() -> None:
    zk, cache = _cluster()
    admin = ReassignmentAdmin(zk, cache)  # type: ignore[arg-type]
    admin.request({T1: [1, 2], TopicPartition("gone", 0): [1]})
    cache.topics["t"] = TopicAssignment({0: [1, 2], 1: [1, 2, 3]}, "id-t", adding_replicas={1: [1]},
                                        removing_replicas={1: [3]})
    assert admin.ongoing() == [OngoingReassignment(TopicPartition("gone", 0), [1], [], []),
                               OngoingReassignment(T1, [1, 2], [1], [3])]


def test_cancel_reverts_to_the_replicas_minus_those_being_added() -> None:
    zk, cache = _cluster()
    admin = ReassignmentAdmin(zk, cache)  # type: ignore[arg-type]
    admin.request({T0: [3, 1], T1: [1, 2]})
    zk.assignments["t"] = TopicAssignment({0: [3, 1, 2], 1: [1, 2, 3]}, "id-t", adding_replicas={0: [3], 1: [1]},
                                          removing_replicas={0: [2], 1: [3]})
    result = admin.cancel({T0, TopicPartition("t", 7)})
    assert result == CancelledReassignments([T0], [TopicPartition("t", 7)])
    assert zk.reassignment == {T0: [1, 2], T1: [1, 2]}  # merged: the cancel is a move back
    assert admin.cancel(set()) == CancelledReassignments([], [])


def test_elections_name_existing_partitions_and_one_preferred_election_at_a_time() -> None:
    zk, cache = _cluster()
    admin = ElectionAdmin(zk, cache)  # type: ignore[arg-type]
    assert admin.existing(iter([T1, T0])) == [T1, T0]
    with pytest.raises(UnknownPartitionError, match="t-5 does not exist"):
        admin.existing([T0, TopicPartition("t", 5)])
    with pytest.raises(UnknownPartitionError):
        admin.existing([TopicPartition("nope", 0)])
    assert admin.request_preferred([T0]) is True
    assert admin.request_preferred([]) is False  # one is pending
    assert zk.preferred == [T0]


def test_replicas_must_be_brokers_this_broker_knows() -> None:
    zk, cache = _cluster()
    cache.brokers = {1: BrokerInfo(1, "h", 1)}
    with pytest.raises(InvalidRequestError, match=r"\[2\]"):
        ReassignmentAdmin(zk, cache).validate_moves([(T0, [1, 2])])  # type: ignore[arg-type]
