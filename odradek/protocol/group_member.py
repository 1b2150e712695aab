"""The member side of the group protocol as a sans-I/O state machine (the pattern of h11 and wsproto).

Why sans-I/O: two drivers run the same member rules, the Python ``GroupConsumer`` (threads and blocking HTTP:
odradek/client/group_membership.py) and the broker's REST v2 consumer instances (asyncio, calling the
coordinator in-process or over the inter-broker client: broker/rest_consumers.py). Here nothing sends, sleeps
or locks: a driver feeds in what happened (a join answer, a heartbeat answer or its typed error, a commit's
typed error, a poll, a close) with the monotonic time it happened, and performs the actions it gets back. Why in
``odradek.protocol``: the broker imports it without importing the client's transport.

The protocol (docs/consumer-groups.md): a join long-polls until the rebalance completes and answers with the
member's assignment (Kafka's JoinGroup and SyncGroup in one), heartbeats keep the session between joins, a
leave ends it at once, commits are fenced by (member id, generation).

How a driver runs it:

* after any input, call ``tick(now)`` and perform what it returns; call it again by ``next_deadline()``;
* ``SendJoin``/``SendHeartbeat``/``SendLeave``: send the request; feed the answer back with ``join_succeeded``
  / ``join_failed`` / ``heartbeat_succeeded`` / ``heartbeat_failed``;
* ``Revoke`` then ``Assign`` (from ``join_succeeded``): give up the revoked partitions (commit them first when
  auto-committing: the member still holds the generation that owns them), start the assigned ones, then call
  ``applied``. Until then no other join is sent: a join carries what the member owns, stale until applied;
* ``Lost``: the partitions may belong to someone else already: drop them at once, without committing.

Invariants:

* errors are told apart by type (``isinstance`` of ``odradek.protocol.errors``), never by name;
* at most one join and one heartbeat in flight; an answer to a heartbeat sent for a member id or generation that
  is no longer this member's is stale and ignored (a newer join or a loss already decided);
* while a join is in flight, the join decides: a heartbeat's fencing error then changes nothing, and
  REBALANCE_IN_PROGRESS only proves the session alive;
* liveness: the coordinator expires a member ``session_timeout_ms`` after the last heartbeat it received, so the
  member counts from the *send* of its last good heartbeat (or the arrival of a join answer: the coordinator's
  clock for it restarts then) and gives up at ``SESSION_MARGIN`` of the session, before the coordinator can
  have expired it, whatever the coordinator's check granularity;
* a loss resets the generation (so no commit of the old one is sent), clears what the member owns, and asks
  for a join; losing the member id too (UNKNOWN_MEMBER_ID, an expired session) makes the next join a new member's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from odradek.protocol.errors import IllegalGenerationError, RebalanceInProgressError, UnknownMemberIdError
from odradek.protocol.model import TopicPartition

__all__ = [
    "SESSION_MARGIN", "Action", "Assign", "Fencing", "GroupMember", "JoinResult", "JoinSpec", "Lost",
    "RebalancePlan", "Revoke", "SendHeartbeat", "SendJoin", "SendLeave", "is_commit_fenced", "plan_rebalance",
]

# A member stops consuming after this share of its session without a good heartbeat (counted from the send).
SESSION_MARGIN = 0.8
# next_deadline's nudge past the session limit, which is strict (>): a wake-up there finds the session expired.
_EPSILON_S = 0.001

# States, for logs and tests (``GroupMember.state``).
UNJOINED = "unjoined"  # no member id: the next join is a new member's
JOINING = "joining"  # a join is in flight
APPLYING = "applying"  # a join answer is being applied (revoke, assign)
STABLE = "stable"  # a member of its generation, heartbeating
CLOSED = "closed"


# ---------------------------------------------------------------------------------------------- join answers


@dataclass(frozen=True)
class JoinResult:
    """A join's answer: the member's id and generation, what it may consume, and what it must give up."""

    member_id: str
    generation: int
    assignment: frozenset[TopicPartition]
    revoke: frozenset[TopicPartition] = frozenset()
    assignor: str = ""
    coordinator: int | None = None

    @staticmethod
    def parse(body: dict[str, Any]) -> JoinResult:
        def tps(key: str) -> frozenset[TopicPartition]:
            return frozenset(TopicPartition(str(t), int(p)) for t, p in body.get(key) or ())

        coord = body.get("coordinator")
        return JoinResult(str(body["member_id"]), int(body["generation"]), tps("assignment"), tps("revoke"),
                          str(body.get("assignor") or ""), int(coord) if coord is not None else None)


@dataclass(frozen=True)
class RebalancePlan:
    """What the member does with a join answer, given what it owns now."""

    keep: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition] = field(default=frozenset())
    # The answer named partitions to revoke: give them up, then join again so they can move on (cooperative).
    must_rejoin: bool = False


def plan_rebalance(owned: set[TopicPartition] | frozenset[TopicPartition], result: JoinResult) -> RebalancePlan:
    """Split a join answer into kept, added and revoked partitions.

    Cooperative and eager answers differ only here: anything owned that the answer does not assign is revoked
    (an eager assignor answers with the new assignment only), and no second join is needed for it; a partition
    named in ``revoke`` (the cooperative handover) is given up and the member joins again so that it can move,
    and it is never consumed, even if also listed as assigned.
    """
    target = result.assignment - result.revoke
    revoked = frozenset(tp for tp in owned if tp in result.revoke or tp not in target)
    keep = frozenset(tp for tp in owned if tp not in revoked)
    added = frozenset(tp for tp in target if tp not in owned)
    return RebalancePlan(keep, added, revoked, bool(result.revoke))


# --------------------------------------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A join request, as the group API takes it (``to_json``: the body of ``POST /groups/{g}/members``)."""

    member_id: str | None
    client_id: str
    assignor: str
    topics: tuple[str, ...] | None
    pattern: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int  # the longest the coordinator may hold the join: a driver's timeout adds to it
    max_poll_interval_ms: int
    owned: tuple[TopicPartition, ...]

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "client_id": self.client_id, "assignor": self.assignor, "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms, "max_poll_interval_ms": self.max_poll_interval_ms,
            "owned": [[tp.topic, tp.partition] for tp in self.owned],
        }
        if self.member_id is not None:
            body["member_id"] = self.member_id
        if self.pattern is not None:
            body["pattern"] = self.pattern
        else:
            body["topics"] = list(self.topics or ())
        return body


