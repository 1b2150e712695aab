"""Confluent REST Proxy v2 consumer instances, living in a broker process and backed by consumer groups.

An instance is what ``POST /consumers/{group}`` creates: a consumer with a format (binary or json), positions,
and either a subscription (then it is a member of the group, like any Python ``GroupConsumer``) or a manual
assignment. Records and offsets are read through the broker's fetch and offsets services, as the REST reads are
(``FetchService.fetch_anywhere``, ``OffsetsService.list_offsets``: the local leader replica, or one hop to the
leader when another broker leads, leader changes waited out), and rendered by the same function as the JSON read.

Membership: a subscribed instance is the asyncio driver of the member state machine
(``odradek.protocol.group_member``), the same rules as the Python group consumer. One task per subscribed instance
performs its actions: joins and heartbeats as tasks of their own (so heartbeats go on while a join long-polls, and
a coordinator that freezes during a join is noticed within the session), a join answer applied under the instance's
lock (revoke: commit if auto-commit, then drop; assign: start at the committed offset, else ``auto.offset.reset``),
a loss applied at once. A read waits for the first assignment without that lock and gives it up to a join answer
during its long-poll, so the join and the fetch share the read's timeout, as in Kafka's ``poll(timeout)``. A manual
assignment needs no group: committed offsets are looked up (none, or no group at all: ``auto.offset.reset``) and
commits go into the group id as a standalone committer's. Every group operation goes through the broker's
``GroupRouter`` (broker/group_router.py): the coordinator service in-process when this broker coordinates the
group, else one inter-broker hop to the broker that does. A REST client that stops calling does not stop the
heartbeats (as with Confluent's proxy, whose Kafka consumer heartbeats in the background); the instance expires
after ``consumer.instance.timeout.ms`` without a request, and is then deleted as by a DELETE: it commits (when
auto-committing), leaves its group, and its name's ZooKeeper record goes (broker/consumer_locator.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.api.embedded import BINARY, JSON, SCHEMA_TYPES, record_json
from broker.consumer_locator import ConsumerLocator, generated_name, holder_in_name
from broker.fetch.offsets import ListOffsetsRequest
from broker.fetch.service import FetchRequest
from broker.group_router import GroupRouter
from consumer_coordinator.coordinator import JoinRequest
from odradek.protocol.errors import (
    ConsumerAlreadyExistsError,
    ConsumerInstanceNotFoundError,
    GroupIdNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InvalidRequestError,
    OdradekError,
    OffsetOutOfRangeError,
    RebalanceInProgressError,
    RecordDeserializationError,
    RequestTimedOutError,
    UnknownMemberIdError,
)
from odradek.protocol.group_member import (
    Action,
    Assign,
    GroupMember,
    JoinResult,
    JoinSpec,
    Lost,
    Revoke,
    SendHeartbeat,
    SendJoin,
    SendLeave,
)
from odradek.protocol.model import TopicPartition
from odradek.protocol.records import decode_batch, iter_batch_headers

if TYPE_CHECKING:
    from broker.server import Broker

__all__ = ["ConsumerInstance", "InstanceConfig", "RestInstanceManager"]

log = logging.getLogger(__name__)

DEFAULT_INSTANCE_TIMEOUT_MS = 300_000
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
HEARTBEAT_INTERVAL_MS = SESSION_TIMEOUT_MS // 3
JOIN_RETRY_BACKOFF_MS = 200
READ_RETRY_BACKOFF_MS = 100  # a read whose positions could not be looked up (retriable) tries again after this
GROUP_CALL_TIMEOUT_S = SESSION_TIMEOUT_MS / 2000  # a heartbeat or leave that takes longer is as good as failed
NAME_RE = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")


@dataclass(frozen=True)
class InstanceConfig:
    format: str = BINARY
    auto_offset_reset: str = "latest"
    auto_commit_enable: bool = True
    fetch_min_bytes: int = -1
    request_timeout_ms: int = 1000

    @staticmethod
    def parse(body: dict[str, Any]) -> InstanceConfig:
        """The create request's settings, validated (Confluent names; strings or natives accepted)."""
        fmt = str(body.get("format") or BINARY).lower()
        if fmt not in (BINARY, JSON) and fmt not in SCHEMA_TYPES:
            raise InvalidRequestError(f"format must be binary, json, avro, jsonschema or protobuf, not {fmt!r}")
        reset = str(body.get("auto.offset.reset") or "latest").lower()
        if reset == "smallest":
            reset = "earliest"
        if reset == "largest":
            reset = "latest"
        if reset not in ("earliest", "latest", "none"):
            raise InvalidRequestError("auto.offset.reset must be earliest, latest or none")
        raw_commit = body.get("auto.commit.enable", True)
        if isinstance(raw_commit, str) and raw_commit.lower() in ("true", "false"):
            commit = raw_commit.lower() == "true"
        elif isinstance(raw_commit, bool):
            commit = raw_commit
        else:
            raise InvalidRequestError("auto.commit.enable must be true or false")
        return InstanceConfig(fmt, reset, commit, _int_setting(body, "fetch.min.bytes", -1, -1),
                              _int_setting(body, "consumer.request.timeout.ms", 1000, 0))


