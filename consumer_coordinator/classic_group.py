"""One group of Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), as Kafka's
GroupCoordinator and GroupMetadata run it: a pure state machine, no I/O, no clock of its own.

What the coordinator keeps is opaque: each member's protocol type, the protocols it offers with their metadata
bytes, and the assignment bytes its leader hands out. The clients decide the assignment (the leader runs the
assignor the group selected); the coordinator only elects the leader, selects the protocol, gathers and hands out.
Unlike the server-side groups of group.py, nothing here owns a partition: two members of one generation never
hold the same partition because their leader said so, and a member of an older generation is fenced by its
generation on every heartbeat, sync and commit.

States (Kafka's): Empty -> PreparingRebalance (a member joins, changes its metadata, leaves or expires) ->
CompletingRebalance (every member rejoined, or the rebalance timeout passed: the generation is bumped, the
protocol selected, the leader handed every member's metadata) -> Stable (the leader's SyncGroup carried the
assignment) -> PreparingRebalance ... ; a group whose last member is gone goes to Empty through one more
generation. Dead is a group removed from this coordinator (deleted, or the coordinator moved).

Rules kept exactly:

* the leader is the first member to join, and stays leader while it rejoins; if it does not rejoin, the first
  member that did is leader;
* JoinGroup v4+ from a new dynamic member is answered MEMBER_ID_REQUIRED with its member id (KIP-394); the id is
  pending until it joins with it or its session timeout passes, and a pending member holds a rebalance open;
* the protocol is the one most members prefer among those every member supports;
* a member awaiting its JoinGroup or SyncGroup answer is alive (its connection is parked on the request); any
  other member is removed once its session timeout passes without a heartbeat, sync or commit; a new member
  whose join is parked for five minutes is removed (Kafka's new member join timeout);
* members that have not rejoined by the rebalance timeout are removed when the rebalance completes; members that
  have not sent SyncGroup by the rebalance timeout after it are removed and the group rebalances again;
* static members (group.instance.id, KIP-345): an instance that joins again with no member id takes over its
  instance's place under a new member id (the old id is fenced with FENCED_INSTANCE_ID) and, in a Stable or
  CompletingRebalance group, gets the current generation without a rebalance (unless the protocol the group
  selected would change); a request naming an instance id held by another member id is FENCED_INSTANCE_ID.

Time: every method takes ``now_ms`` (a monotonic clock, the coordinator's). Answers the coordinator must deliver
to parked requests come back as :class:`Effects`; answers to the request being handled come back in them too,
keyed by its member id, or as a raised typed error.

Concurrency: owned by the coordinator's event task; no locks, no awaits.
"""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from consumer_coordinator import consumer_protocol
from consumer_coordinator.group import COMPLETING, DEAD, EMPTY, PREPARING, STABLE
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    OdradekError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

KIND = "classic"  # the state znode's "kind" of these groups (server-side groups have none)
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # Kafka's GroupCoordinator.NewMemberJoinTimeoutMs
MIN_SESSION_TIMEOUT_MS = 6_000  # Kafka's group.min.session.timeout.ms default
MAX_SESSION_TIMEOUT_MS = 1_800_000  # Kafka's group.max.session.timeout.ms default
TP = tuple[str, int]
Protocols = tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order of preference


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup, decoded. ``member_id`` "" is a member that has none yet; ``require_known_member_id`` is
    JoinGroup v4+ (KIP-394); ``rebalance_timeout_ms`` is the session timeout for v0, which has none."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool = True
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResult:
    """A successful JoinGroup answer. ``members`` is every member's metadata for the selected protocol, for the
    leader only (it runs the assignment); ``skip_assignment`` is never set (v9: a static leader rejoining a
    Stable group is told to skip the assignor; this coordinator does not tell it it is leader instead)."""

    member_id: str
    generation: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    members: tuple[JoinMember, ...] = ()
    skip_assignment: bool = False


