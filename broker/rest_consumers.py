"""Confluent REST Proxy v2 consumer instances, living in a broker process and backed by consumer groups.

An instance is what ``POST /consumers/{group}`` creates: a consumer with a format (binary or json), positions,
and either a subscription (then it is a member of the group, like any Python ``GroupConsumer``) or a manual
assignment. Why it calls the group API over HTTP, on its own broker, rather than the coordinator object: the
coordinator of the group may be another broker, and the group API already forwards to it; one code path, the
same fencing as every other member. Records are read through the broker's fetch path (the local leader replica,
or the leader's binary fetch when another broker leads) and rendered by the same function as the JSON read.

Membership runs as one asyncio task per subscribed instance: join (long-poll), apply the answer (revoke ->
commit if auto-commit, then drop and join again; added -> start at the committed offset, else
``auto.offset.reset``), heartbeat every third of the session. A REST client that stops calling does not stop the
heartbeats (as with Confluent's proxy, whose Kafka consumer heartbeats in the background); the instance expires
after ``consumer.instance.timeout.ms`` without a request, and then leaves its group.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from broker.api.embedded import BINARY, JSON, record_json
from broker.produce import forwarding as forward
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    GroupIdNotFoundError,
    InvalidRequestError,
    NotLeaderOrFollowerError,
    OdradekError,
    OffsetOutOfRangeError,
    error_for,
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
NAME_RE = re.compile(r"^[A-Za-z0-9._\-]{1,249}$")


class ConsumerInstanceNotFoundError(OdradekError):
    name = "CONSUMER_INSTANCE_NOT_FOUND"
    error_code = 40403
    http_status = 404


class ConsumerAlreadyExistsError(OdradekError):
    name = "CONSUMER_ALREADY_EXISTS"
    error_code = 40902
    http_status = 409


class IllegalStateError(OdradekError):
    """Confluent's 40903: e.g. subscribing an instance that has a manual assignment, or the reverse."""

    name = "ILLEGAL_STATE"
    error_code = 40903
    http_status = 409


class ConsumerFormatMismatchError(OdradekError):
    name = "CONSUMER_FORMAT_MISMATCH"
    error_code = 40601
    http_status = 406


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
        if fmt not in (BINARY, JSON):
            raise InvalidRequestError(f"format must be binary or json, not {fmt!r}")
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
    member_id: str | None = None
    generation: int = -1
    last_used: float = field(default_factory=time.monotonic)
    joined: asyncio.Event = field(default_factory=asyncio.Event)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    task: asyncio.Task[None] | None = None
    need_join: asyncio.Event = field(default_factory=asyncio.Event)
    alive_since: float | None = None  # send time of the last join or heartbeat that succeeded

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def session_expired(self) -> bool:
        """The coordinator may have expired this member: stop handing out records of its partitions at once."""
        return (self.member_id is not None and self.alive_since is not None
                and time.monotonic() - self.alive_since > 0.8 * SESSION_TIMEOUT_MS / 1000.0)


