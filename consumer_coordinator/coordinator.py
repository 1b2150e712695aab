"""The group coordinator of one broker: the groups it coordinates, driven one event at a time.

Who coordinates group G is whoever holds the ephemeral ``/consumers/G/coordinator`` (docs/consumer-groups.md):
``locate`` reads it and claims it when nobody holds it, and a broker that wins loads the group from ZooKeeper
(``Group.rebuild``). The node dies with the broker's session, so a crashed coordinator is replaced on the next
request after its session expired, never while it could still be acting.

Two kinds of groups, never both at once: server-side groups (group.py: the coordinator assigns, for REST consumer
instances and the Python GroupConsumer) in ``groups``, and groups of Kafka's classic protocol (classic_group.py:
the members' leader assigns, for Kafka clients) in ``classic``. A join of the other kind is
INCONSISTENT_GROUP_PROTOCOL while the group has members; an empty group changes kind on its first join. Offsets,
the coordinator claim and the state znode are the same for both (the state says ``"kind": "classic"``).

Concurrency: every change to the groups runs on one task (a ``SerialQueue`` of ``Call``s and ``Tick``s), so the
state needs no locks; ZooKeeper calls run in threads (``asyncio.to_thread``). A join long-polls outside the
queue: it registers the member, then awaits a future that the completion of the rebalance resolves.

Dependencies: ``zk`` (the group store, the session's state), ``odradek.protocol`` and kio (the consumer protocol's
schemas, consumer_protocol.py), never ``broker``. The host
hands in the metadata view, the queue factory and the wake-up on metadata changes through the interfaces of
``consumer_coordinator.interfaces``, so the coordinator runs against fakes in unit tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from consumer_coordinator import consumer_protocol
from consumer_coordinator.assignors import TP
from consumer_coordinator.classic_group import (
    KIND,
    MAX_SESSION_TIMEOUT_MS,
    MIN_SESSION_TIMEOUT_MS,
    ClassicGroup,
    ClassicJoin,
    Effects,
    GroupSummary,
    JoinAnswer,
)
from consumer_coordinator.classic_group import MemberSummary as ClassicMemberSummary
from consumer_coordinator.group import DEAD, EMPTY, STABLE, Completion, Group, Member
from consumer_coordinator.group import KIND as SERVER_SIDE
from consumer_coordinator.interfaces import MetadataView, QueueFactory, SerialQueue
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    InconsistentGroupProtocolError,
    InvalidSessionTimeoutError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OdradekError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from zk.client import LOST, ZkClient
from zk.groups import GroupStore

log = logging.getLogger(__name__)

TICK_S = 0.1
RETENTION_CHECK_S = 10.0
JOIN_WAIT_SLACK_S = 10.0  # beyond the group's rebalance timeout, which the ticker enforces: a safety net only


def now_ms() -> int:
    """The clock of sessions, heartbeats and rebalance deadlines: monotonic, so a wall-clock step (NTP) neither
    expires every member at once nor parks a rebalance in the future."""
    return time.monotonic_ns() // 1_000_000


def wall_ms() -> int:
    """The clock of what is stored in ZooKeeper and read by another coordinator: commit timestamps and
    ``empty_since_ms`` (offset retention), as Kafka stores them."""
    return time.time_ns() // 1_000_000


# The coordinator's events: frozen (hashable) dataclasses, equal when handling one stands in for the other, as a
# SerialQueue that retries a failed event expects (consumer_coordinator.interfaces).


@dataclass(frozen=True, slots=True)
class Call:
    fn: Callable[[], Awaitable[Any]]
    reply: asyncio.Future[Any] = field(compare=False)


@dataclass(frozen=True, slots=True)
class Tick:
    pass


@dataclass(frozen=True, slots=True)
class MetadataChanged:
    pass


@dataclass(frozen=True, slots=True)
class SessionLost:
    pass


Event = Call | Tick | MetadataChanged | SessionLost


@dataclass(frozen=True, slots=True)
class ClassicJoinOutcome:
    """A classic JoinGroup's answer: the member id it is about (the one handed out, for a new member) and the
    result, or the error Kafka answers with that member id (MEMBER_ID_REQUIRED among them)."""

    member_id: str
    answer: JoinAnswer


@dataclass(frozen=True, slots=True)
class SyncOutcome:
    """A classic SyncGroup's answer: the member's assignment, and the group's protocol type and name (SyncGroup
    v5 names them, so a client can check it runs the protocol the group selected)."""

    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupListing:
    """ListGroups' view of one group: Kafka's protocol type ("consumer" for server-side groups, whose members
    are consumers; "" for a group that only ever stored offsets) and state."""

    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str | None
    client_id: str
    host: str
    topics: frozenset[str] | None
    pattern: str | None
    assignor: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    owned: list[TP]


class GroupCoordinator:
    """The groups this broker coordinates.

    ``metadata``: the topics and their partitions; ``queue_factory``: makes the single-owner queue every change
    runs on; ``changed(timeout_s)``: returns when the metadata may have changed (or raises ``TimeoutError``);
    ``store``: the group verbs over ZooKeeper, ``GroupStore(zk)`` unless given (unit tests give a fake).
    """

    def __init__(self, broker_id: int, zk: ZkClient, metadata: MetadataView, broker_epoch: Callable[[], int | None],
                 *, queue_factory: QueueFactory, store: GroupStore | None = None,
                 changed: Callable[[float], Awaitable[None]] | None = None, offsets_retention_minutes: int = 10080,
                 initial_rebalance_delay_ms: int = 300) -> None:
        self.broker_id = broker_id
        self.store = GroupStore(zk) if store is None else store
        self._zk = zk
        self._metadata = metadata
        self._queue_factory = queue_factory
        self._broker_epoch = broker_epoch
        self._changed = changed
        self.retention_ms = offsets_retention_minutes * 60_000
        self.initial_delay_ms = initial_rebalance_delay_ms
        self.groups: dict[str, Group] = {}  # server-side groups (group.py)
        self.classic: dict[str, ClassicGroup] = {}  # Kafka's classic protocol (classic_group.py); never both
        self._waiters: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
        # parked classic JoinGroup and SyncGroup requests: (group, member id, "join" | "sync")
        self._parked: dict[tuple[str, str, str], asyncio.Future[Any]] = {}
        self._queue: SerialQueue | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._topics_seen: dict[str, int] = {}
        self._last_retention_check = 0.0

    # -------------------------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self._queue = self._queue_factory(f"group-coordinator-{self.broker_id}", self._handle)
        self._topics_seen = self._counts()
        self._zk.add_state_listener(self._on_zk_state)
        self._tasks = [asyncio.create_task(self._queue.run()), asyncio.create_task(self._ticker())]
        if self._changed is not None:
            self._tasks.append(asyncio.create_task(self._metadata_follower()))

    async def stop(self) -> None:
        if self._queue is None:
            return
        self._queue.close()
        for task in self._tasks[1:]:
            task.cancel()
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._tasks[0], 5.0)
        self._fail_all(NotCoordinatorError("the coordinator is shutting down"))

    def _on_zk_state(self, state: str) -> None:
        """kazoo thread: signal only. With the session gone, so are our coordinator, ids and owners nodes."""
        if state == LOST and self._queue is not None:
            self._queue.signal_threadsafe(SessionLost())

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            if self._queue is not None:
                self._queue.put(Tick())

    async def _metadata_follower(self) -> None:
        """Turn the metadata cache's changes into events (new topics for patterns, new partitions, deletions)."""
        assert self._changed is not None
        while True:
            with contextlib.suppress(TimeoutError):
                await self._changed(1.0)
            if self._queue is not None:
                self._queue.put(MetadataChanged())

    async def call(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``fn`` on the coordinator's task, after everything queued before it."""
        if self._queue is None or self._queue.closed:
            raise CoordinatorNotAvailableError("the group coordinator is not running on this broker")
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.put(Call(fn, reply))
        return await reply

    async def _handle(self, event: Event) -> None:
        match event:
            case Call(fn=fn, reply=reply):
                try:
                    result = await fn()
                except Exception as e:
                    if not reply.done():
                        reply.set_exception(e)
                else:
                    if not reply.done():
                        reply.set_result(result)
            case Tick():
                await self._tick()
            case MetadataChanged():
                await self._metadata_changed()
            case SessionLost():
                log.warning("group coordinator %d: ZooKeeper session lost; unloading %d groups",
                            self.broker_id, len(self.groups) + len(self.classic))
                self.groups.clear()
                for c in self.classic.values():
                    c.state = DEAD
                self.classic.clear()
                self._fail_all(NotCoordinatorError("the coordinator lost its ZooKeeper session: ask again"))

    def _fail_all(self, error: Exception) -> None:
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._waiters.clear()
        for parked in self._parked.values():
            if not parked.done():
                parked.set_result(error)
        self._parked.clear()

    # ------------------------------------------------------------------------------------------- locating

    async def locate(self, group: str, *, must_exist: bool = False) -> int:
        """The broker id coordinating ``group``, claiming it if nobody does (and loading it if we win)."""
        if group in self.groups or group in self.classic:
            return self.broker_id
        epoch = self._broker_epoch()
        if epoch is None:
            raise CoordinatorNotAvailableError("this broker is not registered in ZooKeeper right now")
        if must_exist and not await asyncio.to_thread(self.store.exists, group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")
        holder = await asyncio.to_thread(self.store.get_coordinator, group)
        if holder is None:
            holder = await asyncio.to_thread(self.store.claim_coordinator, group, self.broker_id, epoch)
        if holder < 0:
            raise CoordinatorNotAvailableError(f"the coordinator of group {group!r} is changing: retry")
        if holder == self.broker_id:
            await self.call(lambda: self._load(group))
        return holder

    async def _load(self, group: str) -> None:
        if group in self.groups or group in self.classic:
            return
        state = await asyncio.to_thread(self.store.get_state, group)
        if state is not None and state.get("kind") == KIND:
            c = ClassicGroup.rebuild(group, state, now_ms(), initial_delay_ms=self.initial_delay_ms,
                                     wall_ms=wall_ms())
            self.classic[group] = c
            log.info("group coordinator %d: loaded Kafka-protocol group %s (generation %d, %d members, %s)",
                     self.broker_id, group, c.generation, len(c.members), c.state)
            return
        g = Group.rebuild(group, state, now_ms(), initial_delay_ms=self.initial_delay_ms, wall_ms=wall_ms())
        # The old owner nodes died with the old coordinator's session; members it had may still consume, so
        # their partitions are claimed again for them until they rejoin or time out.
        for tp, member_id in list(g.owners.items()):
            if not await asyncio.to_thread(self.store.claim_owner, group, tp[0], tp[1], member_id):
                g.claim_failed(tp, member_id)
        for member_id, member in g.members.items():
            await asyncio.to_thread(self.store.register_member, group, member_id, member.to_json())
        self.groups[group] = g
        log.info("group coordinator %d: loaded group %s (generation %d, %d members, %s)", self.broker_id, group,
                 g.generation, len(g.members), g.state)

    def _local(self, group: str) -> Group:
        """The server-side group ``group`` (a member of a Kafka-protocol group is unknown to that API)."""
        g = self.groups.get(group)
        if g is None:
            if group in self.classic:
                raise UnknownMemberIdError(f"group {group!r} is a Kafka-protocol group: its members join over "
                                           "Kafka's JoinGroup")
            raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate group {group!r}: ask again")
        return g

    def _any(self, group: str) -> Group | ClassicGroup:
        g: Group | ClassicGroup | None = self.groups.get(group) or self.classic.get(group)
        if g is None:
            raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate group {group!r}: ask again")
        return g

    def _server_side(self, group: str) -> Group:
        """``group`` for a server-side join: an empty Kafka-protocol group becomes a server-side one (its
        generation goes on, so no older commit can pass for a newer one); one with members refuses."""
        c = self.classic.get(group)
        if c is not None:
            if c.has_members:
                raise InconsistentGroupProtocolError(
                    f"group {group!r} has {len(c.members)} Kafka-protocol members: join it with a Kafka client")
            g = Group(group, initial_delay_ms=self.initial_delay_ms)
            g.generation, g.empty_since_ms = c.generation, c.empty_since_ms
            c.state = DEAD
            del self.classic[group]
            self.groups[group] = g
        return self._local(group)

    def _classic(self, group: str) -> ClassicGroup:
        """``group`` for a classic join, the mirror of ``_server_side``."""
        c = self.classic.get(group)
        if c is not None:
            return c
        g = self.groups.get(group)
        if g is None:
            raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate group {group!r}: ask again")
        if g.members:
            raise InconsistentGroupProtocolError(
                f"group {group!r} has {len(g.members)} members with server-side assignment (REST consumer "
                "instances or GroupConsumer): a Kafka client cannot join it")
        c = ClassicGroup(group, initial_delay_ms=self.initial_delay_ms, generation=g.generation)
        c.empty_since_ms = g.empty_since_ms
        g.state = DEAD
        del self.groups[group]
        self.classic[group] = c
        return c

    # -------------------------------------------------------------------------------------------- members

    async def join(self, group: str, req: JoinRequest) -> dict[str, Any]:
        """Join (or rejoin) and long-poll until the rebalance completes."""
        member_id: str = await self.call(lambda: self._join(group, req))
        waiter = self._waiters.get((group, member_id))
        if waiter is None:  # the group left this coordinator (a lost session) between the join and here
            raise NotCoordinatorError(f"broker {self.broker_id} no longer coordinates group {group!r}: ask again")
        try:
            return await asyncio.wait_for(asyncio.shield(waiter), req.rebalance_timeout_ms / 1000 + 5.0)
        except TimeoutError:
            raise RebalanceInProgressError(f"group {group!r} did not complete its rebalance in time: join again"
                                           ) from None

    async def _join(self, group: str, req: JoinRequest) -> str:
        g = self._server_side(group)
        if req.member_id and req.member_id not in g.members:
            raise UnknownMemberIdError(f"member {req.member_id!r} is not in group {group!r}: join with no id")
        member_id = req.member_id or f"{req.client_id or 'consumer'}-{uuid.uuid4()}"
        member = Member(member_id, req.client_id, req.host, req.topics, req.pattern, req.session_timeout_ms,
                        req.rebalance_timeout_ms, now_ms())
        release = g.join(member, req.owned, req.assignor, now_ms())
        await asyncio.to_thread(self._apply_release, group, release)
        await asyncio.to_thread(self.store.register_member, group, member_id, member.to_json())
        old = self._waiters.pop((group, member_id), None)
        if old is not None and not old.done():
            old.set_exception(RebalanceInProgressError("a newer join of this member replaced this one"))
        self._waiters[(group, member_id)] = asyncio.get_running_loop().create_future()
        return member_id

    async def heartbeat(self, group: str, member_id: str, generation: int) -> dict[str, Any]:
        async def beat() -> dict[str, Any]:
            member = self._local(group).heartbeat(member_id, generation, now_ms())
            return {"rebalance": bool(member.revoke)}

        result: dict[str, Any] = await self.call(beat)
        return result

    async def leave(self, group: str, member_id: str) -> None:
        async def leave() -> None:
            g = self._local(group)
            release = g.leave(member_id, now_ms())
            await asyncio.to_thread(self._apply_release, group, release)
            await asyncio.to_thread(self.store.deregister_member, group, member_id)
            waiter = self._waiters.pop((group, member_id), None)
            if waiter is not None and not waiter.done():
                waiter.set_exception(UnknownMemberIdError(f"member {member_id!r} left"))
            await self._write_state(g)

        await self.call(leave)

    def _apply_release(self, group: str, release: list[tuple[TP, str]]) -> None:
        for (topic, partition), member_id in release:
            self.store.release_owner(group, topic, partition, member_id)

    # ----------------------------------------------------------------------------------------- rebalancing

    async def _tick(self) -> None:
        now = now_ms()
        counts = self._counts()
        for name, g in list(self.groups.items()):
            dead, release = g.expire(now)
            if dead:
                log.info("group %s: members %s timed out", name, dead)
                await asyncio.to_thread(self._apply_release, name, release)
                for m in dead:
                    await asyncio.to_thread(self.store.deregister_member, name, m)
                    self._reject(name, m, UnknownMemberIdError(f"member {m!r} timed out"))
            if g.ready(now):
                await self._complete(name, g, counts)
        for name, c in list(self.classic.items()):
            await self._settle(name, c, c.tick(now))
        if time.monotonic() - self._last_retention_check > RETENTION_CHECK_S:
            self._last_retention_check = time.monotonic()
            await self._expire_offsets(wall_ms())

    async def _complete(self, name: str, g: Group, counts: dict[str, int]) -> None:
        now = now_ms()
        completion = g.complete(g.subscribed_topics(counts), now)
        failed = await asyncio.to_thread(self._apply_completion, name, completion)
        for tp, member_id in failed:
            g.claim_failed(tp, member_id)
        g.stabilize(wall_ms())
        g.counts_seen = g.subscribed_topics(counts)
        await self._write_state(g)
        for m in completion.removed:
            self._reject(name, m, UnknownMemberIdError(f"member {m!r} did not join in time"))
        for member_id, member in g.members.items():
            waiter = self._waiters.pop((name, member_id), None)
            if waiter is not None and not waiter.done():
                waiter.set_result({"member_id": member_id, "generation": g.generation,
                                   "assignment": [list(tp) for tp in member.assignment],
                                   "revoke": [list(tp) for tp in member.revoke],
                                   "assignor": g.protocol, "coordinator": self.broker_id})
        log.info("group %s: generation %d, %d members, state %s", name, g.generation, len(g.members), g.state)

    def _apply_completion(self, group: str, completion: Completion) -> list[tuple[TP, str]]:
        """Release before claim, so no partition has two owner nodes; return the claims that met another
        member's node (withheld this generation)."""
        for m in completion.removed:
            self.store.deregister_member(group, m)
        self._apply_release(group, completion.release)
        return [(tp, member_id) for tp, member_id in completion.claim
                if not self.store.claim_owner(group, tp[0], tp[1], member_id)]

    def _reject(self, group: str, member_id: str, error: Exception) -> None:
        waiter = self._waiters.pop((group, member_id), None)
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)

    async def _write_state(self, g: Group) -> None:
        await asyncio.to_thread(self.store.set_state, g.group_id, g.to_state())

    def _counts(self) -> dict[str, int]:
        return {t: len(a.partitions) for t, a in self._metadata.topics.items()}

    async def _metadata_changed(self) -> None:
        counts = self._counts()
        if counts == self._topics_seen:
            return
        deleted = [t for t in self._topics_seen if t not in counts]
        self._topics_seen = counts
        for topic in deleted:
            log.info("topic %s was deleted: removing its committed offsets", topic)
            await asyncio.to_thread(self.store.delete_topic_offsets_everywhere, topic)
        for g in self.groups.values():
            if g.state not in (EMPTY, DEAD) and g.subscribed_topics(counts) != g.counts_seen:
                g.prepare(now_ms())

    async def _expire_offsets(self, now: int) -> None:
        """offsets.retention.minutes: an empty group's offsets go once it has been empty that long (KIP-211)."""
        groups: list[Group | ClassicGroup] = [*self.groups.values(), *self.classic.values()]
        for g in groups:
            if isinstance(g, ClassicGroup) and g.has_members:
                continue
            if g.state == EMPTY and g.empty_since_ms is not None and now - g.empty_since_ms > self.retention_ms:
                log.info("group %s was empty for over %d min: deleting it and its offsets", g.group_id,
                         self.retention_ms // 60_000)
                self._drop(g.group_id)
                await asyncio.to_thread(self.store.delete_group, g.group_id)

    def _drop(self, group: str) -> None:
        """``group`` leaves this coordinator (deleted): whatever of it is parked is answered."""
        g = self.groups.pop(group, None)
        if g is not None:
            g.state = DEAD
        c = self.classic.pop(group, None)
        if c is not None:
            self._deliver(group, c.remove_all(GroupIdNotFoundError(f"group {group!r} was deleted")))

    # --------------------------------------------------------------------------------------------- offsets

    async def commit(self, group: str, member_id: str, generation: int, offsets: dict[TP, tuple[int, str]], *,
                     instance_id: str | None = None) -> None:
        """Fenced by the group's rules (server-side: group.py; Kafka's classic protocol: classic_group.py, where
        ``instance_id`` is the committer's group.instance.id)."""

        async def commit() -> None:
            g = self._any(group)
            if isinstance(g, ClassicGroup):
                g.check_commit(member_id, instance_id, generation, now_ms())
            else:
                g.check_commit(member_id, generation)
            ts = wall_ms()
            await asyncio.to_thread(self.store.commit_offsets, group,
                                    {tp: (o, meta, ts) for tp, (o, meta) in offsets.items()})

        await self.call(commit)

    async def reset_offsets(self, group: str, offsets: dict[TP, int]) -> None:
        async def reset() -> None:
            g = self._any(group)
            if g.members or (isinstance(g, ClassicGroup) and g.has_members):
                raise NonEmptyGroupError(f"group {group!r} has {len(g.members)} members: reset only when empty")
            ts = wall_ms()
            await asyncio.to_thread(self.store.commit_offsets, group,
                                    {tp: (o, "reset", ts) for tp, o in offsets.items()})

        await self.call(reset)

    async def delete_offsets(self, group: str, topic: str, partitions: list[int] | None) -> None:
        """Kafka's OffsetDelete (KIP-496): refused while a member subscribes to ``topic``, since it would commit
        them again and a reset behind its back would be silently undone."""

        async def delete() -> None:
            g = self._any(group)
            if isinstance(g, ClassicGroup):
                if g.state != EMPTY and not g.is_consumer_group():  # Kafka cannot tell what such a group reads
                    raise NonEmptyGroupError(f"group {group!r} is {g.state} with protocol type "
                                             f"{g.protocol_type!r}: delete offsets only when it is empty")
                if g.subscribed(topic):
                    raise GroupSubscribedToTopicError(
                        f"a member of group {group!r} subscribes to {topic!r}: offsets stay")
            else:
                subscribed = sorted(m for m, member in g.members.items() if member.subscribes(topic))
                if subscribed:
                    raise GroupSubscribedToTopicError(
                        f"group {group!r} has {len(subscribed)} members subscribed to {topic!r}: offsets stay")
            if partitions is None:
                await asyncio.to_thread(self.store.delete_offsets, group, topic)
            else:
                await asyncio.to_thread(self.store.delete_partition_offsets, group, topic, partitions)

        await self.call(delete)

    # ------------------------------------------------------------------------------------------ admin views

    async def describe(self, group: str) -> dict[str, Any]:
        """The JSON view of docs/consumer-groups.md; for a Kafka-protocol group also its ``kind``, protocol type,
        leader and members' instance ids, ``assignor`` being the protocol its members selected, and each
        member's ``assignment`` decoded from its consumer-protocol bytes."""

        async def describe() -> dict[str, Any]:
            g = self._any(group)
            if isinstance(g, ClassicGroup):
                assignments = g.assignments()
                return {"group": group, "state": g.state, "generation": g.generation, "assignor": g.protocol_name,
                        "coordinator": self.broker_id, "kind": KIND, "protocol_type": g.protocol_type,
                        "leader": g.leader,
                        "members": [{"member_id": m, "client_id": member.client_id, "host": member.client_host,
                                     "group_instance_id": member.group_instance_id,
                                     "assignment": [list(tp) for tp in assignments.get(m, [])]}
                                    for m, member in g.members.items()]}
            return {"group": group, "state": g.state, "generation": g.generation, "assignor": g.protocol,
                    "kind": SERVER_SIDE,
                    "coordinator": self.broker_id,
                    "members": [{"member_id": m, "client_id": member.client_id, "host": member.host,
                                 "assignment": [list(tp) for tp in member.assignment]}
                                for m, member in sorted(g.members.items())]}

        result: dict[str, Any] = await self.call(describe)
        return result

    async def delete(self, group: str) -> None:
        async def delete() -> None:
            g = self._any(group)
            if g.members or (isinstance(g, ClassicGroup) and g.has_members):
                raise NonEmptyGroupError(f"group {group!r} has {len(g.members)} members: delete only when empty")
            self._drop(group)
            await asyncio.to_thread(self.store.delete_group, group)

        await self.call(delete)

    # ------------------------------------------------------------------------ Kafka's classic group protocol

    async def join_classic(self, group: str, req: ClassicJoin) -> ClassicJoinOutcome:
        """JoinGroup: parked until the rebalance completes, unless answered at once (MEMBER_ID_REQUIRED, a
        follower's rejoin of a Stable group, an error naming the member).

        Raises:
            NotCoordinatorError: the group is not (or no longer) coordinated here.
            InvalidSessionTimeoutError: outside Kafka's group.min/max.session.timeout.ms.
            InconsistentGroupProtocolError: the group's members speak another protocol, or are server-side.
            CoordinatorNotAvailableError: the group was just removed from this coordinator.
        """
        if not MIN_SESSION_TIMEOUT_MS <= req.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            raise InvalidSessionTimeoutError(f"session timeout {req.session_timeout_ms} ms is outside "
                                             f"{MIN_SESSION_TIMEOUT_MS}..{MAX_SESSION_TIMEOUT_MS}")

        async def join() -> tuple[str, asyncio.Future[Any], float]:
            c = self._classic(group)
            instance_or_client = req.group_instance_id or req.client_id or "consumer"
            member_id, fx = c.join(req, f"{instance_or_client}-{uuid.uuid4()}", now_ms())
            parked = self._park(group, member_id, "join")
            await self._settle(group, c, fx)
            bound = max(c.join_deadline_ms, c.ready_at_ms) - now_ms()
            return member_id, parked, max(0.0, bound / 1000) + JOIN_WAIT_SLACK_S

        member_id, parked, wait_s = await self.call(join)
        return ClassicJoinOutcome(member_id, await self._await_parked(group, member_id, "join", parked, wait_s))

    async def sync_classic(self, group: str, member_id: str, instance_id: str | None, generation: int,
                           protocol_type: str | None, protocol_name: str | None,
                           assignments: dict[str, bytes]) -> SyncOutcome:
        """SyncGroup: this member's assignment, parked until the leader's SyncGroup brought it (and the group,
        now Stable, was stored). Raises Kafka's SyncGroup errors, typed."""

        async def sync() -> tuple[asyncio.Future[Any], float, str | None, str | None]:
            c = self._classic_here(group)
            fx = c.sync(member_id, instance_id, generation, protocol_type, protocol_name, assignments, now_ms())
            parked = self._park(group, member_id, "sync")
            await self._settle(group, c, fx)
            wait_s = max(0, c.sync_deadline_ms - now_ms()) / 1000 + JOIN_WAIT_SLACK_S
            return parked, wait_s, c.protocol_type, c.protocol_name

        parked, wait_s, selected_type, selected_name = await self.call(sync)
        answer = await self._await_parked(group, member_id, "sync", parked, wait_s)
        if isinstance(answer, Exception):
            raise answer
        return SyncOutcome(selected_type, selected_name, bytes(answer))

    async def heartbeat_classic(self, group: str, member_id: str, instance_id: str | None, generation: int) -> None:
        async def beat() -> None:
            self._classic_here(group).heartbeat(member_id, instance_id, generation, now_ms())

        await self.call(beat)

    async def leave_classic(self, group: str, members: list[tuple[str, str | None]]) -> list[OdradekError | None]:
        """LeaveGroup: one error or None per (member id, group instance id), in order."""

        async def leave() -> list[OdradekError | None]:
            if group in self.groups:  # a server-side group: none of them is a Kafka-protocol member
                return [UnknownMemberIdError(f"member {m!r} is not in group {group!r}") for m, _ in members]
            c = self._classic_here(group)
            errors, fx = c.leave(members, now_ms())
            await self._settle(group, c, fx)
            return errors

        result: list[OdradekError | None] = await self.call(leave)
        return result

    def _classic_here(self, group: str) -> ClassicGroup:
        c = self.classic.get(group)
        if c is not None:
            return c
        if group in self.groups:  # a server-side group: no Kafka-protocol member can be in it
            raise UnknownMemberIdError(f"group {group!r} has no Kafka-protocol members: join it first")
        raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate group {group!r}: ask again")

    def _park(self, group: str, member_id: str, kind: str) -> asyncio.Future[Any]:
        """A future for the answer owed to this member's request (an older request of the same member and kind
        is answered REBALANCE_IN_PROGRESS: only the newest one is the member's)."""
        key = (group, member_id, kind)
        old = self._parked.pop(key, None)
        if old is not None and not old.done():
            old.set_result(RebalanceInProgressError("a newer request of this member replaced this one"))
        parked: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._parked[key] = parked
        return parked

    async def _await_parked(self, group: str, member_id: str, kind: str, parked: asyncio.Future[Any],
                            wait_s: float) -> Any:
        try:
            return await asyncio.wait_for(asyncio.shield(parked), wait_s)
        except TimeoutError:
            if self._parked.get((group, member_id, kind)) is parked:
                del self._parked[(group, member_id, kind)]
            return RebalanceInProgressError(f"group {group!r} did not complete its rebalance in time: join again")

    async def _settle(self, group: str, c: ClassicGroup, fx: Effects) -> None:
        """Store the group when it reached Stable or Empty, then answer what is owed. Members get their
        assignment only once it is stored (Kafka answers SyncGroup after its group write too); a write that
        fails voids the assignment and the group rebalances."""
        if c.state == EMPTY and c.empty_since_ms is None:
            c.empty_since_ms = wall_ms()
        elif c.state != EMPTY:
            c.empty_since_ms = None
        if fx.store:
            try:
                await asyncio.to_thread(self.store.set_state, group, c.to_state())
            except Exception as e:
                log.warning("group %s: storing generation %d failed (%s): rebalancing", group, c.generation, e)
                failed = CoordinatorNotAvailableError(f"group {group!r} could not be stored: join again")
                fx.syncs = {m: failed if isinstance(a, bytes) else a for m, a in fx.syncs.items()}
                more = c.store_failed(now_ms())
                fx.joins.update(more.joins)
                fx.syncs.update(more.syncs)
            else:
                log.info("group %s: generation %d %s, %d members, protocol %s", group, c.generation, c.state,
                         len(c.members), c.protocol_name)
        self._deliver(group, fx)

    def _deliver(self, group: str, fx: Effects) -> None:
        for kind, answers in (("join", fx.joins), ("sync", fx.syncs)):
            for member_id, answer in answers.items():
                parked = self._parked.pop((group, member_id, kind), None)
                if parked is not None and not parked.done():
                    parked.set_result(answer)

    async def fetch_offsets(self, group: str) -> dict[TP, tuple[int, str, int]]:
        """The group's committed offsets (offset, metadata, commit timestamp), read on its coordinator, as
        Kafka's OffsetFetch is (the coordinator is the one that fences the commits)."""
        self._any(group)
        offsets: dict[TP, tuple[int, str, int]] = await asyncio.to_thread(self.store.get_offsets, group)
        return offsets

    async def summary(self, group: str) -> GroupSummary:
        """DescribeGroups' view of either kind of group. A server-side group is shown as a consumer group
        whose members' metadata and assignments are consumer-protocol bytes, so Kafka's admin clients decode it
        as any consumer group; both kinds show metadata and assignments only while Stable (Kafka's rule).

        Raises:
            GroupIdNotFoundError: nothing of the group exists but its coordinator's claim (it was only looked up),
                which Kafka describes as Dead.
        """

        async def summary() -> GroupSummary:
            g = self._any(group)
            if isinstance(g, ClassicGroup):
                return g.summary()
            if not g.members and not g.generation and not await asyncio.to_thread(self._stored, group):
                raise GroupIdNotFoundError(f"group {group!r} does not exist")
            stable = g.state == STABLE
            topics = list(self._metadata.topics)
            members = tuple(ClassicMemberSummary(
                m, None, member.client_id, member.host,
                consumer_protocol.encode_subscription(t for t in topics if member.subscribes(t)) if stable else b"",
                consumer_protocol.encode_assignment(member.assignment) if stable else b"")
                for m, member in sorted(g.members.items()))
            return GroupSummary(g.state, consumer_protocol.CONSUMER if g.members or g.generation else "",
                                (g.protocol or "") if stable else "", g.generation, None, members)

        result: GroupSummary = await self.call(summary)
        return result

    async def listings(self, *, unclaimed: bool) -> list[GroupListing]:
        """ListGroups: the groups this broker coordinates that exist for Kafka (members, a stored state or
        offsets: a group id that was only looked up is not one), and with ``unclaimed`` also the stored groups
        nobody coordinates right now (their last stored state), so that one broker lists those."""

        async def snapshot() -> list[tuple[str, Group | ClassicGroup]]:
            return sorted([*self.groups.items(), *self.classic.items()], key=lambda kv: kv[0])

        loaded: list[tuple[str, Group | ClassicGroup]] = await self.call(snapshot)

        def read() -> list[GroupListing]:
            out: list[GroupListing] = []
            here = set()
            for name, g in loaded:
                here.add(name)
                if isinstance(g, ClassicGroup):
                    if g.has_members or g.generation or self._stored(name):
                        out.append(GroupListing(name, g.protocol_type or "", g.state))
                elif g.members or g.generation or self._stored(name):
                    out.append(GroupListing(name, consumer_protocol.CONSUMER if g.members or g.generation else "",
                                            g.state))
            if unclaimed:
                for name in self.store.list_groups():
                    if name in here or self.store.get_coordinator(name) is not None:
                        continue
                    state = self.store.get_state(name)
                    if state is None and not self.store.has_offsets(name):
                        continue
                    state = state or {}
                    protocol_type = (state.get("protocol_type") or "" if state.get("kind") == KIND
                                     else consumer_protocol.CONSUMER if state.get("generation") else "")
                    out.append(GroupListing(name, protocol_type, str(state.get("state") or EMPTY)))
            return out

        return await asyncio.to_thread(read)

    def _stored(self, group: str) -> bool:
        return self.store.get_state(group) is not None or self.store.has_offsets(group)