JoinAnswer = JoinResult | OdradekError
SyncAnswer = bytes | OdradekError


@dataclass
class Effects:
    """What one step of the state machine owes parked requests, by member id, and whether the group reached a
    state that is stored (Stable with its assignment, or Empty: what a new coordinator loads)."""

    joins: dict[str, JoinAnswer] = field(default_factory=dict)
    syncs: dict[str, SyncAnswer] = field(default_factory=dict)
    store: bool = False


@dataclass
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    last_heartbeat_ms: int
    assignment: bytes = b""
    awaiting_join: bool = False  # a JoinGroup of this member is parked until the rebalance completes
    awaiting_sync: bool = False  # a SyncGroup of this member is parked until the leader's assignment comes
    is_new: bool = True  # has not completed a join yet

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def expired(self, now_ms: int) -> bool:
        if self.awaiting_join:
            return self.is_new and now_ms - self.last_heartbeat_ms > NEW_MEMBER_JOIN_TIMEOUT_MS
        if self.awaiting_sync:
            return False
        return now_ms - self.last_heartbeat_ms > self.session_timeout_ms


@dataclass(frozen=True, slots=True)
class MemberSummary:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """DescribeGroups' view: metadata and assignments only while Stable (Kafka's GroupMetadata.summary)."""

    state: str
    protocol_type: str
    protocol_name: str
    generation: int
    leader: str | None
    members: tuple[MemberSummary, ...]


