"""The group protocol of the Python group consumer: joins, heartbeats and leaves over the brokers' group API.

Why a background thread: a member must keep heartbeating while the application processes records, and a join
long-polls until the rebalance completes; doing either in ``poll`` would stall consumption of the partitions the
member keeps through a cooperative rebalance. The thread never touches records or positions: it reports join
answers and lost partitions to the consumer (:class:`MembershipListener`), and the application thread applies
them in ``poll`` (callbacks run there, as in Kafka's clients). The one exception is losing the session: then the
thread drops the partitions itself, at once, so not a single record of them is handed out afterwards.

Liveness, seen from here: the coordinator expires a member ``session_timeout_ms`` after the last heartbeat it
received, so the member counts its own deadline from when it *sent* the last heartbeat that succeeded, and stops
at 0.8 of the session, ahead of the coordinator. A join in flight counts as alive (the coordinator holds it).
The contract is docs/consumer-groups.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.client.transport import Transport, quote_path
from odradek.client.types import TopicPartition
from odradek.protocol.errors import OdradekError

__all__ = ["JoinResult", "Membership", "MembershipListener", "error_name", "plan_rebalance"]

log = logging.getLogger(__name__)

# Error names of the group API (docs/consumer-groups.md).
UNKNOWN_MEMBER_ID = "UNKNOWN_MEMBER_ID"
ILLEGAL_GENERATION = "ILLEGAL_GENERATION"
REBALANCE_IN_PROGRESS = "REBALANCE_IN_PROGRESS"
FENCED_ERRORS = frozenset({UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION})
# A member stops consuming after this share of its session without a good heartbeat (counted from the send):
# before the coordinator can have expired it, whatever the coordinator's expiry-check granularity.
SESSION_MARGIN = 0.8
FAILED_BROKER_BACKOFF_S = 10.0


def error_name(exc: BaseException) -> str:
    """The stable error name of a rebuilt HTTP error (the class's, or the body's when the class is unknown)."""
    if isinstance(exc, OdradekError):
        detail = exc.details.get("error")
        return str(detail) if isinstance(detail, str) else type(exc).name
    return type(exc).__name__


@dataclass(frozen=True)
class JoinResult:
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
    """What the consumer does with a join answer, given what it owns now."""

    keep: frozenset[TopicPartition]
    added: frozenset[TopicPartition]
    revoked: frozenset[TopicPartition] = field(default=frozenset())
    # The answer named partitions to revoke: give them up, then join again so they can move on (cooperative).
    must_rejoin: bool = False


def plan_rebalance(owned: set[TopicPartition] | frozenset[TopicPartition], result: JoinResult) -> RebalancePlan:
    """Split a join answer into kept, added and revoked partitions.

    Anything owned that the answer does not assign is revoked too (an eager assignor answers with the new
    assignment only); a partition named in ``revoke`` is never consumed, even if also listed as assigned.
    """
    target = result.assignment - result.revoke
    revoked = frozenset(tp for tp in owned if tp in result.revoke or tp not in target)
    keep = frozenset(tp for tp in owned if tp not in revoked)
    added = frozenset(tp for tp in target if tp not in owned)
    return RebalancePlan(keep, added, revoked, bool(result.revoke))


class MembershipListener(Protocol):
    def owned_partitions(self) -> set[TopicPartition]: ...

    def on_join(self, result: JoinResult) -> None: ...

    def on_lost(self, reason: str) -> None: ...


class GroupApi:
    """The group API over HTTP, to any broker (a non-coordinator forwards); fails over between brokers."""

    def __init__(self, transport: Transport, group_id: str, urls: Callable[[], Sequence[str]],
                 request_timeout_ms: int) -> None:
        self.transport = transport
        self.group_id = group_id
        self._urls = urls
        self._preferred: str | None = None
        self._failed: dict[str, float] = {}  # url -> until when it goes last
        self.request_timeout_ms = request_timeout_ms

    def call(self, method: str, *segments: str, payload: Any = None, query: dict[str, Any] | None = None,
             timeout_ms: float | None = None) -> Any:
        """One group request: the broker that answered last first, brokers that failed lately last (a frozen
        broker would otherwise hold every join for its whole long-poll timeout)."""
        now = time.monotonic()
        urls = list(self._urls())
        if self._preferred in urls:
            urls.remove(self._preferred)
            urls.insert(0, self._preferred)
        urls.sort(key=lambda u: self._failed.get(u, 0.0) > now)  # stable: keeps the order otherwise
        path = quote_path("groups", self.group_id, *segments)
        last: OdradekError | None = None
        for url in urls:
            try:
                if payload is None:
                    resp = self.transport.request(url, method, path, query=query, timeout_ms=timeout_ms)
                    body = resp.json()
                else:
                    body = self.transport.send_json(url, method, path, payload, query=query, timeout_ms=timeout_ms)
                self._preferred = url
                return body
            except OdradekError as exc:
                if not exc.retriable or error_name(exc) == REBALANCE_IN_PROGRESS:
                    raise
                last = exc
                self._failed[url] = time.monotonic() + FAILED_BROKER_BACKOFF_S
                if self._preferred == url:
                    self._preferred = None
        raise last or OdradekError("no broker to send the group request to")

    def committed(self, topics: set[str]) -> dict[TopicPartition, tuple[int, str]]:
        out: dict[TopicPartition, tuple[int, str]] = {}
        for topic in sorted(topics):
            body = self.call("GET", "offsets", query={"topic": topic}) or {}
            for o in body.get("offsets") or ():
                offset = o.get("offset")
                if offset is not None and int(offset) >= 0:
                    out[TopicPartition(str(o["topic"]), int(o["partition"]))] = (int(offset),
                                                                                 str(o.get("metadata") or ""))
        return out


class Membership:
    """One member's join/heartbeat/leave loop on a daemon thread.

    ``rejoin()`` asks for a join (subscription change, after revoking); ``revoke_done()`` lets a cooperative
    member join again once the application thread has given up what it was told to.
    """

    def __init__(self, api: GroupApi, listener: MembershipListener, *, client_id: str, assignor: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, max_poll_interval_ms: int,
                 heartbeat_interval_ms: int, retry_backoff_ms: int) -> None:
        self.api = api
        self.listener = listener
        self.client_id = client_id
        self.assignor = assignor
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.max_poll_interval_s = max_poll_interval_ms / 1000.0
        self.heartbeat_interval_s = min(heartbeat_interval_ms, session_timeout_ms // 3) / 1000.0
        self.backoff_s = retry_backoff_ms / 1000.0
        self.member_id: str | None = None
        self.generation = -1
        self.topics: list[str] | None = None
        self.pattern: str | None = None
        self.last_poll = time.monotonic()
        self.joins = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._need_join = False
        self._awaiting_apply = False
        self._joining = False
        self._alive_since: float | None = None  # send time of the last heartbeat or join that succeeded
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------------------------- application side

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        with self._lock:
            self.topics, self.pattern = topics, pattern
            self._need_join = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"odradek-group-{self.api.group_id}", daemon=True)
            self._thread.start()
        self._wake.set()

    def rejoin(self) -> None:
        with self._lock:
            self._need_join = True
        self._wake.set()

    def applied(self, rejoin: bool) -> None:
        """The application thread applied a join answer (and gave up what it was told to revoke)."""
        with self._lock:
            self._awaiting_apply = False
            if rejoin:
                self._need_join = True
        self._wake.set()

    def session_expired(self, now: float | None = None) -> bool:
        """True when the coordinator may already have expired us: stop consuming at once."""
        with self._lock:
            if self.member_id is None or self._alive_since is None:
                return False
            elapsed = (now if now is not None else time.monotonic()) - self._alive_since
            return elapsed > self.session_timeout_s * SESSION_MARGIN

    def lose_if_expired(self) -> bool:
        """From the application thread: if the session may have expired, give everything up now (on_lost) and
        join again as a new member, without waiting for this thread (which may be stuck in a request)."""
        with self._lock:
            member = self.member_id
        if member is None or not self.session_expired():
            return False
        with self._lock:
            if self.member_id != member:
                return False  # this thread got there first
        self._lose("session timed out", forget=True)
        self._wake.set()
        return True

    def fencing(self) -> tuple[str | None, int]:
        with self._lock:
            return self.member_id, self.generation

    def close(self, leave: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        member = self.member_id
        if leave and member is not None:
            try:
                self.api.call("DELETE", "members", member, timeout_ms=min(self.api.request_timeout_ms, 5000))
            except OdradekError as exc:
                log.info("leaving group %s failed (the session will expire): %s", self.api.group_id, exc)
        with self._lock:
            self.member_id = None
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    # ---------------------------------------------------------------------------------------- the thread

    def _run(self) -> None:
        """Heartbeats on this thread; each join on a short-lived thread of its own, so heartbeats go on while a
        join long-polls (answers REBALANCE_IN_PROGRESS keep the session, and a frozen coordinator is noticed
        within the session even in the middle of a join)."""
        next_heartbeat = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                join = self._need_join and not self._awaiting_apply and not self._joining
                member = self.member_id
            if member is not None and now - self.last_poll > self.max_poll_interval_s:
                log.warning("group %s: poll() not called for %.1f s (max_poll_interval_ms); leaving the group",
                            self.api.group_id, now - self.last_poll)
                self._leave_and_lose("max_poll_interval_ms exceeded")
                self._wait_for_poll()
                continue
            if self.session_expired(now):
                self._lose("session timed out", forget=True)
                join = not self._joining
            if join:
                with self._lock:
                    self._need_join = False
                    self._joining = True
                threading.Thread(target=self._join, name=f"odradek-join-{self.api.group_id}", daemon=True).start()
            if member is not None and now >= next_heartbeat:
                self._heartbeat(member)
                next_heartbeat = time.monotonic() + self.heartbeat_interval_s
            self._wake.wait(max(0.0, min(next_heartbeat - time.monotonic(), 0.25)) if member else 0.25)
            self._wake.clear()

    def _wait_for_poll(self) -> None:
        started = self.last_poll
        while not self._stop.is_set() and self.last_poll == started:
            self._wake.wait(0.1)
            self._wake.clear()
        self.rejoin()

    def _join(self) -> None:
        with self._lock:
            body: dict[str, Any] = {
                "client_id": self.client_id, "assignor": self.assignor,
                "session_timeout_ms": int(self.session_timeout_s * 1000),
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "max_poll_interval_ms": int(self.max_poll_interval_s * 1000),
                "owned": [[tp.topic, tp.partition] for tp in sorted(self.listener.owned_partitions())],
            }
            if self.member_id is not None:
                body["member_id"] = self.member_id
            if self.pattern is not None:
                body["pattern"] = self.pattern
            else:
                body["topics"] = list(self.topics or [])
        try:
            answer = self.api.call("POST", "members", payload=body,
                                   timeout_ms=self.rebalance_timeout_ms + self.api.request_timeout_ms)
            result = JoinResult.parse(answer)
        except (OdradekError, KeyError, TypeError, ValueError) as exc:
            if error_name(exc) == UNKNOWN_MEMBER_ID:
                self._lose("the coordinator does not know this member", forget=True)
            else:
                log.info("group %s: join failed (%r); retrying", self.api.group_id, exc)
                self._stop.wait(self.backoff_s)  # before another join may start
            with self._lock:
                self._joining = False
                self._need_join = True
            self._wake.set()
            return
        with self._lock:
            self.member_id, self.generation = result.member_id, result.generation
            # The coordinator has just answered (a join long-polls, possibly longer than the session): its
            # session clock for us restarts about now, not when we sent the join.
            self._alive_since = time.monotonic()
            self._joining = False
            # No other join until the application thread has applied this answer: a join sends what the member
            # owns, and until then that is stale.
            self._awaiting_apply = True
            self.joins += 1
        self.listener.on_join(result)

    def _heartbeat(self, member: str) -> None:
        sent = time.monotonic()
        with self._lock:
            joining, generation = self._joining, self.generation
        try:
            answer = self.api.call("POST", "members", member, "heartbeat", payload={"generation": generation},
                                   timeout_ms=max(100, int(self.session_timeout_s * 500)))
        except OdradekError as exc:
            name = error_name(exc)
            if joining:  # the join in flight decides; a rebalance answer still proves the session alive
                if name == REBALANCE_IN_PROGRESS:
                    with self._lock:
                        self._alive_since = max(sent, self._alive_since or 0.0)
                return
            if name in FENCED_ERRORS:
                self._lose(f"heartbeat answered {name}", forget=name == UNKNOWN_MEMBER_ID)
                self.rejoin()
            elif name == REBALANCE_IN_PROGRESS:
                with self._lock:
                    self._alive_since = sent
                self.rejoin()
            else:
                log.info("group %s: heartbeat failed: %s", self.api.group_id, exc)
            return
        with self._lock:
            self._alive_since = max(sent, self._alive_since or 0.0)
        if isinstance(answer, dict) and answer.get("rebalance") and not joining:
            self.rejoin()

    def _lose(self, reason: str, *, forget: bool) -> None:
        """Our partitions may belong to someone else now: drop them without committing."""
        with self._lock:
            if forget:
                self.member_id = None
            self.generation = -1
            self._alive_since = None
            self._awaiting_apply = False
            self._need_join = True
        self.listener.on_lost(reason)

    def _leave_and_lose(self, reason: str) -> None:
        member = self.member_id
        if member is not None:
            try:
                self.api.call("DELETE", "members", member, timeout_ms=5000)
            except OdradekError as exc:
                log.info("group %s: leave failed: %s", self.api.group_id, exc)
        self._lose(reason, forget=True)