class RestInstanceManager:
    """The instances this broker holds, their membership tasks and their expiry."""

    def __init__(self, broker: Broker, *, instance_timeout_ms: int = DEFAULT_INSTANCE_TIMEOUT_MS) -> None:
        self.broker = broker
        self.instance_timeout_s = instance_timeout_ms / 1000.0
        self.instances: dict[tuple[str, str], ConsumerInstance] = {}
        self.located: dict[tuple[str, str], int] = {}  # instances held by other brokers, as last found
        self._reaper: asyncio.Task[None] | None = None

    # -------------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._reaper is None:
            self._reaper = asyncio.create_task(self._reap())

    async def close(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        for inst in list(self.instances.values()):
            await self.delete(inst.group, inst.name)

    async def _reap(self) -> None:
        tick = max(0.05, min(1.0, self.instance_timeout_s / 4))
        while True:
            await asyncio.sleep(tick)
            now = time.monotonic()
            for inst in [i for i in self.instances.values() if now - i.last_used > self.instance_timeout_s]:
                if inst.lock.locked():
                    continue  # a request is using it right now
                log.info("consumer instance %s/%s expired", inst.group, inst.name)
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

    def get(self, group: str, name: str) -> ConsumerInstance:
        inst = self.instances.get((group, name))
        if inst is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        inst.touch()
        return inst

    async def delete(self, group: str, name: str) -> None:
        inst = self.instances.pop((group, name), None)
        if inst is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        await self._stop_membership(inst, commit=inst.config.auto_commit_enable)

    # ---------------------------------------------------------------------------------- subscription

    async def subscribe(self, inst: ConsumerInstance, topics: list[str] | None, pattern: str | None) -> None:
        if inst.mode == "assign":
            raise IllegalStateError("Illegal state: Subscription to topics, partitions and pattern are "
                                    "mutually exclusive.")
        inst.mode = "subscribe"
        inst.topics, inst.pattern = list(topics or []), pattern
        inst.need_join.set()
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
        if inst.task is not None:
            inst.task.cancel()
            inst.task = None
        if inst.member_id is not None:
            if commit:
                try:
                    await self.commit(inst, None)
                except OdradekError as exc:
                    log.info("commit of %s/%s on leaving failed: %s", inst.group, inst.name, exc)
            try:
                await self._group_call("DELETE", inst.group, f"members/{inst.member_id}", timeout_ms=5000)
            except OdradekError as exc:
                log.info("leave of %s/%s failed (its session will expire): %s", inst.group, inst.name, exc)
        inst.member_id, inst.generation = None, -1
        inst.assigned, inst.positions, inst.resets = set(), {}, {}
        inst.joined.clear()

    # ------------------------------------------------------------------------------------ membership

    async def _membership(self, inst: ConsumerInstance) -> None:
        """Joins run as tasks while this loop keeps heartbeating, so a coordinator that freezes during a join is
        noticed within the session (a REBALANCE_IN_PROGRESS answer proves the session alive)."""
        heartbeat_s = SESSION_TIMEOUT_MS / 3000.0
        join: asyncio.Task[None] | None = None
        next_beat = 0.0
        try:
            while True:
                if join is not None and join.done():
                    exc = join.exception()
                    join = None
                    if exc is not None:
                        if isinstance(exc, OdradekError) and exc.name == "UNKNOWN_MEMBER_ID":
                            inst.member_id, inst.alive_since = None, None
                            inst.assigned, inst.positions = set(), {}
                        log.info("join of %s/%s failed: %r", inst.group, inst.name, exc)
                        inst.need_join.set()
                        await asyncio.sleep(0.2)
                if join is None and inst.need_join.is_set():
                    inst.need_join.clear()
                    join = asyncio.create_task(self._join(inst))
                # Wake for the join's answer while one is in flight, else for a request to join.
                waiter: asyncio.Future[Any] = join if join is not None else asyncio.ensure_future(inst.need_join.wait())
                try:
                    await asyncio.wait([waiter], timeout=max(0.0, next_beat - time.monotonic()))
                finally:
                    if waiter is not join:
                        waiter.cancel()
                if time.monotonic() < next_beat:
                    continue
                next_beat = time.monotonic() + heartbeat_s
                if inst.member_id is None:
                    if join is None:
                        inst.need_join.set()
                    continue
                await self._heartbeat(inst, joining=join is not None)
        finally:
            if join is not None:
                join.cancel()  # the instance is going: no join may change it afterwards

    async def _heartbeat(self, inst: ConsumerInstance, *, joining: bool) -> None:
        sent = time.monotonic()
        try:
            answer = await self._group_call("POST", inst.group, f"members/{inst.member_id}/heartbeat",
                                            {"generation": inst.generation}, timeout_ms=SESSION_TIMEOUT_MS // 2)
            inst.alive_since = max(sent, inst.alive_since or 0.0)
            if isinstance(answer, dict) and answer.get("rebalance") and not joining:
                inst.need_join.set()
        except OdradekError as exc:
            if exc.name == "REBALANCE_IN_PROGRESS":
                inst.alive_since = max(sent, inst.alive_since or 0.0)
                if not joining:
                    inst.need_join.set()
            elif joining:
                return  # the join in flight decides
            elif exc.name in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"):
                inst.assigned, inst.positions = set(), {}  # lost: another member may own them now
                if exc.name == "UNKNOWN_MEMBER_ID":
                    inst.member_id, inst.alive_since = None, None
                inst.need_join.set()
            else:
                log.info("heartbeat of %s/%s failed: %s", inst.group, inst.name, exc)

    async def _join(self, inst: ConsumerInstance) -> None:
        body: dict[str, Any] = {
            "client_id": f"rest-proxy-{self.broker.broker_id}-{inst.name}", "assignor": "cooperative-sticky",
            "session_timeout_ms": SESSION_TIMEOUT_MS, "rebalance_timeout_ms": REBALANCE_TIMEOUT_MS,
            "max_poll_interval_ms": int(self.instance_timeout_s * 1000),
            "owned": [[tp.topic, tp.partition] for tp in sorted(inst.assigned)],
        }
        if inst.member_id:
            body["member_id"] = inst.member_id
        if inst.pattern is not None:
            body["pattern"] = inst.pattern
        else:
            body["topics"] = inst.topics
        answer = await self._group_call("POST", inst.group, "members", body, timeout_ms=REBALANCE_TIMEOUT_MS + 10_000)
        assignment = {TopicPartition(str(t), int(p)) for t, p in answer.get("assignment") or ()}
        revoke = {TopicPartition(str(t), int(p)) for t, p in answer.get("revoke") or ()}
        async with inst.lock:
            inst.member_id, inst.generation = str(answer["member_id"]), int(answer["generation"])
            inst.alive_since = time.monotonic()  # the coordinator just answered: its clock for us restarts
            target = assignment - revoke
            gone = {tp for tp in inst.assigned if tp not in target}
            if gone and inst.config.auto_commit_enable:
                try:
                    await self.commit(inst, None, only=gone)
                except OdradekError as exc:
                    log.info("commit before revoking failed for %s/%s: %s", inst.group, inst.name, exc)
            added = target - inst.assigned
            committed = await self._committed(inst.group, {tp.topic for tp in added}) if added else {}
            inst.assigned = set(target)
            inst.positions = {tp: o for tp, o in inst.positions.items() if tp in target}
            for tp in added:
                if tp in committed:
                    inst.positions[tp] = committed[tp][0]
            inst.joined.set()
        if revoke:
            inst.need_join.set()

    # ------------------------------------------------------------------------------------ offsets

    async def commit(self, inst: ConsumerInstance, offsets: dict[TopicPartition, tuple[int, str]] | None,
                     only: set[TopicPartition] | None = None) -> None:
        """Commit ``offsets`` (next offsets to read) or the positions of what was returned so far."""
        if offsets is None:
            offsets = {tp: (o, "") for tp, o in inst.positions.items() if only is None or tp in only}
        if not offsets:
            return
        member, generation = (inst.member_id or "", inst.generation) if inst.mode == "subscribe" else ("", -1)
        await self._group_call("POST", inst.group, "offsets", {
            "member_id": member, "generation": generation,
            "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": o, "metadata": m}
                        for tp, (o, m) in sorted(offsets.items())]})

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
        out: dict[TopicPartition, tuple[int, str]] = {}
        for topic in sorted(topics):
            try:
                body = await self._group_call("GET", group, "offsets", query={"topic": topic})
            except GroupIdNotFoundError:
                return out
            for o in (body or {}).get("offsets") or ():
                if o.get("offset") is not None and int(o["offset"]) >= 0:
                    out[TopicPartition(str(o["topic"]), int(o["partition"]))] = (int(o["offset"]),
                                                                                 str(o.get("metadata") or ""))
        return out

    # ------------------------------------------------------------------------------------ records

    async def read(self, inst: ConsumerInstance, timeout_ms: int, max_bytes: int) -> list[dict[str, Any]]:
        """Records from the instance's partitions, long-polling up to ``timeout_ms``; positions advance past
        what is returned (so an empty commit commits exactly what the client has seen)."""
        deadline = time.monotonic() + timeout_ms / 1000.0
        if inst.mode == "subscribe" and not inst.joined.is_set():
            try:
                await asyncio.wait_for(inst.joined.wait(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return []
        out: list[dict[str, Any]] = []
        min_bytes = max(1, inst.config.fetch_min_bytes)
        size = 0
        while True:
            partitions = sorted(inst.assigned)
            if inst.mode == "subscribe" and inst.session_expired():
                inst.assigned, inst.positions = set(), {}  # the coordinator may have expired us: read nothing
                inst.need_join.set()
                partitions = []
            if not partitions:  # nothing assigned (more members than partitions): wait as a long-poll would
                await asyncio.sleep(max(0.0, deadline - time.monotonic()))
                return out
            for tp in partitions:
                if tp not in inst.positions:
                    try:
                        await self._resolve(inst, tp)
                    except OdradekError as exc:
                        if not exc.retriable:
                            raise
                        log.debug("no position for %s yet: %s", tp, exc)
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            batches = await self._read_some(inst, partitions, remaining_ms, max(1, max_bytes - size))
            for tp, records, next_offset in batches:
                if inst.positions.get(tp) is None or tp not in inst.assigned:
                    continue  # revoked while we read
                for r in records:
                    rendered = record_json(tp.topic, tp.partition, r, inst.config.format)
                    cost = len(r.key or b"") + len(r.value or b"") + 64
                    if out and size + cost > max_bytes:
                        return out
                    out.append(rendered)
                    size += cost
                    inst.positions[tp] = r.offset + 1
                # All of this fetch was handed out: skip past control batches and compaction gaps too.
                inst.positions[tp] = max(inst.positions[tp], next_offset)
            if size >= min_bytes or time.monotonic() >= deadline:
                return out

    async def _read_some(self, inst: ConsumerInstance, partitions: list[TopicPartition], timeout_ms: int,
                         max_bytes: int) -> list[tuple[TopicPartition, list[Any], int]]:
        """Read every partition at once; return when the first brings records (or all came back empty)."""
        tasks = {asyncio.create_task(self._read_partition(inst, tp, inst.positions[tp], max_bytes, timeout_ms)): tp
                 for tp in partitions if tp in inst.positions}
        results: list[tuple[TopicPartition, list[Any], int]] = []
        pending = set(tasks)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    try:
                        results.append(t.result())
                    except OffsetOutOfRangeError as exc:
                        await self._out_of_range(inst, tasks[t], exc)
                    except OdradekError as exc:
                        if not exc.retriable:
                            raise
                        log.debug("read of %s failed: %s", tasks[t], exc)
                if any(recs for _, recs, _ in results):
                    break
        finally:
            for t in pending:
                t.cancel()
        return results

    async def _read_partition(self, inst: ConsumerInstance, tp: TopicPartition, offset: int, max_bytes: int,
                              timeout_ms: int) -> tuple[TopicPartition, list[Any], int]:
        broker = self.broker
        try:
            part = broker.replicas.leader_partition(tp.topic, tp.partition)
            data = (await part.read(offset, max_bytes, timeout_ms)).data
        except NotLeaderOrFollowerError as e:
            leader_url = e.details.get("leader_url")
            if not leader_url or broker.http_session is None:
                raise
            data, _ = await forward.fetch_batches(broker.http_session, leader_url, tp.topic, tp.partition, offset,
                                                  max_bytes, timeout_ms)
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
        await self._resolve(inst, tp)

    async def _resolve(self, inst: ConsumerInstance, tp: TopicPartition) -> None:
        """A position from a pending seek to beginning/end, else the group's committed offset, else
        ``auto.offset.reset``."""
        strategy = inst.resets.pop(tp, None)
        if strategy is None:
            committed = await self._committed(inst.group, {tp.topic})
            if tp in committed:
                inst.positions[tp] = committed[tp][0]
                return
            strategy = inst.config.auto_offset_reset
        if strategy == "none":
            raise OffsetOutOfRangeError(f"{tp} has no committed offset and auto.offset.reset is none",
                                        topic=tp.topic, partition=tp.partition)
        begin, end = await self.bounds(tp)
        inst.positions[tp] = begin if strategy == "earliest" else end

    async def bounds(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, high watermark) from the leader, wherever it is."""
        broker = self.broker
        try:
            part = broker.replicas.leader_partition(tp.topic, tp.partition)
            return part.log_start_offset, part.high_watermark
        except NotLeaderOrFollowerError as e:
            leader_url = e.details.get("leader_url")
            if not leader_url or broker.http_session is None:
                raise
            body = await forward.get_json(broker.http_session,
                                          f"{leader_url}/topics/{tp.topic}/partitions/{tp.partition}/offsets")
            return int(body["beginning_offset"]), int(body["end_offset"])

    # ------------------------------------------------------------------------------------ group API

    async def _group_call(self, method: str, group: str, path: str, payload: Any = None, *,
                          query: dict[str, str] | None = None, timeout_ms: int = 10_000) -> Any:
        """The group API of this broker (it forwards to the group's coordinator), over loopback HTTP."""
        session = self.broker.http_session
        if session is None:
            raise BrokerNotAvailableError("the broker is not serving yet")
        url = f"{self.broker.info().url}/groups/{group}/{path}"
        data = None if payload is None else orjson.dumps(payload)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            async with session.request(method, url, data=data, params=query, headers=headers,
                                       timeout=aiohttp.ClientTimeout(total=timeout_ms / 1000.0)) as resp:
                raw = await resp.read()
                body = orjson.loads(raw) if raw else None
                if resp.status >= 400:
                    if not isinstance(body, dict):
                        body = {"message": raw[:200].decode("utf-8", "replace")}
                    raise error_for(body.get("error"), body.get("error_code"), str(body.get("message") or ""))
                return body
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as e:
            raise BrokerNotAvailableError(f"group API call {method} {path} failed: {e!r}") from None