class ClassicGroup:
    def __init__(self, group_id: str, *, initial_delay_ms: int = 3000, generation: int = 0) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.generation = generation
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, ClassicMember] = {}  # in join order: the leader falls to the next one
        self.static: dict[str, str] = {}  # group.instance.id -> member id
        self.pending: dict[str, int] = {}  # member ids handed out with MEMBER_ID_REQUIRED -> expiry
        self.pending_sync: set[str] = set()
        self.initial_delay_ms = initial_delay_ms
        self.initial = False  # in the first rebalance of an Empty group: waits the stabilization window
        self.ready_at_ms = 0  # initial rebalance: not completed before this
        self.initial_limit_ms = 0  # initial rebalance: extended up to this
        self.join_deadline_ms = 0  # members that have not rejoined by then are removed
        self.sync_deadline_ms = 0  # members that have not synced by then are removed
        self.empty_since_ms: int | None = None  # wall clock, set by the coordinator (offset retention)

    # ---------------------------------------------------------------------------------------------- views

    @property
    def has_members(self) -> bool:
        return bool(self.members) or bool(self.pending)

    def summary(self) -> GroupSummary:
        stable = self.state == STABLE
        return GroupSummary(self.state, self.protocol_type or "", (self.protocol_name or "") if stable else "",
                            self.generation, self.leader, tuple(
                                MemberSummary(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                              m.metadata(self.protocol_name) if stable else b"",
                                              m.assignment if stable else b"")
                                for m in self.members.values()))

    def is_consumer_group(self) -> bool:
        return self.protocol_type == consumer_protocol.CONSUMER

    def subscribed(self, topic: str) -> bool:
        """Whether a member subscribes to ``topic`` (consumer groups, by their members' selected-protocol
        metadata; other protocol types have no topics: never)."""
        if not self.is_consumer_group() or self.protocol_name is None:
            return False
        for m in self.members.values():
            topics = consumer_protocol.subscription_topics(m.metadata(self.protocol_name))
            if topics is not None and topic in topics:
                return True
        return False

    def assignments(self) -> dict[str, list[TP]]:
        """Each member's partitions, decoded from its assignment (consumer groups; empty otherwise)."""
        out: dict[str, list[TP]] = {}
        for m in self.members.values():
            tps = consumer_protocol.assignment_partitions(m.assignment) if self.is_consumer_group() else None
            out[m.member_id] = tps or []
        return out

    # ---------------------------------------------------------------------------------------------- joins

    def join(self, req: ClassicJoin, new_member_id: str, now_ms: int) -> tuple[str, Effects]:
        """A JoinGroup: the member id it is about (``new_member_id`` if it had none) and the effects, in which
        that member's own answer is when it is answered at once (else its join is parked until the rebalance
        completes). Raises the errors Kafka answers before naming a member."""
        fx = Effects()
        if self.state == DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} was removed from this coordinator")
        if not self._supports(req.protocol_type, req.protocols):
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} has protocol type {self.protocol_type!r} and protocols "
                f"{sorted(self._common_protocols())}, not {req.protocol_type!r} with "
                f"{[name for name, _ in req.protocols]}")
        member_id = req.member_id or new_member_id
        if not req.member_id:
            self._join_unknown(req, member_id, now_ms, fx)
        else:
            self._join_known(req, now_ms, fx)
        self._maybe_complete_join(now_ms, fx)
        return member_id, fx

    def _join_unknown(self, req: ClassicJoin, member_id: str, now_ms: int, fx: Effects) -> None:
        instance = req.group_instance_id
        if instance is not None and instance in self.static:
            self._rejoin_static(req, member_id, now_ms, fx)
        elif req.require_known_member_id and instance is None:
            self.pending[member_id] = now_ms + req.session_timeout_ms
            fx.joins[member_id] = MemberIdRequiredError(f"join group {self.group_id!r} again with member id "
                                                        f"{member_id!r}")
        else:
            self._add(req, member_id, now_ms, fx)

    def _rejoin_static(self, req: ClassicJoin, member_id: str, now_ms: int, fx: Effects) -> None:
        """A static member back with no member id (a restarted instance): it replaces its old member id."""
        assert req.group_instance_id is not None
        old_id = self.static[req.group_instance_id]
        old = self.members.pop(old_id)
        fenced = FencedInstanceIdError(f"instance {req.group_instance_id!r} joined again as {member_id!r}")
        if old.awaiting_join:
            fx.joins[old_id] = fenced
        if old.awaiting_sync:
            fx.syncs[old_id] = fenced
        current_leader = self.leader
        member = ClassicMember(member_id, req.group_instance_id, req.client_id, req.client_host,
                               req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type, req.protocols,
                               now_ms, assignment=old.assignment, awaiting_join=True, is_new=old.is_new)
        self.members[member_id] = member
        self.static[req.group_instance_id] = member_id
        if self.leader == old_id:
            self.leader = member_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(member_id)
        if self.state in (STABLE, COMPLETING) and self._select_protocol() == self.protocol_name:
            # No rebalance: the same generation, and the old leader's id, so that this member does not take
            # itself for the leader and run an assignment a Stable group would not hand out.
            member.awaiting_join = False
            member.is_new = False
            fx.joins[member_id] = JoinResult(member_id, self.generation, self.protocol_type, self.protocol_name,
                                             current_leader or "")
            fx.store = self.state == STABLE
        else:
            self._maybe_prepare(now_ms, fx)

    def _join_known(self, req: ClassicJoin, now_ms: int, fx: Effects) -> None:
        member_id = req.member_id
        if member_id in self.pending:
            del self.pending[member_id]
            self._add(req, member_id, now_ms, fx)
            return
        if self._fenced(member_id, req.group_instance_id):
            fx.joins[member_id] = FencedInstanceIdError(
                f"instance {req.group_instance_id!r} is member {self.static[req.group_instance_id or '']!r}")
            return
        member = self.members.get(member_id)
        if member is None or (req.group_instance_id is not None and req.group_instance_id not in self.static):
            fx.joins[member_id] = UnknownMemberIdError(
                f"member {member_id!r} is not in group {self.group_id!r}: join with no member id")
            return
        if self.state == PREPARING:
            self._update(member, req, now_ms, fx)
        elif self.state == COMPLETING:
            if member.matches(req.protocols):  # it missed its answer: the same answer again
                fx.joins[member_id] = self._join_result(member_id)
            else:
                self._update(member, req, now_ms, fx)
        elif self.state == STABLE:
            if member_id == self.leader or not member.matches(req.protocols):
                # the leader's join rebalances (its way to react to topic changes), as a changed member's does
                self._update(member, req, now_ms, fx)
            else:
                fx.joins[member_id] = JoinResult(member_id, self.generation, self.protocol_type,
                                                 self.protocol_name, self.leader or "")
        else:
            fx.joins[member_id] = UnknownMemberIdError(f"group {self.group_id!r} is {self.state}: join again")

    def _add(self, req: ClassicJoin, member_id: str, now_ms: int, fx: Effects) -> None:
        if not self.members:
            self.protocol_type = req.protocol_type
        self.members[member_id] = ClassicMember(
            member_id, req.group_instance_id, req.client_id, req.client_host, req.session_timeout_ms,
            req.rebalance_timeout_ms, req.protocol_type, req.protocols, now_ms, awaiting_join=True)
        if self.leader is None:
            self.leader = member_id
        if req.group_instance_id is not None:
            self.static[req.group_instance_id] = member_id
        if self.state == PREPARING and self.initial:  # a fleet starting together: one rebalance, not one each
            self.ready_at_ms = min(max(self.ready_at_ms, now_ms + self.initial_delay_ms), self.initial_limit_ms)
        self._maybe_prepare(now_ms, fx)

    def _update(self, member: ClassicMember, req: ClassicJoin, now_ms: int, fx: Effects) -> None:
        member.protocols = req.protocols
        member.session_timeout_ms = req.session_timeout_ms
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.client_id, member.client_host = req.client_id, req.client_host
        member.awaiting_join = True
        member.last_heartbeat_ms = now_ms
        self._maybe_prepare(now_ms, fx)

    # ------------------------------------------------------------------------------------------ rebalance

    def _maybe_prepare(self, now_ms: int, fx: Effects) -> None:
        if self.state in (STABLE, COMPLETING, EMPTY):
            self._prepare(now_ms, fx)

    def _prepare(self, now_ms: int, fx: Effects) -> None:
        if self.state == COMPLETING:  # syncs parked for this generation: rejoin
            for m in self.members.values():
                m.assignment = b""
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    fx.syncs[m.member_id] = RebalanceInProgressError(f"group {self.group_id!r} is rebalancing")
        self.pending_sync.clear()
        timeout = self._rebalance_timeout()
        self.initial = self.state == EMPTY
        if self.initial:
            self.ready_at_ms = now_ms + self.initial_delay_ms
            self.initial_limit_ms = now_ms + max(timeout, self.initial_delay_ms)
        self.join_deadline_ms = now_ms + timeout
        self.state = PREPARING

    def rebalance(self, now_ms: int) -> Effects:
        """Start a rebalance if the group can (the assignment could not be stored, say)."""
        fx = Effects()
        self._maybe_prepare(now_ms, fx)
        self._maybe_complete_join(now_ms, fx)
        return fx

    def _rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def _all_joined(self) -> bool:
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def _maybe_complete_join(self, now_ms: int, fx: Effects) -> None:
        if self.state != PREPARING:
            return
        if self.initial:
            if now_ms < self.ready_at_ms:
                return
        elif not self._all_joined() and now_ms < self.join_deadline_ms:
            return
        self._complete_join(now_ms, fx)

    def _complete_join(self, now_ms: int, fx: Effects) -> None:
        for m in [m for m in self.members.values() if not m.awaiting_join]:
            self._remove(m.member_id, fx)
        self.initial = False
        self.generation += 1
        if not self.members:
            self.state = EMPTY
            self.protocol_name = None
            self.leader = None
            fx.store = True
            return
        self.protocol_name = self._select_protocol()
        self.state = COMPLETING
        self.pending_sync = set(self.members)
        self.sync_deadline_ms = now_ms + self._rebalance_timeout()
        for m in self.members.values():
            m.awaiting_join = False
            m.is_new = False
            m.last_heartbeat_ms = now_ms
            fx.joins[m.member_id] = self._join_result(m.member_id)

    def _join_result(self, member_id: str) -> JoinResult:
        members: tuple[JoinMember, ...] = ()
        if member_id == self.leader:
            members = tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                            for m in self.members.values())
        return JoinResult(member_id, self.generation, self.protocol_type, self.protocol_name, self.leader or "",
                          members)

    def _common_protocols(self) -> set[str]:
        members = list(self.members.values())
        if not members:
            return set()
        common = {name for name, _ in members[0].protocols}
        for m in members[1:]:
            common &= {name for name, _ in m.protocols}
        return common

    def _select_protocol(self) -> str:
        """The protocol most members prefer among those all support; a tie goes to the one the first member
        prefers (Kafka leaves ties to its map's order)."""
        first = next(iter(self.members.values()))
        candidates = self._common_protocols()
        if not candidates:  # every join was checked against the members' protocols: cannot happen
            return first.protocols[0][0]
        votes = Counter(m.vote(candidates) for m in self.members.values())
        order = [name for name, _ in first.protocols if name in candidates]
        return max(order, key=lambda name: (votes[name], -order.index(name)))

    def _supports(self, protocol_type: str, protocols: Protocols) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and any(name in self._common_protocols() for name, _ in protocols)

    def _fenced(self, member_id: str, instance: str | None) -> bool:
        return instance is not None and instance in self.static and self.static[instance] != member_id

    # ---------------------------------------------------------------------------------------------- syncs

    def sync(self, member_id: str, instance: str | None, generation: int, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes], now_ms: int) -> Effects:
        """A SyncGroup. The member's own answer is in the effects when it is answered at once (Stable, or its
        leader's sync), else its sync is parked until the leader's comes. Raises the errors Kafka answers."""
        member = self._current_member(member_id, instance, generation)
        if (protocol_type is not None and protocol_type != self.protocol_type) or (
                protocol_name is not None and protocol_name != self.protocol_name):
            raise InconsistentGroupProtocolError(
                f"group {self.group_id!r} runs {self.protocol_type}/{self.protocol_name}, not "
                f"{protocol_type}/{protocol_name}")
        if self.state == EMPTY:
            raise UnknownMemberIdError(f"group {self.group_id!r} is empty: join again")
        if self.state == PREPARING:
            raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing: join again")
        fx = Effects()
        self.pending_sync.discard(member_id)
        member.last_heartbeat_ms = now_ms
        if self.state == STABLE:
            fx.syncs[member_id] = member.assignment
            return fx
        member.awaiting_sync = True
        if member_id == self.leader:
            for m in self.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            self.state = STABLE
            fx.store = True
            for m in self.members.values():
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    m.last_heartbeat_ms = now_ms
                    fx.syncs[m.member_id] = m.assignment
        return fx

    def store_failed(self, now_ms: int) -> Effects:
        """The Stable group could not be stored: its assignment is void (Kafka resets it and rebalances)."""
        fx = Effects()
        if self.state == STABLE:
            self.state = COMPLETING  # _prepare clears the assignment it would otherwise hand out
            self._prepare(now_ms, fx)
        return fx

    # ------------------------------------------------------------------------------------ liveness, exit

    def _current_member(self, member_id: str, instance: str | None, generation: int) -> ClassicMember:
        """The member a sync, heartbeat or commit names, in the group's current generation (Kafka's checks, in
        Kafka's order: the group gone, a fenced static instance, an unknown member, a stale generation)."""
        if self.state == DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} was removed from this coordinator")
        if self._fenced(member_id, instance):
            raise FencedInstanceIdError(f"instance {instance!r} is another member now")
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {self.group_id!r}")
        if generation != self.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {self.group_id!r}'s current "
                                         f"generation {self.generation}")
        return member

    def heartbeat(self, member_id: str, instance: str | None, generation: int, now_ms: int) -> None:
        """Raises REBALANCE_IN_PROGRESS while the group prepares a rebalance (the member must join again), and
        Kafka's other heartbeat errors; a heartbeat in CompletingRebalance is fine (the member syncs next)."""
        member = self._current_member(member_id, instance, generation)
        if self.state == EMPTY:
            raise UnknownMemberIdError(f"group {self.group_id!r} is empty: join again")
        member.last_heartbeat_ms = now_ms
        if self.state == PREPARING:
            raise RebalanceInProgressError(f"group {self.group_id!r} is rebalancing: join again")

    def leave(self, leaving: list[tuple[str, str | None]], now_ms: int) -> tuple[list[OdradekError | None], Effects]:
        """LeaveGroup of (member id, group instance id) pairs (v3+ batches; a static member may leave by its
        instance id alone): one error or None per pair, in order."""
        if self.state == DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} was removed from this coordinator")
        fx = Effects()
        errors: list[OdradekError | None] = []
        for member_id, instance in leaving:
            if member_id and self._fenced(member_id, instance):
                errors.append(FencedInstanceIdError(f"instance {instance!r} is another member now"))
            elif member_id in self.pending:
                del self.pending[member_id]
                errors.append(None)
            elif member_id not in self.members and (instance is None or instance not in self.static):
                errors.append(UnknownMemberIdError(f"member {member_id!r} is not in group {self.group_id!r}"))
            else:
                target = self.static[instance] if instance is not None and instance in self.static else member_id
                self._remove_and_rebalance(target, now_ms, fx)
                errors.append(None)
        self._maybe_complete_join(now_ms, fx)
        return errors, fx

    def tick(self, now_ms: int) -> Effects:
        """Timers: pending member ids and members past their session, syncs past the rebalance timeout, and the
        completion of a rebalance whose members all joined or whose timeout passed."""
        fx = Effects()
        for member_id, expiry in list(self.pending.items()):
            if now_ms >= expiry:
                del self.pending[member_id]
        for m in list(self.members.values()):
            if m.member_id in self.members and m.expired(now_ms):
                self._remove_and_rebalance(m.member_id, now_ms, fx)
        if self.state in (COMPLETING, STABLE) and self.pending_sync and now_ms >= self.sync_deadline_ms:
            for member_id in sorted(self.pending_sync):
                self._remove(member_id, fx)
            self._prepare(now_ms, fx)
        self._maybe_complete_join(now_ms, fx)
        return fx

    def _remove_and_rebalance(self, member_id: str, now_ms: int, fx: Effects) -> None:
        self._remove(member_id, fx)
        if self.state in (STABLE, COMPLETING):
            self._prepare(now_ms, fx)

    def _remove(self, member_id: str, fx: Effects) -> None:
        member = self.members.pop(member_id)
        gone = UnknownMemberIdError(f"member {member_id!r} was removed from group {self.group_id!r}")
        if member.awaiting_join:
            fx.joins[member_id] = gone
        if member.awaiting_sync:
            fx.syncs[member_id] = gone
        if member.group_instance_id is not None and self.static.get(member.group_instance_id) == member_id:
            del self.static[member.group_instance_id]
        self.pending_sync.discard(member_id)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)

    def remove_all(self, error: OdradekError) -> Effects:
        """The group leaves this coordinator (deleted, unloaded): every parked request gets ``error``."""
        fx = Effects()
        for m in self.members.values():
            if m.awaiting_join:
                fx.joins[m.member_id] = error
            if m.awaiting_sync:
                fx.syncs[m.member_id] = error
        self.state = DEAD
        return fx

    # ------------------------------------------------------------------------------------------ offsets

    def check_commit(self, member_id: str, instance: str | None, generation: int, now_ms: int) -> None:
        """OffsetCommit's fencing (Kafka's doCommitOffsets): generation -1 commits only while the group is
        Empty (a consumer using assign(), or offsets alone); a member commits in its current generation while
        Stable or preparing a rebalance (a cooperative member commits what it revokes), and a commit counts as
        its heartbeat; CompletingRebalance answers REBALANCE_IN_PROGRESS (sync first)."""
        if self.state == DEAD:
            raise CoordinatorNotAvailableError(f"group {self.group_id!r} was removed from this coordinator")
        if self._fenced(member_id, instance):
            raise FencedInstanceIdError(f"instance {instance!r} is another member now")
        if generation < 0 and self.state == EMPTY:
            return
        member = self.members.get(member_id)
        if member is None:
            raise UnknownMemberIdError(f"member {member_id!r} is not in group {self.group_id!r}")
        if generation != self.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {self.group_id!r}'s current "
                                         f"generation {self.generation}")
        if self.state == COMPLETING:
            raise RebalanceInProgressError(f"group {self.group_id!r} is completing a rebalance: sync first")
        member.last_heartbeat_ms = now_ms

    # ------------------------------------------------------------------------------------ ZooKeeper shape

    def to_state(self) -> dict[str, Any]:
        """The state znode (docs/consumer-groups.md) of a Stable or Empty group: what a new coordinator loads,
        each member with its selected protocol's metadata and its assignment, as Kafka stores a group. The
        decoded ``assignment`` is for the views and for transactions' generation checks, as for server-side
        groups."""
        return {
            "kind": KIND, "generation": self.generation, "protocol_type": self.protocol_type,
            "protocol": self.protocol_name, "leader": self.leader,
            "state": STABLE if self.state in (STABLE, COMPLETING, PREPARING) and self.members else EMPTY,
            "members": {m.member_id: {
                "client_id": m.client_id, "host": m.client_host, "group_instance_id": m.group_instance_id,
                "session_timeout_ms": m.session_timeout_ms, "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "metadata": base64.b64encode(m.metadata(self.protocol_name)).decode(),
                "assignment": base64.b64encode(m.assignment).decode()} for m in self.members.values()},
            "assignment": {m: [list(tp) for tp in tps] for m, tps in self.assignments().items()},
            "empty_since_ms": self.empty_since_ms,
        }

    @classmethod
    def rebuild(cls, group_id: str, state: dict[str, Any] | None, now_ms: int, *, initial_delay_ms: int = 3000,
                wall_ms: int | None = None) -> ClassicGroup:
        """A new coordinator's group from the state znode: Stable with its members, their metadata and
        assignments, each due a heartbeat within its session timeout (Kafka's onGroupLoaded), or Empty."""
        group = cls(group_id, initial_delay_ms=initial_delay_ms)
        state = state or {}
        group.generation = int(state.get("generation", 0))
        group.protocol_type = state.get("protocol_type")
        protocol = state.get("protocol")
        for member_id, info in (state.get("members") or {}).items():
            metadata = base64.b64decode(info.get("metadata") or "")
            member = ClassicMember(
                member_id, info.get("group_instance_id"), str(info.get("client_id", "")), str(info.get("host", "")),
                int(info.get("session_timeout_ms", 10_000)), int(info.get("rebalance_timeout_ms", 30_000)),
                group.protocol_type or "", ((protocol, metadata),) if protocol else (), now_ms,
                assignment=base64.b64decode(info.get("assignment") or ""), is_new=False)
            group.members[member_id] = member
            if member.group_instance_id is not None:
                group.static[member.group_instance_id] = member_id
        if group.members and protocol:
            group.state = STABLE
            group.protocol_name = protocol
            leader = state.get("leader")
            group.leader = leader if leader in group.members else next(iter(group.members))
        else:
            group.members.clear()
            group.static.clear()
            group.empty_since_ms = state.get("empty_since_ms") or (now_ms if wall_ms is None else wall_ms)
        return group