def _int_setting(body: dict[str, Any], key: str, default: int, minimum: int) -> int:
    raw = body.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidRequestError(f"{key} must be an integer") from None
    if isinstance(raw, bool) or value < minimum:
        raise InvalidRequestError(f"{key} must be an integer >= {minimum}")
    return value


@dataclass
class ConsumerInstance:
    group: str
    name: str
    config: InstanceConfig
    base_uri: str
    mode: str | None = None  # None, "subscribe" or "assign"
    topics: list[str] = field(default_factory=list)
    pattern: str | None = None
    assigned: set[TopicPartition] = field(default_factory=set)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    resets: dict[TopicPartition, str] = field(default_factory=dict)  # pending seeks to beginning / end
    last_used: float = field(default_factory=time.monotonic)
    joined: asyncio.Event = field(default_factory=asyncio.Event)  # a join answer was applied
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # fair (FIFO), which read() relies on
    apply_wanted: asyncio.Event = field(default_factory=asyncio.Event)  # a join answer waits for the lock
    applies_waiting: int = 0
    reads: int = 0  # reads in progress (one may be waiting without the lock)
    task: asyncio.Task[None] | None = None
    member: GroupMember | None = None  # the member state machine, while subscribed
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # the membership task has something to look at

    def touch(self) -> None:
        self.last_used = time.monotonic()


