"""The group coordinator of one broker: the groups it coordinates, driven one event at a time.

Who coordinates group G is whoever holds the ephemeral ``/consumers/G/coordinator`` (docs/consumer-groups.md):
``locate`` reads it and claims it when nobody holds it, and a broker that wins loads the group from ZooKeeper
(``Group.rebuild``). The node dies with the broker's session, so a crashed coordinator is replaced on the next
request after its session expired, never while it could still be acting.

Concurrency: every change to the groups runs on one task (a ``SerialQueue`` of ``Call``s and ``Tick``s), so the
state needs no locks; ZooKeeper calls run in threads (``asyncio.to_thread``). A join long-polls outside the
queue: it registers the member, then awaits a future that the completion of the rebalance resolves.

Dependencies: ``zk`` (the group store, the session's state) and ``odradek.protocol``, never ``broker``. The host
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

from consumer_coordinator.assignors import TP
from consumer_coordinator.group import DEAD, EMPTY, Completion, Group, Member
from consumer_coordinator.interfaces import MetadataView, QueueFactory, SerialQueue
from odradek.protocol.errors import (
    CoordinatorNotAvailableError,
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NonEmptyGroupError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from zk.client import LOST, ZkClient
from zk.groups import GroupStore

log = logging.getLogger(__name__)

TICK_S = 0.1
RETENTION_CHECK_S = 10.0


def now_ms() -> int:
    """The clock of sessions, heartbeats and rebalance deadlines: monotonic, so a wall-clock step (NTP) neither
    expires every member at once nor parks a rebalance in the future (found by odradek verify's clock faults)."""
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
        self.groups: dict[str, Group] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = {}
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
                            self.broker_id, len(self.groups))
                self.groups.clear()
                self._fail_all(NotCoordinatorError("the coordinator lost its ZooKeeper session: ask again"))

    def _fail_all(self, error: Exception) -> None:
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(error)
        self._waiters.clear()

    # ------------------------------------------------------------------------------------------- locating

    async def locate(self, group: str, *, must_exist: bool = False) -> int:
        """The broker id coordinating ``group``, claiming it if nobody does (and loading it if we win)."""
        if group in self.groups:
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
        if group in self.groups:
            return
        state = await asyncio.to_thread(self.store.get_state, group)
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
        g = self.groups.get(group)
        if g is None:
            raise NotCoordinatorError(f"broker {self.broker_id} does not coordinate group {group!r}: ask again")
        return g

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
        g = self._local(group)
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
        for name, g in list(self.groups.items()):
            if g.state == EMPTY and g.empty_since_ms is not None and now - g.empty_since_ms > self.retention_ms:
                log.info("group %s was empty for over %d min: deleting it and its offsets", name,
                         self.retention_ms // 60_000)
                g.state = DEAD
                del self.groups[name]
                await asyncio.to_thread(self.store.delete_group, name)

    # --------------------------------------------------------------------------------------------- offsets

    async def commit(self, group: str, member_id: str, generation: int, offsets: dict[TP, tuple[int, str]]) -> None:
        async def commit() -> None:
            self._local(group).check_commit(member_id, generation)
            ts = wall_ms()
            await asyncio.to_thread(self.store.commit_offsets, group,
                                    {tp: (o, meta, ts) for tp, (o, meta) in offsets.items()})

        await self.call(commit)

    async def reset_offsets(self, group: str, offsets: dict[TP, int]) -> None:
        async def reset() -> None:
            g = self._local(group)
            if g.members:
                raise NonEmptyGroupError(f"group {group!r} has {len(g.members)} members: reset only when empty")
            ts = wall_ms()
            await asyncio.to_thread(self.store.commit_offsets, group,
                                    {tp: (o, "reset", ts) for tp, o in offsets.items()})

        await self.call(reset)

    async def delete_offsets(self, group: str, topic: str, partitions: list[int] | None) -> None:
        """Kafka's OffsetDelete (KIP-496): refused while a member subscribes to ``topic``, since it would commit
        them again and a reset behind its back would be silently undone."""

        async def delete() -> None:
            g = self._local(group)
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
        async def describe() -> dict[str, Any]:
            g = self._local(group)
            return {"group": group, "state": g.state, "generation": g.generation, "assignor": g.protocol,
                    "coordinator": self.broker_id,
                    "members": [{"member_id": m, "client_id": member.client_id, "host": member.host,
                                 "assignment": [list(tp) for tp in member.assignment]}
                                for m, member in sorted(g.members.items())]}

        result: dict[str, Any] = await self.call(describe)
        return result

    async def delete(self, group: str) -> None:
        async def delete() -> None:
            g = self._local(group)
            if g.members:
                raise NonEmptyGroupError(f"group {group!r} has {len(g.members)} members: delete only when empty")
            g.state = DEAD
            del self.groups[group]
            await asyncio.to_thread(self.store.delete_group, group)

        await self.call(delete)
