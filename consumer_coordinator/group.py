"""One consumer group's state machine, as pure logic: time comes in as ``now_ms``, ZooKeeper work goes out as
return values the coordinator applies (releases first, then claims).

States (Kafka's GroupMetadata): ``Empty`` (no members; offsets kept), ``PreparingRebalance`` (waiting for the
known members to join, bounded by the largest rebalance timeout), ``CompletingRebalance`` (an assignment is
being written to ZooKeeper), ``Stable`` and ``Dead`` (deleted or unloaded). Legal moves:

    Empty -> PreparingRebalance            a member joins
    Stable | CompletingRebalance -> PreparingRebalance
                                           join, leave, member timeout, subscription or metadata change
    PreparingRebalance -> CompletingRebalance
                                           every known member joined (after the stabilization window), or
                                           the rebalance timeout passed (members that did not join are removed)
    CompletingRebalance -> Stable | Empty  the assignment is in ZooKeeper
    Empty -> Dead                          deleted, or its offsets expired (offsets.retention.minutes)

Ownership: ``owners`` mirrors the owners znodes. A partition is granted only when nobody else owns it, so the
handover of a moved partition takes two generations (``assignors.handover``), whichever assignor runs.

Concurrency: owned by the coordinator's event task; no locks, no awaits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from consumer_coordinator import assignors
from consumer_coordinator.assignors import TP
from odradek.protocol.errors import (
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

KIND = "server"  # the kind the views name these groups (the state znode of Kafka-protocol groups says "classic")
EMPTY = "Empty"
PREPARING = "PreparingRebalance"
COMPLETING = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    topics: frozenset[str] | None
    pattern: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    last_heartbeat_ms: int
    assignment: list[TP] = field(default_factory=list)
    revoke: list[TP] = field(default_factory=list)
    joined: bool = False  # has joined the rebalance in progress

    def subscribes(self, topic: str) -> bool:
        if self.topics is not None and topic in self.topics:
            return True
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None

    def to_json(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "host": self.host,
                "subscription": None if self.topics is None else sorted(self.topics), "pattern": self.pattern,
                "session_timeout_ms": self.session_timeout_ms, "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "last_heartbeat_ms": self.last_heartbeat_ms}


@dataclass(frozen=True, slots=True)
class Completion:
    """What a completed rebalance asks of ZooKeeper, in order: release, then claim."""

    removed: list[str]
    release: list[tuple[TP, str]]
    claim: list[tuple[TP, str]]


class Group:
    def __init__(self, group_id: str, *, initial_delay_ms: int = 300) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation = 0
        self.protocol: str | None = None
        self.members: dict[str, Member] = {}
        self.owners: dict[TP, str] = {}
        self.initial_delay_ms = initial_delay_ms
        self.ready_at_ms = 0  # the stabilization window: no completion before this
        self.deadline_ms = 0  # the rebalance timeout: members that have not joined by then are removed
        self.empty_since_ms: int | None = None
        self.counts_seen: dict[str, int] | None = None  # subscribed topics' partition counts at the last completion

    # ---------------------------------------------------------------------------------------------- joins

    def join(self, member: Member, owned: list[TP], protocol: str, now_ms: int) -> list[tuple[TP, str]]:
        """Add or update ``member`` (it is alive and joined); return owner nodes to release: what it owned and
        no longer lists in ``owned`` (it stopped consuming those)."""
        known = self.members.get(member.member_id)
        if known is not None:
            member.assignment, member.revoke = known.assignment, known.revoke
        member.joined = True
        self.members[member.member_id] = member
        if self.protocol is None or len(self.members) == 1:
            self.protocol = protocol
        keep = set(owned)
        released = [(tp, m) for tp, m in sorted(self.owners.items()) if m == member.member_id and tp not in keep]
        for tp, _ in released:
            del self.owners[tp]
        self.prepare(now_ms, extend=True)
        return released

    def prepare(self, now_ms: int, *, extend: bool = False) -> None:
        """Enter (or stay in) PreparingRebalance. From Empty the first completion waits the stabilization window
        (Kafka's group.initial.rebalance.delay.ms), which each further join extends, up to the rebalance timeout,
        so a fleet starting together gets one rebalance, not one per member."""
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.state in (EMPTY, STABLE, COMPLETING):
            was_empty = self.state == EMPTY
            self.state = PREPARING
            self.deadline_ms = now_ms + timeout
            self.ready_at_ms = now_ms + (self.initial_delay_ms if was_empty else 0)
            for m in self.members.values():
                if not extend or m.joined is False:
                    m.joined = False
        elif self.state == PREPARING:
            self.deadline_ms = max(self.deadline_ms, now_ms + timeout) if extend else self.deadline_ms
            if self.ready_at_ms > now_ms and extend:
                self.ready_at_ms = min(now_ms + self.initial_delay_ms, self.deadline_ms)

    def ready(self, now_ms: int) -> bool:
        if self.state != PREPARING or now_ms < self.ready_at_ms:
            return False
        return all(m.joined for m in self.members.values()) or now_ms >= self.deadline_ms

    def complete(self, counts: Mapping[str, int], now_ms: int) -> Completion:
        """Remove members that did not join, bump the generation, assign: PreparingRebalance -> Completing."""
        removed = [m for m, member in self.members.items() if not member.joined]
        release = self._remove(removed)
        subscriptions = {m: frozenset(t for t in counts if member.subscribes(t))
                         for m, member in self.members.items()}
        assign = assignors.BY_NAME.get(self.protocol or assignors.RANGE, assignors.range_assign)
        target = assign(subscriptions, counts, dict(self.owners))
        grant, revoke = assignors.handover(target, self.owners)
        claim: list[tuple[TP, str]] = []
        for m, member in self.members.items():
            member.assignment, member.revoke = grant.get(m, []), revoke.get(m, [])
            member.joined = False
            member.last_heartbeat_ms = now_ms
            for tp in member.assignment:
                if tp not in self.owners:
                    self.owners[tp] = m
                    claim.append((tp, m))
        self.generation += 1
        self.state = COMPLETING
        return Completion(removed, release, claim)

    def claim_failed(self, tp: TP, member_id: str) -> None:
        """ZooKeeper still had another owner node: withhold the partition this generation."""
        if self.owners.get(tp) == member_id:
            del self.owners[tp]
        member = self.members.get(member_id)
        if member is not None and tp in member.assignment:
            member.assignment.remove(tp)

    def stabilize(self, wall_ms: int) -> None:
        """The completion is in ZooKeeper: CompletingRebalance -> Stable (or Empty). ``wall_ms``: the wall clock,
        because ``empty_since_ms`` is stored and the next coordinator compares it for offset retention."""
        if self.state != COMPLETING:
            return
        if self.members:
            self.state = STABLE
            self.empty_since_ms = None
        else:
            self.state = EMPTY
            self.protocol = None
            self.empty_since_ms = wall_ms

    # ------------------------------------------------------------------------------------- liveness, exit

    def heartbeat(self, member_id: str, generation: int, now_ms: int) -> Member:
        member = self.member(member_id)
        member.last_heartbeat_ms = now_ms
        if self.state in (PREPARING, COMPLETING):
            raise RebalanceInProgressError(f"group {self.group_id} is rebalancing: join again")
        if generation != self.generation:
            raise IllegalGenerationError(
                f"generation {generation} is not the group's current generation {self.generation}")
        return member

    def member(self, member_id: str) -> Member:
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {self.group_id}: join again")
        return member

    def leave(self, member_id: str, now_ms: int) -> list[tuple[TP, str]]:
        self.member(member_id)
        release = self._remove([member_id])
        self._after_removal(now_ms)
        return release

    def expire(self, now_ms: int) -> tuple[list[str], list[tuple[TP, str]]]:
        """Members silent for their session timeout (a member long-polling a join is alive)."""
        dead = [m for m, member in self.members.items()
                if not member.joined and now_ms - member.last_heartbeat_ms > member.session_timeout_ms]
        if not dead:
            return [], []
        release = self._remove(dead)
        self._after_removal(now_ms)
        return dead, release

    def _after_removal(self, now_ms: int) -> None:
        if self.state == PREPARING:
            return  # the rebalance in progress simply has fewer members to wait for
        self.prepare(now_ms)

    def _remove(self, member_ids: list[str]) -> list[tuple[TP, str]]:
        gone = set(member_ids)
        release = [(tp, m) for tp, m in sorted(self.owners.items()) if m in gone]
        for tp, _ in release:
            del self.owners[tp]
        for m in member_ids:
            self.members.pop(m, None)
        return release

    # -------------------------------------------------------------------------------------------- offsets

    def check_commit(self, member_id: str, generation: int) -> None:
        """Commits are fenced: only a current member of the current generation may write (or, in an empty group,
        a standalone committer with generation -1 and no member id, as Kafka's assign() users)."""
        if not member_id and generation < 0:
            if self.members:
                raise UnknownMemberIdError(f"group {self.group_id} has members: commit as one of them")
            return
        self.member(member_id)
        if generation != self.generation:
            raise IllegalGenerationError(
                f"generation {generation} is stale: group {self.group_id} is at generation {self.generation}")

    def subscribed_topics(self, topics: Mapping[str, int]) -> dict[str, int]:
        return {t: n for t, n in topics.items() if any(m.subscribes(t) for m in self.members.values())}

    # ------------------------------------------------------------------------------------ ZooKeeper shape

    def to_state(self) -> dict[str, Any]:
        return {"generation": self.generation, "protocol": self.protocol or assignors.RANGE, "state": self.state,
                "assignment": {m: [list(tp) for tp in member.assignment] for m, member in self.members.items()},
                "members": {m: member.to_json() for m, member in self.members.items()},
                "empty_since_ms": self.empty_since_ms}

    @classmethod
    def rebuild(cls, group_id: str, state: dict[str, Any] | None, now_ms: int, *,
                initial_delay_ms: int = 300, wall_ms: int | None = None) -> Group:
        """A new coordinator's group from the state znode: the old members come back as members that must join
        within their rebalance timeout (and keep the partitions they held meanwhile, so nothing they may still
        be consuming is handed to someone else), or time out. ``now_ms`` is the timers' clock (monotonic in the
        coordinator), ``wall_ms`` the stored ``empty_since_ms``'s (the wall clock; ``now_ms`` when not given)."""
        wall = now_ms if wall_ms is None else wall_ms
        group = cls(group_id, initial_delay_ms=initial_delay_ms)
        if not state:
            group.empty_since_ms = wall
            return group
        group.generation = int(state.get("generation", 0))
        group.protocol = state.get("protocol")
        group.empty_since_ms = state.get("empty_since_ms") if state.get("state") == EMPTY else None
        infos = state.get("members") or {}
        for member_id, tps in (state.get("assignment") or {}).items():
            info = infos.get(member_id) or {}
            topics = info.get("subscription")
            member = Member(member_id, str(info.get("client_id", "")), str(info.get("host", "")),
                            None if topics is None else frozenset(topics), info.get("pattern"),
                            int(info.get("session_timeout_ms", 10000)), int(info.get("rebalance_timeout_ms", 30000)),
                            now_ms, assignment=[(str(t), int(p)) for t, p in tps])
            group.members[member_id] = member
            for tp in member.assignment:
                group.owners[tp] = member_id
        if group.members:
            group.state = STABLE
            group.prepare(now_ms)
        else:
            group.empty_since_ms = group.empty_since_ms or wall
        return group