class RestInstanceManager:
    """The instances this broker holds, their membership tasks and their expiry.

    ``router`` runs group operations on the group's coordinator (the broker's ``group_router`` unless given);
    ``locator`` records client-named instances in ZooKeeper (unless given, one on the broker's session).
    """

    def __init__(self, broker: Broker, *, instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS,
                 router: GroupRouter | None = None, locator: ConsumerLocator | None = None) -> None:
        self.broker = broker
        self.instance_timeout_s = instance_timeout_ms / 1000.0
        self.instances: dict[tuple[str, str], ConsumerInstance] = {}
        self.located: dict[tuple[str, str], int] = {}  # instances held by other brokers, as last found
        self._router = router
        self.locator = locator if locator is not None else ConsumerLocator(broker.zk, broker.broker_id)
        self._reaper: asyncio.Task[None] | None = None

    @property
    def router(self) -> GroupRouter:
        return self._router if self._router is not None else self.broker.group_router

    # -------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap())

    async def close(self) -> None:
        """Delete every instance (commit, leave). Their ZooKeeper records are ephemeral: they go with the
        broker's session, which closes next."""
        if self._reaper is not None:
            self._reaper.cancel()
        for inst in list(self.instances.values()):
            await self.delete(inst.group, inst.name, unregister=False)

    async def _reap(self) -> None:
        tick = max(0.05, min(1.0, self.instance_timeout_s / 4))
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for inst in [i for i in self.instances.values() if now - i.last_used > self.instance_timeout_s]:
                if inst.lock.locked() or inst.reads:
                    continue  # a request is using it right now
                log.info("consumer instance %s/%s expired", inst.group, inst.name)
                with contextlib.suppress(ConsumerInstanceNotFoundError):  # a request may have deleted it meanwhile
                    await self.delete(inst.group, inst.name)

    # ------------------------------------------------------------------------------------- instances

    def create(self, group: str, name: str | None, config: InstanceConfig) -> ConsumerInstance:
        name = name or f"rest-consumer-{uuid.uuid4()}"
        if not NAME_RE.match(name):
            raise InvalidRequestError("name may hold letters, digits, '.', '_' and '-' (at most 249)")
        if (group, name) in self.instances:
            raise ConsumerAlreadyExistsError(
                "Consumer with specified consumer ID already exists in the specified consumer group.")
        base = f"{self.broker.info().url}/consumers/{group}/instances/{name}"
        inst = ConsumerInstance(group, name, config, base)
        self.instances[(group, name)] = inst
        self.start()
        return inst

    async def open(self, group: str, name: str | None, config: InstanceConfig) -> ConsumerInstance:
        """Create an instance on this broker and record where it lives (other brokers then forward its requests
        here in one hop). ``name`` None: a generated name that says this broker holds it; a client-chosen name of
        that form must name this broker, since other brokers trust it to find the holder without a lookup.

        Raises:
            InvalidRequestError: a bad name, or a generated-form name that names another broker.
            ConsumerAlreadyExistsError: the group has an instance of that name.
        """
        broker_id = self.broker.broker_id
        if name and holder_in_name(name) not in (None, broker_id):
            raise InvalidRequestError("names of the form rest-consumer-<broker id>-<uuid> are the ids brokers "
                                      "generate; this one names another broker")
        inst = self.create(group, name or generated_name(broker_id), config)
        await self.created(inst)
        return inst

    async def created(self, inst: ConsumerInstance) -> None:
        """Record where the instance lives, so that other brokers forward its requests here in one hop."""
        await self.locator.created(inst.group, inst.name)

    def get(self, group: str, name: str) -> ConsumerInstance:
        inst = self.instances.get((group, name))
        if inst is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        inst.touch()
        return inst

    async def delete(self, group: str, name: str, *, unregister: bool = True) -> None:
        """Commit (when auto-committing) and leave the group, forget the instance and, with ``unregister``, its
        ZooKeeper record: a DELETE and an expiry alike, so no record outlives its instance for long."""
        inst = self.instances.pop((group, name), None)
        if inst is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        try:
            if inst.mode == "assign" and inst.config.auto_commit_enable:
                # KafkaConsumer.close() auto-commits whenever it has a group.id (Confluent always sets one),
                # a manual assignment too: as a standalone committer, into the group id.
                try:
                    await self.commit(inst, None)
                except OdradekError as exc:
                    log.info("commit of %s/%s on closing failed: %s", inst.group, inst.name, exc)
            await self._stop_membership(inst, commit=inst.config.auto_commit_enable)
        finally:
            if unregister:
                await self.locator.deleted(group, name)

    # ---------------------------------------------------------------------------------- subscription

    async def subscribe(self, inst: ConsumerInstance, topics: list[str] | None, pattern: str | None) -> None:
        if inst.mode == "assign":
            raise IllegalStateError("Illegal state: Subscription to topics, partitions and pattern are "
                                    "mutually exclusive.")
        inst.mode = "subscribe"
        inst.topics, inst.pattern = list(topics or []), pattern
        if inst.member is None:
            inst.member = GroupMember(
                client_id=f"rest-proxy-{self.broker.broker_id}-{inst.name}", assignor="cooperative-sticky",
                session_timeout_ms=SESSION_TIMEOUT_MS, rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
                max_poll_interval_ms=int(self.instance_timeout_s * 1000), heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                retry_backoff_ms=JOIN_RETRY_BACKOFF_MS, now=time.monotonic(),
                leave_on_poll_timeout=False)  # the reaper deletes (commits, leaves) an idle instance instead
        inst.member.subscribe(topics, pattern)
        inst.wake.set()
        if inst.task is None or inst.task.done():
            inst.task = asyncio.create_task(self._membership(inst))

    async def unsubscribe(self, inst: ConsumerInstance) -> None:
        await self._stop_membership(inst, commit=inst.config.auto_commit_enable)
        inst.mode, inst.topics, inst.pattern = None, [], None

    def assign(self, inst: ConsumerInstance, partitions: list[TopicPartition]) -> None:
        if inst.mode == "subscribe":
            raise IllegalStateError("Illegal state: Subscription to topics, partitions and pattern are "
                                    "mutually exclusive.")
        inst.mode = "assign" if partitions else None
        inst.assigned = set(partitions)
        inst.positions = {tp: o for tp, o in inst.positions.items() if tp in inst.assigned}
        inst.resets = {tp: r for tp, r in inst.resets.items() if tp in inst.assigned}

    async def _stop_membership(self, inst: ConsumerInstance, *, commit: bool) -> None:
        """Stop the membership task (no join or heartbeat of it acts afterwards), commit, leave, forget."""
        task, inst.task = inst.task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])
        member = inst.member
        if member is not None:
            if commit and member.commit_fencing() is not None:
                try:
                    await self.commit(inst, None)
                except OdradekError as exc:
                    log.info("commit of %s/%s on leaving failed: %s", inst.group, inst.name, exc)
            for action in member.close():
                if isinstance(action, SendLeave):
                    await self._leave(inst, action)
        inst.member = None
        inst.assigned, inst.positions, inst.resets = set(), {}, {}
        inst.joined.clear()

    # ------------------------------------------------------------------------------------ membership

    async def _membership(self, inst: ConsumerInstance) -> None:
        """The driver's loop: perform what the state machine says is due, then sleep until its next deadline or
        until a join, a heartbeat or a request changes something (``inst.wake``)."""
        member = inst.member
        assert member is not None
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                inst.wake.clear()
                for action in member.tick(time.monotonic()):
                    if isinstance(action, SendJoin):
                        running.add(asyncio.create_task(self._join(inst, member, action)))
                    elif isinstance(action, SendHeartbeat):
                        running.add(asyncio.create_task(self._heartbeat(inst, member, action)))
                    else:
                        await self._perform(inst, action)
                running = {t for t in running if not t.done()}
                deadline = member.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
                # asyncio.timeout, not wait_for: on 3.11 a wait_for whose event is set in the same step as this task
                # is cancelled returns normally, the cancellation is lost, and this loop would outlive its
                # instance's close (_stop_membership waiting on it for ever)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await inst.wake.wait()
        finally:
            for t in running:  # the instance is leaving: no join or heartbeat may change it afterwards
                t.cancel()
            if running:
                await asyncio.wait(running)

    async def _perform(self, inst: ConsumerInstance, action: Action) -> None:
        """A loss, or a leave (the poll-interval leave is off here: only closing sends one)."""
        if isinstance(action, Lost):
            if action.partitions:
                log.warning("consumer instance %s/%s lost %d partitions: %s", inst.group, inst.name,
                            len(action.partitions), action.reason)
            inst.assigned, inst.positions = set(), {}  # another member may own them now: read nothing of them
        elif isinstance(action, SendLeave):
            await self._leave(inst, action)

    async def _perform_all(self, inst: ConsumerInstance, actions: list[Action]) -> None:
        for action in actions:
            await self._perform(inst, action)
        if actions:
            inst.wake.set()

    async def _join(self, inst: ConsumerInstance, member: GroupMember, send: SendJoin) -> None:
        try:
            routed = await self.router.join(inst.group, self._join_request(send.spec))
            result = JoinResult.parse(routed.value)
        except Exception as exc:  # whatever it was, the state machine must hear the join is over
            if not isinstance(exc, UnknownMemberIdError):
                log.info("join of %s/%s failed: %r", inst.group, inst.name, exc)
            await self._perform_all(inst, member.join_failed(exc, time.monotonic()))
            inst.wake.set()
            return
        actions = member.join_succeeded(result, time.monotonic())
        # Not while a request reads or seeks; a read long-polling under the lock gives it up (read()). The waiter
        # is queued on the lock before any reader can see ``apply_wanted`` (no await in between).
        inst.applies_waiting += 1
        inst.apply_wanted.set()
        try:
            async with inst.lock:
                await self._apply(inst, member, result.generation, actions)
        finally:
            inst.applies_waiting -= 1
            if not inst.applies_waiting:
                inst.apply_wanted.clear()
        inst.wake.set()

    def _join_request(self, spec: JoinSpec) -> JoinRequest:
        return JoinRequest(spec.member_id, spec.client_id, self.broker.info().host,
                           None if spec.topics is None else frozenset(spec.topics), spec.pattern, spec.assignor,
                           spec.session_timeout_ms, spec.rebalance_timeout_ms,
                           [(tp.topic, tp.partition) for tp in spec.owned])

    async def _apply(self, inst: ConsumerInstance, member: GroupMember, generation: int,
                     actions: list[Action]) -> None:
        """Revoke (commit when auto-committing, then drop), then assign (committed offsets, else the reset policy
        when read). Re-checked after every await: a loss meanwhile voids the rest of this answer."""

        def current() -> bool:
            return inst.member is member and member.pending_generation == generation

        for action in actions:
            if not current():
                return
            if isinstance(action, Revoke):
                if inst.config.auto_commit_enable:
                    try:
                        await self.commit(inst, None, only=set(action.partitions))
                    except OdradekError as exc:
                        log.info("commit before revoking failed for %s/%s: %s", inst.group, inst.name, exc)
                inst.assigned -= action.partitions
                inst.positions = {tp: o for tp, o in inst.positions.items() if tp not in action.partitions}
            elif isinstance(action, Assign):
                try:
                    committed = await self._committed(inst.group, {tp.topic for tp in action.partitions})
                except OdradekError as exc:
                    log.info("cannot read committed offsets for %s/%s (%s): rejoining", inst.group, inst.name, exc)
                    member.rejoin()
                    continue
                if not current():
                    return
                inst.assigned |= action.partitions
                for tp in action.partitions:
                    if tp in committed:
                        inst.positions[tp] = committed[tp][0]
        if current():
            member.applied(inst.assigned)
            inst.joined.set()

    async def _heartbeat(self, inst: ConsumerInstance, member: GroupMember, send: SendHeartbeat) -> None:
        try:
            routed = await asyncio.wait_for(self.router.heartbeat(inst.group, send.member_id, send.generation),
                                            GROUP_CALL_TIMEOUT_S)
        except TimeoutError:
            actions = member.heartbeat_failed(RequestTimedOutError("the heartbeat was not answered in time"),
                                              time.monotonic())
        except Exception as exc:  # whatever it was, the state machine must hear the beat is over
            if not isinstance(exc, UnknownMemberIdError | IllegalGenerationError | RebalanceInProgressError):
                log.info("heartbeat of %s/%s failed: %r", inst.group, inst.name, exc)
            actions = member.heartbeat_failed(exc, time.monotonic())
        else:
            body = routed.value
            actions = member.heartbeat_succeeded(time.monotonic(),
                                                 rebalance=isinstance(body, dict) and bool(body.get("rebalance")))
        await self._perform_all(inst, actions)
        inst.wake.set()

    async def _leave(self, inst: ConsumerInstance, send: SendLeave) -> None:
        try:
            await asyncio.wait_for(self.router.leave(inst.group, send.member_id), GROUP_CALL_TIMEOUT_S)
        except (OdradekError, TimeoutError) as exc:
            log.info("leave of %s/%s failed (its session will expire): %r", inst.group, inst.name, exc)

    def _lose_if_expired(self, inst: ConsumerInstance) -> None:
        """Before handing out records: if the coordinator may have expired the member, drop everything now."""
        if inst.member is None:
            return
        for action in inst.member.expire(time.monotonic()):
            if isinstance(action, Lost):
                inst.assigned, inst.positions = set(), {}
                inst.wake.set()

    # ------------------------------------------------------------------------------------ offsets

    async def commit(self, inst: ConsumerInstance, offsets: dict[TopicPartition, tuple[int, str]] | None,
                     only: set[TopicPartition] | None = None) -> None:
        """Commit ``offsets`` (next offsets to read) or the positions of what was returned so far. A subscribed
        instance commits as its member (fenced by its generation); an assign-only one, or one not in its group
        right now, as a standalone committer (member "" and generation -1: accepted only by an empty group)."""
        if offsets is None:
            offsets = {tp: (o, "") for tp, o in inst.positions.items() if only is None or tp in only}
        if not offsets:
            return
        member = inst.member if inst.mode == "subscribe" else None
        fencing = member.commit_fencing() if member is not None else None
        member_id, generation = fencing if fencing is not None else ("", -1)
        try:
            await self.router.commit(inst.group, member_id, generation,
                                     {(tp.topic, tp.partition): om for tp, om in offsets.items()})
        except OdradekError as exc:
            if member is not None:
                await self._perform_all(inst, member.commit_failed(exc, fencing, time.monotonic()))
            raise

    async def committed(self, inst: ConsumerInstance, partitions: list[TopicPartition]) -> list[dict[str, Any]]:
        found = await self._committed(inst.group, {tp.topic for tp in partitions})
        out = []
        for tp in partitions:
            offset, metadata = found.get(tp, (-1, ""))
            out.append({"topic": tp.topic, "partition": tp.partition, "offset": offset, "metadata": metadata})
        return out

    async def _committed(self, group: str, topics: set[str]) -> dict[TopicPartition, tuple[int, str]]:
        """What the group committed for ``topics``; a group nobody committed into or joined yet (manual
        assignments only) has no znode, and has simply committed nothing (as Kafka's OffsetFetch answers)."""
        try:
            found = await self.router.committed_offsets(group)
        except GroupIdNotFoundError:
            return {}
        return {TopicPartition(t, p): (o, meta) for (t, p), (o, meta, _) in found.items() if t in topics and o >= 0}

    # ------------------------------------------------------------------------------------ records

    async def read(self, inst: ConsumerInstance, timeout_ms: int, max_bytes: int) -> list[dict[str, Any]]:
        """Records from the instance's partitions, long-polling up to ``timeout_ms``, as Confluent's read task
        polls its Kafka consumer until the request's timeout: the group join and the fetch share that timeout.
        A subscribed instance's first assignment is awaited without the instance's lock (its join answer is
        applied under it), so the read that starts the join returns the records as soon as the assignment is
        there; a later join answer arriving during the long-poll is applied at once too (the read answers what it
        has, or lets the answer through and goes on with the new assignment). Positions advance past what is
        returned (so an empty commit commits exactly what the client has seen).

        Raises:
            IllegalStateError: the instance neither subscribes nor has an assignment.
            OffsetOutOfRangeError: a partition has no position and ``auto.offset.reset`` is none (Kafka's
                NoOffsetForPartitionException), or its position left the log and the policy is none.
        """
        deadline = time.monotonic() + timeout_ms / 1000.0
        inst.reads += 1
        try:
            return await self._read(inst, deadline, max_bytes)
        finally:
            inst.reads -= 1

    def rewind(self, inst: ConsumerInstance, offsets: dict[TopicPartition, int]) -> None:
        """Move positions back to ``offsets``: records a read returned that the caller did not hand to its client
        (REST Proxy v1 keeps a record that would reach the request's ``max_bytes`` for the next read, where
        :meth:`read` always returns at least one). A partition no longer assigned, or already before the offset,
        is left alone."""
        for tp, offset in offsets.items():
            if tp in inst.assigned and tp in inst.positions:
                inst.positions[tp] = min(inst.positions[tp], offset)

    async def _read(self, inst: ConsumerInstance, deadline: float, max_bytes: int) -> list[dict[str, Any]]:
        while True:
            if inst.mode is None:
                raise IllegalStateError("Illegal state: Consumer is not subscribed to any topics or assigned any "
                                        "partitions")
            if inst.mode == "subscribe" and not await _wait(inst.joined, deadline):
                return []  # no assignment within the timeout
            if not await _acquire(inst.lock, deadline):
                return []
            try:
                if inst.mode == "subscribe" and not inst.joined.is_set():
                    continue  # unsubscribed (and subscribed again) while we waited for the lock
                if inst.mode is None:
                    continue  # unsubscribed meanwhile: the check above answers
                out, done = await self._read_locked(inst, deadline, max_bytes)
            finally:
                inst.lock.release()
            if done or out:
                return out
            # A join answer wants the lock: the lock is fair, so it is applied before we hold the lock again.

    def _decoder(self, fmt: str) -> Callable[[bytes | None], Any] | None:
        """The avro/jsonschema/protobuf formats' decoding of a framed key or value by its schema id, through the
        registry service (kafka-rest's v2 consumers deserialize with Confluent's deserializers); None for
        binary and json."""
        if fmt not in SCHEMA_TYPES:
            return None
        registry, schema_type = self.broker.schema_registry, SCHEMA_TYPES[fmt]
        return lambda data: registry.decode_framed(data, schema_type)

    async def _read_locked(self, inst: ConsumerInstance, deadline: float, max_bytes: int
                           ) -> tuple[list[dict[str, Any]], bool]:
        """Read under the instance's lock until ``fetch.min.bytes``, ``max_bytes`` or the deadline (done), or until
        a join answer waits for the lock (not done: the caller lets it through)."""
        out: list[dict[str, Any]] = []
        min_bytes = max(1, inst.config.fetch_min_bytes)
        decode = self._decoder(inst.config.format)
        size = 0
        while True:
            if inst.apply_wanted.is_set():
                return out, False
            if inst.mode == "subscribe":
                self._lose_if_expired(inst)  # the coordinator may have expired us: then read nothing
            partitions = sorted(inst.assigned)
            if not partitions:  # nothing assigned (more members than partitions): wait as a long-poll would
                await _wait(inst.apply_wanted, deadline)
                return out, not inst.apply_wanted.is_set()
            await self._resolve(inst, [tp for tp in partitions if tp not in inst.positions])
            if not any(tp in inst.positions for tp in partitions):  # lookups failed retriably: back off a little
                await _wait(inst.apply_wanted, min(deadline, time.monotonic() + READ_RETRY_BACKOFF_MS / 1000))
                if time.monotonic() >= deadline:
                    return out, True
                continue
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            batches = await self._read_some(inst, partitions, remaining_ms, max(1, max_bytes - size))
            if decode is not None:  # the registry's copy may trail a registration made on another broker
                await self.broker.schema_registry.await_ids([d for _, records, _ in batches for r in records
                                                             for d in (r.key, r.value)])
            for tp, records, next_offset in batches:
                if inst.positions.get(tp) is None or tp not in inst.assigned:
                    continue  # revoked while we read
                for r in records:
                    try:
                        rendered = record_json(tp.topic, tp.partition, r, inst.config.format, decode)
                    except RecordDeserializationError:
                        if out:  # answer what decoded; the position stays on this record for the next read
                            return out, True
                        raise
                    cost = len(r.key or b"") + len(r.value or b"") + 64
                    if out and size + cost > max_bytes:
                        return out, True
                    out.append(rendered)
                    size += cost
                    inst.positions[tp] = r.offset + 1
                # All of this fetch was handed out: skip past control batches and compaction gaps too.
                inst.positions[tp] = max(inst.positions[tp], next_offset)
            if size >= min_bytes or time.monotonic() >= deadline:
                return out, True

    async def _read_some(self, inst: ConsumerInstance, partitions: list[TopicPartition], timeout_ms: int,
                         max_bytes: int) -> list[tuple[TopicPartition, list[Any], int]]:
        """Read every partition at once; return when the first brings records (or all came back empty), or when
        a join answer waits for the instance's lock (with what came back so far)."""
        tasks = {asyncio.create_task(self._read_partition(inst, tp, inst.positions[tp], max_bytes, timeout_ms)): tp
                 for tp in partitions if tp in inst.positions}
        results: list[tuple[TopicPartition, list[Any], int]] = []
        pending = set(tasks)
        interrupt = asyncio.create_task(inst.apply_wanted.wait())
        try:
            while pending:
                done, pending = await asyncio.wait(pending | {interrupt}, return_when=asyncio.FIRST_COMPLETED)
                for t in done - {interrupt}:
                    try:
                        results.append(t.result())
                    except OffsetOutOfRangeError as exc:
                        await self._out_of_range(inst, tasks[t], exc)
                    except OdradekError as exc:
                        if not exc.retriable:
                            raise
                        log.debug("read of %s failed: %s", tasks[t], exc)
                pending.discard(interrupt)
                if any(recs for _, recs, _ in results) or interrupt.done():
                    break
        finally:
            for t in (*pending, interrupt):
                t.cancel()
        return results

    async def _read_partition(self, inst: ConsumerInstance, tp: TopicPartition, offset: int, max_bytes: int,
                              timeout_ms: int) -> tuple[TopicPartition, list[Any], int]:
        """Records at ``offset`` of the leader wherever it is (the fetch service's REST read: here, or forwarded
        once), long-polling up to ``timeout_ms``; decoded here, where they are rendered one by one anyway."""
        read = await self.broker.fetches.fetch_anywhere(FetchRequest(tp.topic, tp.partition, offset, max_bytes,
                                                                     max_wait_ms=timeout_ms))
        data = read.records
        assert isinstance(data, bytes | bytearray)  # fetch_anywhere answers bytes, never file ranges
        records: list[Any] = []
        next_offset = offset
        for pos, header in iter_batch_headers(data):
            batch_next = header.base_offset + header.last_offset_delta + 1
            if batch_next <= offset:
                continue
            if not header.is_control and header.record_count:
                records.extend(r for r in decode_batch(data, pos) if r.offset >= offset)
            next_offset = max(next_offset, batch_next)
        return tp, records, next_offset

    async def _out_of_range(self, inst: ConsumerInstance, tp: TopicPartition, exc: OffsetOutOfRangeError) -> None:
        reset = inst.config.auto_offset_reset
        if reset == "none":
            raise exc
        inst.positions.pop(tp, None)
        inst.resets[tp] = reset
        await self._resolve(inst, [tp])

    async def _resolve(self, inst: ConsumerInstance, partitions: list[TopicPartition]) -> None:
        """Positions for ``partitions``, as Kafka's consumer finds them: a pending seek to beginning/end, else the
        group's committed offset (one lookup for all; a group that does not exist has committed nothing, so an
        assign-only instance needs no group), else ``auto.offset.reset``. A lookup that fails retriably leaves
        the positions unset (the next round tries again).

        Raises:
            OffsetOutOfRangeError: some have no committed offset and the policy is none (Kafka's
                NoOffsetForPartitionException, with its message).
        """
        seeks = {tp: inst.resets.pop(tp) for tp in partitions if tp in inst.resets}
        strategies = dict(seeks)
        unknown = [tp for tp in partitions if tp not in strategies]
        if unknown:
            try:
                committed = await self._committed(inst.group, {tp.topic for tp in unknown})
            except OdradekError as exc:
                if not exc.retriable:
                    raise
                log.debug("no committed offsets for %s/%s yet: %s", inst.group, inst.name, exc)
                unknown = []
            for tp in unknown:
                if tp in committed:
                    inst.positions[tp] = committed[tp][0]
                else:
                    strategies[tp] = inst.config.auto_offset_reset
        undefined = sorted(tp for tp, s in strategies.items() if s == "none")
        if undefined:
            raise OffsetOutOfRangeError("Undefined offset with no reset policy for partitions: [" + ", ".join(
                f"{tp.topic}-{tp.partition}" for tp in undefined) + "]", topic=undefined[0].topic,
                partition=undefined[0].partition)
        for tp, strategy in strategies.items():
            try:
                begin, end = await self.bounds(tp)
            except OdradekError as exc:
                if not exc.retriable:
                    raise
                if tp in seeks:
                    inst.resets.setdefault(tp, seeks[tp])  # the seek still waits: the next round tries again
                log.debug("no offsets for %s yet: %s", tp, exc)
                continue
            inst.positions[tp] = begin if strategy == "earliest" else end

    async def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, high watermark) from the leader, wherever it is (the offsets service's REST read)."""
        offsets = await self.broker.offsets.list_offsets(ListOffsetsRequest(tp.topic, tp.partition))
        return offsets.log_start_offset, offsets.end_offset


async def _wait(event: asyncio.Event, deadline: float) -> bool:
    """Whether ``event`` is set, waiting for it until ``deadline`` (monotonic)."""
    if not event.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.0, deadline - time.monotonic()))
    return event.is_set()


async def _acquire(lock: asyncio.Lock, deadline: float) -> bool:
    """Whether ``lock`` was acquired before ``deadline`` (monotonic); the caller releases it."""
    try:
        async with asyncio.timeout(max(0.0, deadline - time.monotonic())):  # a free lock is taken even at 0
            await lock.acquire()
    except TimeoutError:
        return False
    return True
