"""Incremental fetch sessions (KIP-227), as Kafka's ``FetchSession``, ``FetchSessionCache`` and ``FetchManager``.

Why: a fetcher of many partitions otherwise names every partition in every Fetch and gets every partition back,
most of them unchanged. In a session the broker remembers what the fetcher asked of each partition (offset, byte
limit, leader epochs) and what it last answered (high watermark, log start offset); an incremental request then
names only what changed (partitions added or updated, partitions forgotten) and its answer carries only the
partitions with something new: records, a moved high watermark or log start offset, or an error.

A request's (session id, epoch) says which kind of fetch it is:

* ``(0, -1)``: a full fetch without a session (what librdkafka always sends, and every Fetch before v7);
* ``(0, 0)``: a full fetch asking for a session; the answer carries its id, or 0 when the cache has no room;
* ``(id, 0)`` / ``(id, -1)``: session ``id`` is closed, then as ``(0, 0)`` / ``(0, -1)``;
* ``(id, n > 0)``: incremental, on session ``id``: FETCH_SESSION_ID_NOT_FOUND when the cache does not hold it,
  INVALID_FETCH_SESSION_EPOCH when ``n`` is not the epoch it expects next (1 after its creation, then one more per
  request, wrapping from 2**31-1 to 1). A session left with no partition is closed (the answer says session 0).

Eviction, Kafka's rules (``max.incremental.fetch.session.cache.slots``, ``min.incremental.fetch.session.eviction.ms``):
a new session gets a slot when one is free; else it takes the least recently used session's slot if that session
has been idle for longer than the eviction time (idle clients go first); else it may evict the least valuable
session old enough to be evictable (created more than the eviction time ago), if that one is worth less than the
new one: fewer partitions, and a consumer's session is worth less than a follower's (``privileged``) whatever its
size. A session that can evict nobody is not created: its fetch is answered sessionless.

Partitions are plain (topic, partition) keys and :class:`PartitionFetch` values, not Kafka wire classes, so the
replication channel's follower fetches can keep sessions in the same cache (``privileged``).

Topic ids (Fetch v13+, KIP-516): a session's topic keys are what its requests name topics by, the topic's name
before v13 and its id from v13 (Kafka keys sessions by ``TopicIdPartition``), so a topic deleted and created again
under the same name is another topic to a v13 session, and an id no topic has stays in the session (answered
UNKNOWN_TOPIC_ID until the fetcher forgets it, or resolved once the topic is known). The session does not care
which kind of key it holds, but it holds one kind only (``uses_topic_ids``): an incremental request of the other
kind is refused with FETCH_SESSION_TOPIC_ID_ERROR, as Kafka refuses it (the fetcher starts a new session).

Quiet partitions (a follower's session): a partition whose last look had nothing to say to the follower (no
records past its offset, which was already the log end and acknowledged: ``Partition.acknowledge_if_quiet``) is
marked quiet in the session, and the leader's partition keeps the mark until anything of it changes (an append, its
high watermark, its role, epoch or ISR, a DeleteRecords), then clears it (:meth:`SessionEntry.unquiet`). An
incremental fetch from the session's follower (``replica_id``, whose registration the caller checked) leaves quiet
partitions out of its context: a round costs what changed, not the session's size. Kafka's leader reads every
partition of the session each round; what it would do there for a quiet one is recording the follower's fetch
time, and the mark stands for that: the session's last fetch time (:meth:`SessionEntry.fetched_ms_ago`) is the
follower's caught-up time for each of its quiet partitions, folded into the partition's follower state when the
mark is cleared. A partition cleared while a fetch of the session waits joins that fetch
(:meth:`FetchContext.take_joined`, woken through :attr:`FetchSession.waiter`), so an append to a quiet partition
is answered in the same round, as Kafka's ``DelayedFetch`` over the whole session would. A partition the request
updates or forgets is no longer quiet (its entry's mark goes dead: the partition then skips it). Retention moving
the leader's log start (a segment deleted on the log manager's thread) does not clear a mark: the follower learns
that log start with the partition's next change, and meanwhile its own retention deletes by the same rules.

Concurrency: the cache belongs to the broker's event loop; :meth:`FetchSessionCache.new_context` and
:meth:`FetchContext.respond` never await. The fetch between them does, so ``respond`` checks the session's epoch
again, as Kafka does: a duplicate request on another connection may have moved it meanwhile.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from odradek.protocol.errors import (
    FetchSessionIdNotFoundError,
    FetchSessionTopicIdError,
    InvalidFetchSessionEpochError,
    OdradekError,
)

__all__ = [
    "DEFAULT_EVICTION_MS", "DEFAULT_MAX_SESSIONS", "FINAL_EPOCH", "INITIAL_EPOCH", "INVALID_SESSION_ID",
    "FetchContext", "FetchReply", "FetchSession", "FetchSessionCache", "PartitionFetch", "PartitionOutcome",
    "SessionEntry", "SessionStats", "next_epoch",
]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_MAX_SESSIONS = 1000  # max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # min.incremental.fetch.session.eviction.ms
INT32_MAX = 2**31 - 1

SESSIONLESS, FULL, INCREMENTAL, ERROR = "sessionless", "full", "incremental", "error"

Key = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch of the request after one of ``epoch`` (Kafka's ``FetchMetadata.nextEpoch``)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What a fetcher asks of one partition; a session keeps the latest one per partition."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's own (a follower's); -1 for consumers

    @property
    def key(self) -> Key:
        return self.topic, self.partition


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    """What an answer says of one partition, as far as a session cares."""

    records_size: int
    high_watermark: int
    log_start_offset: int
    error: bool = False


@dataclass(eq=False, slots=True)
class SessionEntry:
    """A session's partition: the fetcher's latest request for it, what the session last answered, and whether it
    is quiet (a follower's session only; see the module docstring)."""

    request: PartitionFetch
    high_watermark: int = -1  # as last answered; -1 after an error, so the partition is answered once it clears
    log_start_offset: int = -1
    session: FetchSession | None = None  # the session holding it (set for a follower's session: quiet marks)
    quiet: bool = False  # left out of its session's rounds until the leader's partition clears it

    # The quiet mark a leader's partition holds (``QuietMark`` in broker/replication/partition.py).

    @property
    def replica_id(self) -> int:
        assert self.session is not None
        return self.session.replica_id

    def fetched_ms_ago(self) -> float:
        """How long ago the session's follower last fetched (and so found this quiet partition unchanged)."""
        assert self.session is not None
        return self.session.fetched_ms_ago()

    def unquiet(self) -> None:
        """The leader's partition changed: the entry is looked at again from the next round, and joins a fetch
        of the session that is waiting now."""
        if not self.quiet:
            return
        self.quiet = False
        session = self.session
        assert session is not None
        session.unquieted.append(self)
        waiter = session.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def must_respond(self, outcome: PartitionOutcome) -> bool:
        """Kafka's ``CachedPartition.maybeUpdateResponseData``: whether the answer carries this partition, the
        cached offsets updated to what it carries."""
        respond = outcome.records_size > 0 or outcome.error
        if self.high_watermark != outcome.high_watermark:
            respond = True
            self.high_watermark = outcome.high_watermark
        if self.log_start_offset != outcome.log_start_offset:
            respond = True
            self.log_start_offset = outcome.log_start_offset
        if outcome.error:
            self.high_watermark = -1
        return respond


@dataclass(eq=False, slots=True)
class FetchSession:
    """One session: its partitions in fetch order (a partition answered with records moves to the end, so the
    others come first next time, within the request's byte limits), and the epoch its next request must carry."""

    id: int
    privileged: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1
    partitions: OrderedDict[Key, SessionEntry] = field(default_factory=OrderedDict)
    uses_topic_ids: bool = False  # its topic keys are ids (Fetch v13+), not names
    replica_id: int = -1  # a follower's session: the broker it was created for (quiet partitions need it)
    clock_ms: Callable[[], float] | None = None
    last_fetch_ms: float = 0.0  # the last fetch that left its quiet partitions out (the session's clock)
    unquieted: list[SessionEntry] = field(default_factory=list)  # cleared since the last context took them
    waiter: asyncio.Future[None] | None = None  # a waiting fetch's: resolved when a quiet partition is cleared

    @property
    def size(self) -> int:
        return len(self.partitions)

    def fetched_ms_ago(self) -> float:
        assert self.clock_ms is not None
        return self.clock_ms() - self.last_fetch_ms

    def update(self, wanted: Iterable[PartitionFetch], forgotten: Iterable[Key]) -> tuple[int, int, int]:
        """An incremental request's changes: ``(added, updated, removed)`` counts."""
        added = updated = removed = 0
        for p in wanted:
            cached = self.partitions.get(p.key)
            if cached is None:
                self.partitions[p.key] = SessionEntry(p, session=self if self.replica_id >= 0 else None)
                added += 1
            else:
                cached.request = p
                cached.quiet = False  # asked anew: looked at this round (the leader's mark goes dead)
                updated += 1
        for key in forgotten:
            cached = self.partitions.pop(key, None)
            if cached is not None:
                cached.quiet = False
                removed += 1
        return added, updated, removed


@dataclass(frozen=True, slots=True)
class FetchReply:
    """How a fetch answers: its error (no partition then), the session id it names, and which of the context's
    partitions it carries (by index, in the context's order)."""

    error: OdradekError | None
    session_id: int
    carried: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SessionStats:
    """Counters since start (``contexts`` by kind: sessionless, full, incremental, error) and the cache now."""

    sessions: int
    partitions: int
    evictions: int
    contexts: dict[str, int]


class FetchContext:
    """One fetch request's view of the sessions: which partitions it reads (:attr:`partitions`, in fetch order)
    and, once read, how it answers (:meth:`respond`)."""

    def __init__(self, cache: FetchSessionCache, kind: str, partitions: list[PartitionFetch], *,
                 session: FetchSession | None = None, epoch: int = FINAL_EPOCH, privileged: bool = False,
                 error: OdradekError | None = None, topic_ids: bool = False, replica_id: int = -1,
                 marks: list[SessionEntry] | None = None) -> None:
        self._cache = cache
        self.kind = kind
        self.partitions = partitions
        self.error = error
        self._session = session
        self._epoch = epoch
        self._privileged = privileged
        self._topic_ids = topic_ids
        self._replica_id = replica_id
        # A follower's incremental round that left the quiet partitions out: each partition's session entry, the
        # mark the leader's partition holds if its look finds it quiet again. None for every other context.
        self.marks = marks
        self._keys = {p.key for p in partitions} if marks is not None else set()

    @property
    def joinable(self) -> bool:
        """Whether partitions may join this fetch while it waits (it left its session's quiet ones out)."""
        return self.marks is not None

    def arm(self, waiter: asyncio.Future[None]) -> None:
        """``waiter`` is resolved when a partition left out as quiet is cleared (then :meth:`take_joined`), at
        once if one was cleared already; :meth:`disarm` when the wait is over."""
        session = self._session
        if session is None or self.marks is None:
            return
        session.waiter = waiter
        if session.unquieted and not waiter.done():
            waiter.set_result(None)

    def disarm(self, waiter: asyncio.Future[None]) -> None:
        session = self._session
        if session is not None and session.waiter is waiter:
            session.waiter = None

    def take_joined(self) -> list[tuple[PartitionFetch, SessionEntry]]:
        """The partitions left out as quiet that were cleared since (see the module docstring), now part of this
        context (appended to :attr:`partitions` and :attr:`marks`, so :meth:`respond` takes their outcomes after
        the others'); each once, and none the session no longer holds."""
        session = self._session
        if self.marks is None or session is None or not session.unquieted:
            return []
        taken, session.unquieted = session.unquieted, []
        joined = []
        for entry in taken:
            key = entry.request.key
            if key in self._keys or session.partitions.get(key) is not entry:
                continue  # already looked at in this fetch (its own wait covers it), or forgotten
            self._keys.add(key)
            self.partitions.append(entry.request)
            self.marks.append(entry)
            joined.append((entry.request, entry))
        return joined

    def respond(self, outcomes: Sequence[PartitionOutcome]) -> FetchReply:
        """The answer for ``outcomes`` (one per :attr:`partitions`, same order): a full fetch opens its session
        here, an incremental one keeps only the partitions with something new."""
        if self.error is not None:
            return FetchReply(self.error, INVALID_SESSION_ID, ())
        everything = tuple(range(len(self.partitions)))
        if self.kind == SESSIONLESS:
            return FetchReply(None, INVALID_SESSION_ID, everything)
        if self.kind == FULL:
            return FetchReply(None, self._cache.create(self._privileged, self.partitions, outcomes,
                                                       topic_ids=self._topic_ids, replica_id=self._replica_id),
                              everything)
        session = self._session
        assert session is not None
        if session.epoch != next_epoch(self._epoch):
            return FetchReply(InvalidFetchSessionEpochError(
                f"fetch session {session.id} moved to epoch {session.epoch} while a request of epoch {self._epoch} "
                "was served (a duplicate request?)"), session.id, ())
        carried = []
        for i, (p, outcome) in enumerate(zip(self.partitions, outcomes, strict=True)):
            cached = session.partitions.get(p.key)
            if cached is None:  # forgotten by a later request meanwhile: nothing to say of it
                continue
            if cached.must_respond(outcome):
                carried.append(i)
                if outcome.records_size > 0:
                    session.partitions.move_to_end(p.key)
        return FetchReply(None, session.id, tuple(carried))


class FetchSessionCache:
    """The broker's fetch sessions (see the module docstring); ``clock_ms``: monotonic milliseconds."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, eviction_ms: int = DEFAULT_EVICTION_MS, *,
                 clock_ms: Callable[[], int] | None = None, rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.eviction_ms = eviction_ms
        self._clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recently used first
        self._evictions = 0
        self._contexts = dict.fromkeys((SESSIONLESS, FULL, INCREMENTAL, ERROR), 0)

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def stats(self) -> SessionStats:
        return SessionStats(len(self._sessions), sum(s.size for s in self._sessions.values()), self._evictions,
                            dict(self._contexts))

    def new_context(self, session_id: int, epoch: int, wanted: Sequence[PartitionFetch],
                    forgotten: Iterable[Key] = (), *, privileged: bool = False,
                    topic_ids: bool = False, replica_id: int = -1) -> FetchContext:
        """The context of a request carrying ``(session_id, epoch)``, ``wanted`` partitions (in request order) and
        ``forgotten`` ones (Kafka's ``FetchManager.newContext``); ``topic_ids``: the request names topics by id
        (Fetch v13+), so its keys are ids (see the module docstring). ``replica_id``: a follower's fetch, from
        its broker's current registration (the caller checked): its session keeps quiet partitions, and an
        incremental round of it leaves them out (see the module docstring); -1 for every other fetch."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch: any session it names is closed
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            kind = FULL if epoch == INITIAL_EPOCH else SESSIONLESS
            return self._counted(FetchContext(self, kind, _distinct(wanted), privileged=privileged,
                                              topic_ids=topic_ids, replica_id=replica_id if privileged else -1))
        session = self._sessions.get(session_id)
        if session is None:
            return self._counted(FetchContext(self, ERROR, [], error=FetchSessionIdNotFoundError(
                f"fetch session {session_id} is not held by this broker (evicted, closed or never created)")))
        if session.epoch != epoch:
            return self._counted(FetchContext(self, ERROR, [], error=InvalidFetchSessionEpochError(
                f"fetch session {session_id} expects epoch {session.epoch}, not {epoch}")))
        if session.uses_topic_ids != topic_ids:
            held, asked = ("ids", "names") if session.uses_topic_ids else ("names", "ids")
            return self._counted(FetchContext(self, ERROR, [], error=FetchSessionTopicIdError(
                f"fetch session {session_id} names topics by {held}; a request naming them by {asked} cannot "
                "continue it: start a new session")))
        session.update(wanted, forgotten)
        if not session.partitions:
            self.remove(session_id)
            return self._counted(FetchContext(self, SESSIONLESS, _distinct(wanted)))
        self._touch(session)
        session.epoch = next_epoch(session.epoch)
        if replica_id >= 0 and session.replica_id == replica_id:
            session.last_fetch_ms = session.last_used_ms
            session.unquieted = []  # cleared entries are not quiet: this round looks at them anyway
            entries = [c for c in session.partitions.values() if not c.quiet]
            return self._counted(FetchContext(self, INCREMENTAL, [c.request for c in entries], session=session,
                                              epoch=epoch, marks=entries))
        return self._counted(FetchContext(self, INCREMENTAL, [c.request for c in session.partitions.values()],
                                          session=session, epoch=epoch))

    def create(self, privileged: bool, partitions: Sequence[PartitionFetch],
               outcomes: Sequence[PartitionOutcome], *, topic_ids: bool = False, replica_id: int = -1) -> int:
        """A new session holding ``partitions`` as just answered with ``outcomes``; its id, or 0 when there is no
        room and nothing may be evicted for it (Kafka's ``maybeCreateSession``)."""
        if not partitions:
            return INVALID_SESSION_ID
        now = self._clock_ms()
        if len(self._sessions) >= self.max_sessions and not self._evict_for(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, now, now, uses_topic_ids=topic_ids,
                               replica_id=replica_id, clock_ms=self._clock_ms, last_fetch_ms=now)
        owner = session if replica_id >= 0 else None
        for p, outcome in zip(partitions, outcomes, strict=True):
            session.partitions[p.key] = SessionEntry(p, -1 if outcome.error else outcome.high_watermark,
                                                outcome.log_start_offset, owner)
        self._sessions[session.id] = session
        return session.id

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def _touch(self, session: FetchSession) -> None:
        session.last_used_ms = self._clock_ms()
        self._sessions.move_to_end(session.id)

    def _evict_for(self, privileged: bool, size: int, now: int) -> bool:
        """Kafka's ``tryEvict``: the least recently used session if idle past the eviction time, else the least
        valuable evictable session if it is worth less than a new one of ``size`` partitions."""
        lru = next(iter(self._sessions.values()), None)
        if lru is None:
            return False
        if now - lru.last_used_ms > self.eviction_ms:
            return self._evict(lru)
        old_enough = [s for s in self._sessions.values() if now - s.created_ms > self.eviction_ms]
        # A follower's new session may also evict a consumer's session however young (Kafka's evictableByPrivileged).
        candidates = old_enough + [s for s in self._sessions.values()
                                   if privileged and not s.privileged and now - s.created_ms <= self.eviction_ms]
        if not candidates:
            return False
        cheapest = min(candidates, key=lambda s: (s.privileged, s.size, s.id))
        if (privileged, size) > (cheapest.privileged, cheapest.size):
            return self._evict(cheapest)
        return False

    def _evict(self, session: FetchSession) -> bool:
        self.remove(session.id)
        self._evictions += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, INT32_MAX)
            if session_id not in self._sessions:
                return session_id

    def _counted(self, context: FetchContext) -> FetchContext:
        self._contexts[context.kind] += 1
        return context


def _distinct(wanted: Sequence[PartitionFetch]) -> list[PartitionFetch]:
    """A full fetch's partitions, each once: a partition named twice keeps its first place and its last values
    (the request is a map, as in Kafka)."""
    by_key: dict[Key, PartitionFetch] = {}
    for p in wanted:
        by_key[p.key] = p
    if len(by_key) == len(wanted):
        return list(wanted)
    return list(by_key.values())

