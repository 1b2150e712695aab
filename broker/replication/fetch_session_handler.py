"""A fetcher's side of an incremental fetch session (KIP-227), as Kafka's client ``FetchSessionHandler``.

Why: a follower fetching hundreds of partitions from one leader would otherwise name every partition in every
Fetch and get every partition back, most of them unchanged. In a session the leader remembers what was asked of
each partition; each request after the first names only the partitions that were added or whose fetch changed
(offset, log start offset, byte limit, leader epochs), and the ones to forget; the answer carries only the
partitions with news. The leader's side is broker/fetch/sessions.py.

The session's state here (``session_id``, ``epoch``, the partitions as last sent) and what it means:

* ``(0, 0)``: no session; the next request is full and asks for one (the answer names its id, or 0 when the
  leader has no room: then every request stays full);
* ``(id, n > 0)``: the next request is incremental, epoch ``n``; after each answer ``n`` moves on (wrapping from
  2**31-1 to 1, the leader's rule);
* ``(id, 0)``: after a failure, the next request closes session ``id`` and asks for a new one, full.

Invariants:

* a request is built from the *complete* set of partitions this round wants (``build``); the handler works out
  what to send, so a caller cannot forget to forget a partition;
* an answer is applied with ``handle_response`` and a failure (transport, timeout) with ``handle_error``, once per
  built request and in order; after a top-level error (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH,
  FETCH_SESSION_TOPIC_ID_ERROR, any other) or a failure, the next request is full;
* an answer must name only partitions of the session as the request leaves it (the ones asked in a full
  request): anything else is a protocol error (``unexpected`` in the result), and the next request is full, as
  Kafka's handler verifies them.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from broker.fetch.sessions import INITIAL_EPOCH, INT32_MAX, INVALID_SESSION_ID, next_epoch
from odradek.protocol.errors import FetchSessionIdNotFoundError

TopicPartition = tuple[str, int]

# The session numbers are the leader's (broker/fetch/sessions.py): one definition of the epochs for both sides.
NO_SESSION = INVALID_SESSION_ID
MAX_EPOCH = INT32_MAX
FETCH_SESSION_ID_NOT_FOUND = FetchSessionIdNotFoundError.kafka_code  # the leader holds no such session


class PartitionData(NamedTuple):
    """What a fetcher asks of one partition (Kafka's ``FetchRequest.PartitionData``). A tuple, so that a round's
    diff against the session (``build``) compares and hashes in C: a follower's round over a thousand idle
    partitions is a set difference, not a thousand Python comparisons."""

    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """One Fetch's session fields and partitions: ``partitions`` to send (all of them in a full request, the
    added and changed ones in an incremental one) and ``forgotten`` (incremental only)."""

    session_id: int
    epoch: int
    partitions: dict[TopicPartition, PartitionData]
    forgotten: tuple[TopicPartition, ...]
    full: bool
    # every partition this round wants, sent or not: what the answer may name, and what the session holds after
    wanted: Mapping[TopicPartition, PartitionData] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionResult:
    """What an answer did to the session: ``ok`` when it was applied; ``unexpected`` names partitions the answer
    should not have carried (the next request is then full)."""

    ok: bool
    unexpected: tuple[TopicPartition, ...] = ()


class FetchSessionHandler:
    """One fetcher's session with one leader. Not thread-safe: one fetcher loop owns it."""

    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH
        self._session: dict[TopicPartition, PartitionData] = {}  # as the leader holds them, after the last answer
        self._in_flight: SessionRequest | None = None

    @property
    def partitions(self) -> Mapping[TopicPartition, PartitionData]:
        """The session's partitions, as the leader holds them."""
        return self._session

    def build(self, wanted: Mapping[TopicPartition, PartitionData]) -> SessionRequest:
        """The next request for exactly ``wanted`` (every partition this round fetches, with what it asks)."""
        wanted = dict(wanted)
        if self.epoch == INITIAL_EPOCH:  # (0, 0) asks for a session; (id, 0) closes ``id`` and asks for another
            request = SessionRequest(self.session_id, INITIAL_EPOCH, wanted, (), True, wanted)
        else:
            changed = dict(wanted.items() - self._session.items())
            forgotten = tuple(self._session.keys() - wanted.keys())
            request = SessionRequest(self.session_id, self.epoch, changed, forgotten, False, wanted)
        self._in_flight = request
        return request

    def handle_response(self, error_code: int, session_id: int, answered: Collection[TopicPartition]) -> SessionResult:
        """Apply the answer to the request last built: its top-level ``error_code`` (0 for none), the
        ``session_id`` it names and the partitions it carries."""
        request, self._in_flight = self._in_flight, None
        if request is None:
            raise RuntimeError("an answer with no request built")
        if error_code != 0:
            if error_code == FETCH_SESSION_ID_NOT_FOUND:  # nothing to close: ask for a new one
                self.session_id = NO_SESSION
            self._restart()
            return SessionResult(False)
        unexpected = tuple(tp for tp in answered if tp not in request.wanted)
        if unexpected:
            self._restart()
            return SessionResult(False, unexpected)
        self._session = dict(request.wanted)
        if request.full:
            self.session_id, self.epoch = (session_id, 1) if session_id != NO_SESSION else (NO_SESSION,
                                                                                             INITIAL_EPOCH)
        elif session_id == NO_SESSION:  # the leader closed it (no partition left, say): start again
            self.session_id, self.epoch = NO_SESSION, INITIAL_EPOCH
        else:
            self.epoch = next_epoch(self.epoch)
        return SessionResult(True)

    def handle_error(self) -> None:
        """The request last built failed (transport, timeout): whether the leader applied it is unknown, so the
        next request closes the session and opens a new one."""
        self._in_flight = None
        self._restart()

    def _restart(self) -> None:
        self.epoch = INITIAL_EPOCH
        self._session = {}