@dataclass(frozen=True, slots=True)
class SendJoin:
    spec: JoinSpec


@dataclass(frozen=True, slots=True)
class SendHeartbeat:
    member_id: str
    generation: int


@dataclass(frozen=True, slots=True)
class SendLeave:
    member_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class Revoke:
    """Give these up (commit first if auto-committing), then drop them; part of applying ``generation``."""

    partitions: frozenset[TopicPartition]
    generation: int


@dataclass(frozen=True, slots=True)
class Assign:
    """Start consuming these (at the committed offset, else by the reset policy); part of applying
    ``generation``."""

    partitions: frozenset[TopicPartition]
    generation: int


@dataclass(frozen=True, slots=True)
class Lost:
    """Drop ``partitions`` now, without committing: another member may own them already. Always emitted on a
    loss, even with nothing owned, since a join answer not applied yet is as stale as the partitions."""

    partitions: frozenset[TopicPartition]
    reason: str


Action = SendJoin | SendHeartbeat | SendLeave | Revoke | Assign | Lost


class Fencing(NamedTuple):
    """What a commit carries so that the coordinator refuses it from anyone but a current member."""

    member_id: str
    generation: int


def is_commit_fenced(error: BaseException) -> bool:
    """The group refused a commit because this member is not (or no longer) a member of the current generation."""
    return isinstance(error, UnknownMemberIdError | IllegalGenerationError | RebalanceInProgressError)


# ----------------------------------------------------------------------------------------------- the machine


