"""The group protocol of the Python group consumer: the thread driver of the member state machine.

The rules (when to join, heartbeat, give partitions up, leave) are ``odradek.protocol.group_member``'s, shared
with the broker's REST v2 consumer instances; this module only performs them: HTTP over the client's
``Transport`` (``GroupApi``, any broker, failing over), and threads.

Why a background thread: a member must keep heartbeating while the application processes records, and a join
long-polls until the rebalance completes; doing either in ``poll`` would stall consumption of the partitions the
member keeps through a cooperative rebalance. The thread never touches records or positions: it hands join
answers and losses to the consumer (:class:`MembershipListener`), and the application thread applies them in
``poll`` (callbacks run there, as in Kafka's clients), planning with the same ``plan_rebalance`` as the state
machine; the ``Revoke``/``Assign`` actions are therefore not performed here. The one exception is a loss: the
listener drops the partitions at once, so not a single record of them is handed out afterwards.

Concurrency: the state machine is not thread-safe; every call to it holds ``_lock``, and actions are performed
outside it (a listener may call back in). Heartbeats run on the membership thread, each join on a short-lived
thread of its own, so heartbeats go on while a join long-polls. The contract is docs/consumer-groups.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from odradek.client.transport import Transport, quote_path
from odradek.client.types import TopicPartition
from odradek.protocol.errors import (
    IllegalGenerationError,
    OdradekError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from odradek.protocol.group_member import (
    SESSION_MARGIN,
    Action,
    Fencing,
    GroupMember,
    JoinResult,
    Lost,
    RebalancePlan,
    SendHeartbeat,
    SendJoin,
    SendLeave,
    is_commit_fenced,
    plan_rebalance,
)

__all__ = ["SESSION_MARGIN", "GroupApi", "JoinResult", "Membership", "MembershipListener", "RebalancePlan",
           "error_name", "plan_rebalance"]

log = logging.getLogger(__name__)

FAILED_BROKER_BACKOFF_S = 10.0
LEAVE_TIMEOUT_MS = 5000
_IDLE_WAIT_S = 0.25  # the longest the thread sleeps between checks, whatever the state machine's next deadline


def error_name(exc: BaseException) -> str:
    """The stable error name of a rebuilt HTTP error (the class's, or the body's when the class is unknown), for
    messages; decisions go by the error's type."""
    if isinstance(exc, OdradekError):
        detail = exc.details.get("error")
        return str(detail) if isinstance(detail, str) else type(exc).name
    return type(exc).__name__


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
        broker would otherwise hold every join for its whole long-poll timeout). A group's own answer (not
        retriable, or REBALANCE_IN_PROGRESS) is the same from every broker: raised at once."""
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
                if not exc.retriable or isinstance(exc, RebalanceInProgressError):
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
    """One member's join/heartbeat/leave loop on a daemon thread, driving a :class:`GroupMember`.

    ``rejoin()`` asks for a join (subscription change, an assignment that could not start); ``applied()`` tells
    the state machine the application thread applied a join answer, so the next join may carry what it owns.
    """

    def __init__(self, api: GroupApi, listener: MembershipListener, *, client_id: str, assignor: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, max_poll_interval_ms: int,
                 heartbeat_interval_ms: int, retry_backoff_ms: int) -> None:
        self.api = api
        self.listener = listener
        self.core = GroupMember(client_id=client_id, assignor=assignor, session_timeout_ms=session_timeout_ms,
                                rebalance_timeout_ms=rebalance_timeout_ms, max_poll_interval_ms=max_poll_interval_ms,
                                heartbeat_interval_ms=heartbeat_interval_ms, retry_backoff_ms=retry_backoff_ms,
                                now=time.monotonic())
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------- the state machine's settings and state

    @property
    def client_id(self) -> str:
        return self.core.client_id

    @property
    def assignor(self) -> str:
        return self.core.assignor

    @property
    def session_timeout_s(self) -> float:
        return self.core.session_timeout_ms / 1000.0

    @property
    def rebalance_timeout_ms(self) -> int:
        return self.core.rebalance_timeout_ms

    @property
    def max_poll_interval_s(self) -> float:
        return self.core.max_poll_interval_ms / 1000.0

    @property
    def heartbeat_interval_s(self) -> float:
        return self.core.heartbeat_interval_s

    @property
    def topics(self) -> list[str] | None:
        return self.core.topics

    @property
    def pattern(self) -> str | None:
        return self.core.pattern

    @property
    def joins(self) -> int:
        return self.core.joins

    @property
    def generation(self) -> int:
        return self.core.generation

    @property
    def member_id(self) -> str | None:
        return self.core.member_id

    @member_id.setter
    def member_id(self, value: str | None) -> None:  # tests set up a member without a coordinator
        with self._lock:
            self.core.member_id = value

    @property
    def _alive_since(self) -> float | None:
        return self.core.alive_since

    @_alive_since.setter
    def _alive_since(self, value: float | None) -> None:  # tests: a session's age without waiting for it
        with self._lock:
            self.core.alive_since = value

    @property
    def _joining(self) -> bool:
        return self.core.join_in_flight

    @_joining.setter
    def _joining(self, value: bool) -> None:  # tests: a join in flight without a coordinator
        with self._lock:
            self.core.join_in_flight = value

    @property
    def last_poll(self) -> float:
        return self.core.last_poll

    @last_poll.setter
    def last_poll(self, now: float) -> None:
        """The application polled (it sets this on every poll): a member that left on the poll interval joins
        again."""
        with self._lock:
            resumed = self.core.waiting_for_poll
            self.core.polled(now)
        if resumed:
            self._wake.set()

    # ----------------------------------------------------------------------------------- application side

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        with self._lock:
            self.core.subscribe(topics, pattern)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"odradek-group-{self.api.group_id}", daemon=True)
            self._thread.start()
        self._wake.set()

    def rejoin(self) -> None:
        with self._lock:
            self.core.rejoin()
        self._wake.set()

    def applied(self, rejoin: bool) -> None:
        """The application thread applied a join answer (and gave up what it was told to revoke); ``rejoin``:
        it wants another join (the state machine asks for one itself after a revocation)."""
        owned = self.listener.owned_partitions()
        with self._lock:
            self.core.applied(owned)
            if rejoin:
                self.core.rejoin()
        self._wake.set()

    def session_expired(self, now: float | None = None) -> bool:
        """True when the coordinator may already have expired us: stop consuming at once."""
        with self._lock:
            return self.core.session_expired(now if now is not None else time.monotonic())

    def lose_if_expired(self) -> bool:
        """From the application thread: if the session may have expired, give everything up now (on_lost) and
        join again as a new member, without waiting for the membership thread (which may be stuck in a request)."""
        with self._lock:
            actions = self.core.expire(time.monotonic())
        if not actions:
            return False
        self._perform(actions)
        self._wake.set()
        return True

    def fencing(self) -> tuple[str | None, int]:
        with self._lock:
            return self.core.member_id, self.core.generation

    def commit_failed(self, exc: BaseException, member_id: str | None, generation: int) -> bool:
        """A commit sent with (``member_id``, ``generation``) failed: let the state machine react (a fenced
        commit of the current generation is a loss), and say whether the group refused it (fenced)."""
        fencing = Fencing(member_id, generation) if member_id is not None else None
        with self._lock:
            actions = self.core.commit_failed(exc, fencing, time.monotonic())
        self._perform(actions)
        if actions:
            self._wake.set()
        return is_commit_fenced(exc)

    def close(self, leave: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        with self._lock:
            actions = self.core.close()
        if leave:
            self._perform(actions)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    # ---------------------------------------------------------------------------------------- the thread

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                actions = self.core.tick(time.monotonic())
            self._perform(actions)
            with self._lock:
                deadline = self.core.next_deadline()
            wait = _IDLE_WAIT_S if deadline is None else min(max(0.0, deadline - time.monotonic()), _IDLE_WAIT_S)
            self._wake.wait(wait)
            self._wake.clear()

    def _perform(self, actions: Iterable[Action]) -> None:
        for action in actions:
            if isinstance(action, SendJoin):
                threading.Thread(target=self._join, args=(action,), name=f"odradek-join-{self.api.group_id}",
                                 daemon=True).start()
            elif isinstance(action, SendHeartbeat):
                self._heartbeat(action)
            elif isinstance(action, SendLeave):
                self._leave(action)
            elif isinstance(action, Lost):
                self.listener.on_lost(action.reason)
            # Revoke/Assign: the application thread applies the join answer itself (on_join), see the module doc.

    def _join(self, send: SendJoin) -> None:
        try:
            answer = self.api.call("POST", "members", payload=send.spec.to_json(),
                                   timeout_ms=send.spec.rebalance_timeout_ms + self.api.request_timeout_ms)
            result = JoinResult.parse(answer)
        except Exception as exc:  # whatever it was, the state machine must hear the join is over
            if not isinstance(exc, UnknownMemberIdError):
                log.info("group %s: join failed (%r); retrying", self.api.group_id, exc)
            with self._lock:
                actions = self.core.join_failed(exc, time.monotonic())
            self._perform(actions)
            self._wake.set()
            return
        with self._lock:
            actions = self.core.join_succeeded(result, time.monotonic())
        self.listener.on_join(result)
        self._perform(actions)
        self._wake.set()

    def _heartbeat(self, send: SendHeartbeat) -> None:
        try:
            answer = self.api.call("POST", "members", send.member_id, "heartbeat",
                                   payload={"generation": send.generation},
                                   timeout_ms=max(100, self.core.session_timeout_ms // 2))
        except Exception as exc:  # whatever it was, the state machine must hear the beat is over
            if not isinstance(exc, UnknownMemberIdError | IllegalGenerationError | RebalanceInProgressError):
                log.info("group %s: heartbeat failed: %s", self.api.group_id, exc)
            with self._lock:
                actions = self.core.heartbeat_failed(exc, time.monotonic())
        else:
            rebalance = isinstance(answer, dict) and bool(answer.get("rebalance"))
            with self._lock:
                actions = self.core.heartbeat_succeeded(time.monotonic(), rebalance=rebalance)
        self._perform(actions)

    def _leave(self, send: SendLeave) -> None:
        if send.reason != "closed":
            log.warning("group %s: leaving the group: %s", self.api.group_id, send.reason)
        try:
            self.api.call("DELETE", "members", send.member_id,
                          timeout_ms=min(self.api.request_timeout_ms, LEAVE_TIMEOUT_MS))
        except OdradekError as exc:
            log.info("group %s: leaving (%s) failed (the session will expire): %s", self.api.group_id, send.reason,
                     exc)
