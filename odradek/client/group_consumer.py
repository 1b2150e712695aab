"""The group consumer: ``subscribe`` to topics or a pattern and let the group spread partitions over members.

In the style of kafka-python's ``KafkaConsumer(group_id=...)`` and confluent-kafka's ``Consumer``: ``subscribe``
with ``on_assign``/``on_revoke``/``on_lost`` callbacks, ``poll``, iteration, ``commit``/``commit_async``,
``committed``, ``seek``, ``position``, ``pause``/``resume``, ``close`` (leaves the group at once) and per-partition
``lag``. Why a subclass of :class:`~odradek.client.consumer.Consumer`: fetching (prefetch per partition, epochs
that make seeks win over fetches in flight, leader failover) is the same; a group only decides *which* partitions
are read and where each starts (the committed offset, else ``auto_offset_reset``).

Rebalances (docs/consumer-groups.md): the membership thread (``group_membership``, driving the member state
machine of ``odradek.protocol.group_member``) joins and heartbeats; join answers are applied here, in the
application's thread, inside ``poll``: revoked partitions get ``on_revoke``, are committed when auto-commit is
on, and are dropped before the member joins again; the others keep being read (cooperative). Partitions *lost*
(a missed session, a fenced heartbeat or commit) are dropped at once and reported through ``on_lost`` (default:
``on_revoke``), never committed.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

from odradek.client.consumer import Consumer, _PartitionState
from odradek.client.group_membership import GroupApi, JoinResult, Membership, plan_rebalance
from odradek.client.types import ConsumerRecord, TopicPartition
from odradek.protocol.errors import CommitFailedError, InvalidConfigError, OdradekError

__all__ = ["CommitFailedError", "GroupConsumer", "OffsetAndMetadata"]

log = logging.getLogger(__name__)

Callback = Callable[["GroupConsumer", list[TopicPartition]], None]
CommitCallback = Callable[[dict[TopicPartition, "OffsetAndMetadata"], BaseException | None], None]
_ASSIGNORS = ("range", "roundrobin", "cooperative-sticky")


class OffsetAndMetadata(NamedTuple):
    """A committed position: ``offset`` is the next offset to read (Kafka's meaning)."""

    offset: int
    metadata: str = ""


class GroupConsumer(Consumer):
    """A member of consumer group ``group_id``. Not thread-safe (one thread polls); ``close()`` may come from
    another thread.

    Args (beyond :class:`Consumer`'s):
        group_id: the group.
        enable_auto_commit: commit the positions of returned records every ``auto_commit_interval_ms`` (from
            ``poll``), before a revocation and at ``close``. Off: call ``commit()`` after processing.
        session_timeout_ms: the coordinator expires a member whose heartbeats stop for this long; the member itself
            stops returning records of its partitions as soon as it may have been expired.
        max_poll_interval_ms: a member that does not call ``poll`` for this long leaves the group.
        heartbeat_interval_ms: at most a third of the session timeout.
        partition_assignment_strategy: ``"range"``, ``"roundrobin"`` or ``"cooperative-sticky"``.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        group_id: str,
        client_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5000,
        session_timeout_ms: int = 10_000,
        max_poll_interval_ms: int = 300_000,
        heartbeat_interval_ms: int = 3000,
        rebalance_timeout_ms: int | None = None,
        partition_assignment_strategy: str = "cooperative-sticky",
        auto_offset_reset: str = "latest",
        **consumer_kwargs: Any,
    ) -> None:
        if not group_id:
            raise InvalidConfigError("group_id is required")
        if partition_assignment_strategy not in _ASSIGNORS:
            raise InvalidConfigError(f"partition_assignment_strategy must be one of {_ASSIGNORS}")
        if session_timeout_ms < 3 or auto_commit_interval_ms < 1 or max_poll_interval_ms < 1:
            raise InvalidConfigError("timeouts and intervals must be positive")
        super().__init__(bootstrap_servers, auto_offset_reset=auto_offset_reset, **consumer_kwargs)
        self.group_id = group_id
        self._auto_commit = enable_auto_commit
        self._auto_commit_s = auto_commit_interval_ms / 1000.0
        self._next_auto_commit = time.monotonic() + self._auto_commit_s
        self._paused: dict[TopicPartition, _PartitionState] = {}
        self._iter_pos: dict[TopicPartition, int] = {}  # iteration: next offset after the record being processed
        self._events: list[tuple[str, Any]] = []  # from the membership thread, applied by poll
        self._events_lock = threading.Lock()
        self._on_assign: Callback | None = None
        self._on_revoke: Callback | None = None
        self._on_lost: Callback | None = None
        self._generation = -1  # of the assignment applied (set by poll's thread; a loss resets it at once)
        self._committer: ThreadPoolExecutor | None = None
        self._stats = {"records": 0, "commits": 0, "commit_failures": 0, "rebalances": 0, "lost": 0}
        self._api = GroupApi(self._transport, group_id, self._group_urls, self._request_timeout_ms)
        self._membership = Membership(
            self._api, self, client_id=client_id or f"odradek-python-{socket.gethostname()}-{os.getpid()}",
            assignor=partition_assignment_strategy, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms or max_poll_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            retry_backoff_ms=int(self._backoff * 1000),
        )

    # -------------------------------------------------------------------------------------- subscription

    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: str | None = None,
                  on_assign: Callback | None = None, on_revoke: Callback | None = None,
                  on_lost: Callback | None = None) -> None:
        """Join the group for ``topics`` or for every topic matching the regular expression ``pattern``.

        Callbacks run in the thread calling ``poll``: ``on_assign(consumer, added)`` for partitions newly assigned,
        ``on_revoke(consumer, revoked)`` before partitions move away (commit there when auto-commit is off),
        ``on_lost(consumer, lost)`` after partitions were taken away without a rebalance (default: on_revoke).
        """
        if (topics is None) == (pattern is None):
            raise InvalidConfigError("subscribe to topics or to a pattern, not both and not neither")
        names = None if topics is None else sorted({str(t) for t in ([topics] if isinstance(topics, str) else topics)})
        if names is not None and not names:
            raise InvalidConfigError("subscribe to at least one topic")
        if pattern is not None:
            import re

            try:
                re.compile(pattern)
            except re.error as exc:
                raise InvalidConfigError(f"pattern is not a regular expression: {exc}") from None
        self._on_assign, self._on_revoke, self._on_lost = on_assign, on_revoke, on_lost
        if names:
            self._metadata.add_topics(names)
        self._membership.last_poll = time.monotonic()
        self._membership.subscribe(names, pattern)

    def subscription(self) -> set[str]:
        return set(self._membership.topics or [])

    def unsubscribe(self) -> None:
        """Give up every partition (on_revoke, commit if auto) and leave the group."""
        self._revoke(self.assignment())
        self._membership.close(leave=True)
        self._membership = Membership(self._api, self, client_id=self._membership.client_id,
                                      assignor=self._membership.assignor,
                                      session_timeout_ms=int(self._membership.session_timeout_s * 1000),
                                      rebalance_timeout_ms=self._membership.rebalance_timeout_ms,
                                      max_poll_interval_ms=int(self._membership.max_poll_interval_s * 1000),
                                      heartbeat_interval_ms=int(self._membership.heartbeat_interval_s * 1000),
                                      retry_backoff_ms=int(self._backoff * 1000))

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        raise InvalidConfigError("a group consumer's partitions come from subscribe(); use Consumer to assign")

    def assignment(self) -> set[TopicPartition]:
        return set(self._states) | set(self._paused)

    @property
    def member_id(self) -> str | None:
        return self._membership.member_id

    @property
    def generation(self) -> int:
        """The generation of the assignment ``poll`` serves (-1 when none): Kafka's ``groupMetadata()``. A join
        answered but not yet applied by ``poll`` does not count, so the records ``poll`` returned and the
        generation read after it belong together (``send_offsets_to_transaction`` fences with it)."""
        return self._generation

    # --------------------------------------------------------------------------------------------- poll

    def poll(self, timeout_ms: float = 0, max_records: int | None = None) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of the partitions this member owns, waiting up to ``timeout_ms``; runs callbacks and
        auto-commits. Never returns a record of a partition whose session may have expired."""
        if self._closed:
            raise RuntimeError("poll() after close()")
        deadline = time.monotonic() + max(0.0, timeout_ms) / 1000.0
        while True:
            self._coordinate()
            remaining_ms = max(0.0, (deadline - time.monotonic()) * 1000.0)
            # Slices, so an assignment that arrives while we wait is picked up before the deadline.
            out = super().poll(min(remaining_ms, 100.0), max_records) if self._states else {}
            if out:
                if self._membership.lose_if_expired():
                    out = {}
                else:
                    owned = self._states
                    out = {tp: recs for tp, recs in out.items() if tp in owned}
                    self._stats["records"] += sum(len(r) for r in out.values())
                if out:
                    return out
            if time.monotonic() >= deadline or self._closed:
                return {}
            if not self._states:
                with self._cond:
                    self._cond.wait(min(0.1, max(0.0, deadline - time.monotonic())))

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records one at a time until ``close()`` (or ``consumer_timeout_ms`` without records).

        Polls in batches for speed, yet ``commit()`` inside the loop commits only up to the record being
        processed (``_iter_pos``), and a partition lost meanwhile yields nothing more.
        """
        idle_since = time.monotonic()
        pos = self._iter_pos
        while not self._closed:
            try:
                batch = self.poll(timeout_ms=self._max_wait_ms, max_records=500)
            except RuntimeError:
                if self._closed:
                    return
                raise
            for tp, records in batch.items():
                pos[tp] = records[0].offset
            try:
                for tp, records in batch.items():
                    for r in records:
                        if tp not in self._states:
                            break  # revoked or lost: hand out nothing more of it
                        pos[tp] = r.offset + 1
                        yield r
            finally:
                pos.clear()
            if batch:
                idle_since = time.monotonic()
            elif (self._consumer_timeout_ms is not None
                    and time.monotonic() - idle_since >= self._consumer_timeout_ms / 1000.0):
                return

    # ------------------------------------------------------------------------------------------ commits

    def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit ``offsets`` (next offsets to read), or the positions of every owned partition; synchronous.

        Raises:
            CommitFailedError: the group moved to a newer generation without this member (fenced commit).
        """
        self._send_commit(self._commit_body(offsets))

    def commit_async(self, offsets: dict[TopicPartition, OffsetAndMetadata | int] | None = None,
                     callback: CommitCallback | None = None) -> Future[None]:
        """Commit on a background thread; ``callback(offsets, error_or_None)`` runs there afterwards."""
        body = self._commit_body(offsets)
        if self._committer is None:
            self._committer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-commit")

        def run() -> None:
            error: BaseException | None = None
            try:
                self._send_commit(body)
            except Exception as exc:  # reported to the callback, as kafka-python does
                error = exc
            if callback is not None:
                callback(body, error)
            elif error is not None:
                log.warning("group %s: async commit failed: %s", self.group_id, error)

        return self._committer.submit(run)

    def committed(self, tp: TopicPartition, metadata: bool = False) -> int | OffsetAndMetadata | None:
        """The group's committed offset of ``tp`` (None when nothing was committed)."""
        tp = TopicPartition(*tp)
        found = self._api.committed({tp.topic}).get(tp)
        if found is None:
            return None
        return OffsetAndMetadata(*found) if metadata else found[0]

    def _commit_body(self, offsets: dict[TopicPartition, OffsetAndMetadata | int] | None
                     ) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            with self._cond:
                states = {**self._states, **self._paused}
                iterated = self._iter_pos
                return {tp: OffsetAndMetadata(iterated.get(tp, s.position)) for tp, s in states.items()
                        if s.position is not None}
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, o in offsets.items():
            om = o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            if om.offset < 0:
                raise ValueError(f"offset of {tp} must be >= 0")
            out[TopicPartition(*tp)] = om
        return out

    def _send_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        if not offsets:
            return
        member, generation = self._membership.fencing()
        if member is None:
            self._stats["commit_failures"] += 1
            raise CommitFailedError("this member is not in the group (rejoining); the commit was not sent")
        payload = {"member_id": member, "generation": generation, "offsets": [
            {"topic": tp.topic, "partition": tp.partition, "offset": om.offset, "metadata": om.metadata}
            for tp, om in sorted(offsets.items())]}
        try:
            self._api.call("POST", "offsets", payload=payload)
        except OdradekError as exc:
            self._stats["commit_failures"] += 1
            if self._membership.commit_failed(exc, member, generation):  # fenced: told apart by the error's type
                raise CommitFailedError(f"the group refused the commit: {exc.message}") from exc
            raise
        self._stats["commits"] += 1

    # ------------------------------------------------------------------------------ positions, pause, lag

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of ``partitions`` (they stay assigned; positions are kept)."""
        with self._cond:
            states = dict(self._states)
            for tp in partitions:
                tp = TopicPartition(*tp)
                if tp in states:
                    self._paused[tp] = states.pop(tp)
                elif tp not in self._paused:
                    raise ValueError(f"{tp} is not assigned to this consumer")
            self._set_states(states)

    def resume(self, *partitions: TopicPartition) -> None:
        with self._cond:
            states = dict(self._states)
            for tp in partitions:
                state = self._paused.pop(TopicPartition(*tp), None)
                if state is not None:
                    states[TopicPartition(*tp)] = state
            self._set_states(states)

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def lag(self) -> dict[TopicPartition, int]:
        """High watermark minus position, per owned partition with a known position (asks each leader)."""
        out: dict[TopicPartition, int] = {}
        for tp in sorted(self.assignment()):
            state = self._state(tp)
            if state.position is None:
                continue
            end = int(self._offsets(tp)["end_offset"])
            out[tp] = max(0, end - state.position)
        return out

    def metrics(self) -> dict[str, Any]:
        """Counters since start, the assignment and the lag per partition (``"topic-partition"`` keys)."""
        return {**self._stats, "joins": self._membership.joins, "generation": self.generation,
                "member_id": self.member_id, "assignment": sorted(str(tp) for tp in self.assignment()),
                "paused": sorted(str(tp) for tp in self._paused),
                "lag": {str(tp): n for tp, n in self.lag().items()}}

    def _state(self, tp: TopicPartition) -> _PartitionState:
        tp = TopicPartition(*tp)
        state = self._states.get(tp) or self._paused.get(tp)
        if state is None:
            raise ValueError(f"{tp} is not assigned to this consumer")
        return state

    # ------------------------------------------------------------------------------------------- close

    def close(self, autocommit: bool = True) -> None:
        """Commit (when auto-commit is on), leave the group at once, and stop; the group rebalances now rather
        than after a session timeout."""
        if self._closed:
            return
        if autocommit and self._auto_commit and self._membership.member_id is not None:
            try:
                self.commit()
            except OdradekError as exc:
                log.info("group %s: commit at close failed: %s", self.group_id, exc)
        self._membership.close(leave=True)
        if self._committer is not None:
            self._committer.shutdown(wait=True)
        super().close()

    # ------------------------------------------------------------------- the membership thread's callbacks

    def owned_partitions(self) -> set[TopicPartition]:
        return self.assignment()

    def on_join(self, result: JoinResult) -> None:
        self._push(("join", result))

    def on_lost(self, reason: str) -> None:
        """Membership thread: drop everything now, so not one more record of these partitions is handed out."""
        lost = self.assignment()
        self._drop(lost)
        self._generation = -1
        with self._events_lock:  # a join answer not applied yet is as stale as the partitions
            self._events = [e for e in self._events if e[0] != "join"]
        if lost:
            log.warning("group %s: lost %d partitions: %s", self.group_id, len(lost), reason)
            self._push(("lost", lost))

    # --------------------------------------------------------------------------------------- internals

    def _group_urls(self) -> list[str]:
        return self._metadata.broker_urls()

    def _push(self, event: tuple[str, Any]) -> None:
        with self._events_lock:
            self._events.append(event)
        with self._cond:
            self._arrived += 1
            self._cond.notify_all()

    def _set_states(self, states: dict[TopicPartition, _PartitionState]) -> None:
        """Replace (never mutate) the state map: the fetch path iterates it without the lock."""
        self._states = states
        self._order = list(states)
        self._next = 0

    def _drop(self, partitions: set[TopicPartition]) -> None:
        with self._cond:
            self._set_states({tp: s for tp, s in self._states.items() if tp not in partitions})
            for tp in partitions:
                self._paused.pop(tp, None)

    def _coordinate(self) -> None:
        """Apply what the membership thread reported, and auto-commit when due (application thread)."""
        self._membership.last_poll = time.monotonic()
        self._membership.lose_if_expired()
        with self._events_lock:
            events, self._events = self._events, []
        for kind, payload in events:
            if kind == "lost":
                self._stats["lost"] += 1
                callback = self._on_lost or self._on_revoke
                if callback is not None:
                    callback(self, sorted(payload))
            else:
                self._apply_join(payload)
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self._auto_commit_s
            if self._membership.member_id is not None and self.assignment():
                self.commit_async()

    def _apply_join(self, result: JoinResult) -> None:
        plan = plan_rebalance(self.assignment(), result)
        self._stats["rebalances"] += 1
        self._generation = result.generation
        if plan.revoked:
            self._revoke(set(plan.revoked))
        if plan.added:
            self._add(set(plan.added))
        self._membership.applied(rejoin=plan.must_rejoin)

    def _revoke(self, partitions: set[TopicPartition]) -> None:
        if not partitions:
            return
        if self._on_revoke is not None:
            self._on_revoke(self, sorted(partitions))
        if self._auto_commit:
            with self._cond:
                states = {**self._states, **self._paused}
                offsets = {tp: OffsetAndMetadata(states[tp].position) for tp in partitions  # type: ignore[arg-type]
                           if tp in states and states[tp].position is not None}
            try:
                self._send_commit(offsets)
            except OdradekError as exc:
                log.warning("group %s: commit before revoking failed: %s", self.group_id, exc)
        self._drop(partitions)

    def _add(self, partitions: set[TopicPartition]) -> None:
        """Start each new partition at the group's committed offset, else by ``auto_offset_reset``."""
        self._metadata.add_topics({tp.topic for tp in partitions})
        try:
            committed = self._api.committed({tp.topic for tp in partitions})
        except OdradekError as exc:
            log.warning("group %s: cannot read committed offsets (%s); rejoining", self.group_id, exc)
            self._membership.rejoin()
            return
        with self._cond:
            states = dict(self._states)
            for tp in partitions:
                state = _PartitionState(None)
                found = committed.get(tp)
                if found is not None:
                    state.position = found[0]
                else:
                    state.reset = self._reset
                states[tp] = state
            self._set_states(states)
        if self._on_assign is not None:
            self._on_assign(self, sorted(partitions))