class GroupMember:
    """One member's state: identity (member id, generation), subscription, what it owns, and its timers.

    Not thread-safe: a threaded driver holds a lock around every call. Times are ``time.monotonic()`` seconds,
    passed in. ``leave_on_poll_timeout``: leave the group when ``polled`` was not called for
    ``max_poll_interval_ms`` (the Python consumer); off where the host expires idle members itself (REST
    instances are deleted, committing and leaving, after their own timeout).
    """

    def __init__(self, *, client_id: str, assignor: str, session_timeout_ms: int, rebalance_timeout_ms: int,
                 max_poll_interval_ms: int, heartbeat_interval_ms: int, retry_backoff_ms: int, now: float,
                 leave_on_poll_timeout: bool = True) -> None:
        self.client_id = client_id
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.heartbeat_interval_s = min(heartbeat_interval_ms, session_timeout_ms // 3) / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.leave_on_poll_timeout = leave_on_poll_timeout
        self.member_id: str | None = None
        self.generation = -1
        self.topics: list[str] | None = None
        self.pattern: str | None = None
        self.assignment: frozenset[TopicPartition] = frozenset()  # what the member owns (as last applied)
        self.alive_since: float | None = None  # send time of the last good heartbeat, or a join answer's arrival
        self.join_in_flight = False
        self.last_poll = now
        self.joins = 0
        self.closed = False
        self._subscribed = False
        self._need_join = False
        self._retry_join_at = 0.0
        self._left_for_poll = False  # left on max_poll_interval_ms: no join until the application polls
        self._plan: RebalancePlan | None = None  # the join answer being applied
        self._next_heartbeat = 0.0
        self._beat: SendHeartbeat | None = None  # the heartbeat in flight
        self._beat_sent_at = 0.0
        self._beat_during_join = False

    # ----------------------------------------------------------------------------------------- reading

    @property
    def state(self) -> str:
        if self.closed:
            return CLOSED
        if self.join_in_flight:
            return JOINING
        if self._plan is not None:
            return APPLYING
        return STABLE if self.member_id is not None else UNJOINED

    @property
    def pending_generation(self) -> int | None:
        """The generation of the join answer being applied; None when none is (applied, or lost meanwhile)."""
        return self.generation if self._plan is not None else None

    @property
    def waiting_for_poll(self) -> bool:
        return self._left_for_poll

    def session_expired(self, now: float) -> bool:
        """True when the coordinator may already have expired this member: stop consuming at once."""
        if self.member_id is None or self.alive_since is None:
            return False
        return now - self.alive_since > self.session_timeout_ms / 1000.0 * SESSION_MARGIN

    def commit_fencing(self) -> Fencing | None:
        """What a commit must carry now; None when this member is not in the group (a commit would be refused)."""
        return Fencing(self.member_id, self.generation) if self.member_id is not None else None

    def next_deadline(self) -> float | None:
        """When ``tick`` has something to do at the latest (a heartbeat, a session check, a join after its
        backoff, the poll interval); None when only an input can change anything."""
        if self.closed:
            return None
        times: list[float] = []
        if self.member_id is not None:
            if self._beat is None:
                times.append(self._next_heartbeat)
            if self.alive_since is not None:
                times.append(self.alive_since + self.session_timeout_ms / 1000.0 * SESSION_MARGIN + _EPSILON_S)
            if self.leave_on_poll_timeout and not self._left_for_poll:
                times.append(self.last_poll + self.max_poll_interval_ms / 1000.0 + _EPSILON_S)
        if self._may_join():
            times.append(self._retry_join_at)
        return min(times) if times else None

    # --------------------------------------------------------------------------------- application inputs

    def subscribe(self, topics: Iterable[str] | None, pattern: str | None) -> list[Action]:
        self.topics = None if topics is None else list(topics)
        self.pattern = pattern
        self._subscribed = True
        self._need_join = True
        return []

    def rejoin(self) -> list[Action]:
        """Join again (a subscription change, an assignment the application could not start)."""
        self._need_join = True
        return []

    def polled(self, now: float) -> list[Action]:
        self.last_poll = now
        if self._left_for_poll:
            self._left_for_poll = False
            self._need_join = True
        return []

    def applied(self, owned: Iterable[TopicPartition] | None = None) -> list[Action]:
        """The join answer's ``Revoke``/``Assign`` were performed. ``owned``: what the member owns now, when it
        differs from the plan (an assignment it could not start); by default the plan's result."""
        plan, self._plan = self._plan, None
        if plan is None:
            return []  # lost meanwhile: nothing of that answer stands
        self.assignment = frozenset(owned) if owned is not None else plan.keep | plan.added
        if plan.must_rejoin:
            self._need_join = True
        return []

    def close(self) -> list[Action]:
        """Stop: no request after this one (the leave, if a member)."""
        member, self.member_id = self.member_id, None
        self.closed = True
        self._plan = None
        return [SendLeave(member, "closed")] if member is not None else []

    # ----------------------------------------------------------------------------------------------- time

    def tick(self, now: float) -> list[Action]:
        """What is due at ``now``: a leave on the poll interval, a loss on the session, a join, a heartbeat."""
        if self.closed:
            return []
        out: list[Action] = []
        if (self.member_id is not None and self.leave_on_poll_timeout and not self._left_for_poll
                and now - self.last_poll > self.max_poll_interval_ms / 1000.0):
            member = self.member_id
            out += self._lose("max_poll_interval_ms exceeded", forget=True)
            out.append(SendLeave(member, "max_poll_interval_ms exceeded"))
            self._left_for_poll = True
            return out
        out += self.expire(now)
        if self._may_join() and now >= self._retry_join_at:
            out.append(self._join())
        if self.member_id is not None and self._beat is None and now >= self._next_heartbeat:
            self._beat = SendHeartbeat(self.member_id, self.generation)
            self._beat_sent_at, self._beat_during_join = now, self.join_in_flight
            out.append(self._beat)
        return out

    def expire(self, now: float) -> list[Action]:
        """A loss if the session may have expired (``tick`` checks this too; a consumer checks it before handing
        out records, without waiting for its driver)."""
        return self._lose("session timed out", forget=True) if self.session_expired(now) else []

    # ---------------------------------------------------------------------------------------------- joins

    def join_succeeded(self, result: JoinResult, now: float) -> list[Action]:
        self.join_in_flight = False
        if self.closed:
            return []
        self.member_id, self.generation = result.member_id, result.generation
        # The coordinator has just answered (a join long-polls, possibly longer than the session): its session
        # clock for this member restarts about now, not when the join was sent.
        self.alive_since = now
        self.joins += 1
        plan = plan_rebalance(self.assignment, result)
        self._plan = plan
        out: list[Action] = []
        if plan.revoked:
            out.append(Revoke(plan.revoked, result.generation))
        if plan.added:
            out.append(Assign(plan.added, result.generation))
        return out

    def join_failed(self, error: BaseException, now: float) -> list[Action]:
        """UNKNOWN_MEMBER_ID: join again at once, as a new member (whatever was owned is lost). Anything else
        (a rebalance that did not complete in time, the coordinator moving, a transport failure): join again
        after the backoff, keeping the member id and what is owned."""
        self.join_in_flight = False
        self._need_join = True
        if self.closed:
            return []
        if isinstance(error, UnknownMemberIdError):
            return self._lose("the coordinator does not know this member", forget=True)
        self._retry_join_at = now + self.retry_backoff_s
        return []

    # ------------------------------------------------------------------------------------------ heartbeats

    def heartbeat_succeeded(self, now: float, *, rebalance: bool) -> list[Action]:
        """``rebalance``: the coordinator wants this member to join again (it has partitions to revoke)."""
        beat, sent, during_join = self._beat_done(now)
        if beat is None:
            return []
        self.alive_since = max(sent, self.alive_since or 0.0)
        if rebalance and not during_join:
            self._need_join = True
        return []

    def heartbeat_failed(self, error: BaseException, now: float) -> list[Action]:
        beat, sent, during_join = self._beat_done(now)
        if beat is None:
            return []
        if isinstance(error, RebalanceInProgressError):  # the coordinator saw the beat: the session is alive
            self.alive_since = max(sent, self.alive_since or 0.0)
            if not during_join:
                self._need_join = True
            return []
        if during_join:
            return []  # the join in flight decides
        if isinstance(error, UnknownMemberIdError):
            return self._lose(f"heartbeat answered {error.name}", forget=True)
        if isinstance(error, IllegalGenerationError):
            return self._lose(f"heartbeat answered {error.name}", forget=False)
        return []  # the coordinator moving, a transport failure: the next beat retries, the session decides

    # --------------------------------------------------------------------------------------------- commits

    def commit_failed(self, error: BaseException, fencing: Fencing | None, now: float) -> list[Action]:
        """A commit refused by fencing means what a heartbeat refused the same way means, if it was sent for
        this member's current generation and no rebalance of its own is under way (a join in flight or an
        answer being applied decides then, as for heartbeats). Other failures change nothing."""
        if (fencing is None or fencing != self.commit_fencing() or self.join_in_flight or self._plan is not None
                or self.closed):
            return []
        if isinstance(error, UnknownMemberIdError):
            return self._lose(f"a commit was answered {error.name}", forget=True)
        if isinstance(error, IllegalGenerationError):
            return self._lose(f"a commit was answered {error.name}", forget=False)
        if isinstance(error, RebalanceInProgressError):
            self._need_join = True
        return []

    # ----------------------------------------------------------------------------------------------- inner

    def _may_join(self) -> bool:
        return (self._subscribed and self._need_join and not self.join_in_flight and self._plan is None
                and not self._left_for_poll and not self.closed)

    def _join(self) -> SendJoin:
        self._need_join = False
        self.join_in_flight = True
        return SendJoin(JoinSpec(
            self.member_id, self.client_id, self.assignor, None if self.topics is None else tuple(self.topics),
            self.pattern, self.session_timeout_ms, self.rebalance_timeout_ms, self.max_poll_interval_ms,
            tuple(sorted(self.assignment))))

    def _beat_done(self, now: float) -> tuple[SendHeartbeat | None, float, bool]:
        """Close the heartbeat in flight; return it, or None when its answer is stale (for another member id or
        generation than the current ones: a loss or a newer join decided since it was sent)."""
        beat, self._beat = self._beat, None
        self._next_heartbeat = now + self.heartbeat_interval_s
        if beat is None or self.closed or (beat.member_id, beat.generation) != (self.member_id, self.generation):
            return None, 0.0, False
        # A join started after the beat was sent decides as much as one in flight when it was sent.
        return beat, self._beat_sent_at, self._beat_during_join or self.join_in_flight

    def _lose(self, reason: str, *, forget: bool) -> list[Action]:
        lost = self.assignment
        if forget:
            self.member_id = None
        self.generation = -1
        self.alive_since = None
        self.assignment = frozenset()
        self._plan = None
        self._need_join = True
        return [Lost(lost, reason)]
