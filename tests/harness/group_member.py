"""A minimal group member over the HTTP group API, for tests and benches (no client library in between).

It follows the member's side of docs/consumer-groups.md: join (long-poll), heartbeat, rejoin on
REBALANCE_IN_PROGRESS, drop what it was told to revoke before joining again, and stop believing it owns anything
once it has gone a session timeout (less a margin) without a successful heartbeat. ``owned`` is what it would be
consuming now, which a checker compares across members: no partition may be owned by two members at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.harness.http import request
from tests.harness.wait import SLOW_MACHINE_S

TP = tuple[str, int]

# A member that is not meant to expire must survive a loaded machine: a heartbeat or a rejoin late by seconds
# (its thread starved of CPU, a busy broker) must neither expire it at the coordinator nor make it give up its
# partitions itself. A test that wants a member to expire passes its own, shorter session.
SESSION_TIMEOUT_MS = 10_000
REBALANCE_TIMEOUT_MS = 30_000
# A slow heartbeat answer is waited for rather than given up on and retried elsewhere, by a member that owns
# nothing up to this; one that owns partitions waits no longer than its session allows (see _run), so that it stops
# consuming before the coordinator can hand its partitions to another member.
HEARTBEAT_CALL_TIMEOUT_S = SLOW_MACHINE_S / 4


class GroupMember:
    def __init__(self, urls: list[str], group: str, topics: list[str], *, assignor: str = "range",
                 session_timeout_ms: int = SESSION_TIMEOUT_MS, rebalance_timeout_ms: int = REBALANCE_TIMEOUT_MS,
                 heartbeat_s: float = 0.25,
                 client_id: str = "test", cooperative: bool | None = None, revoke_delay_s: float = 0.3) -> None:
        self.urls = urls
        self.group = group
        self.topics = topics
        self.assignor = assignor
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_s = heartbeat_s
        self.revoke_delay_s = revoke_delay_s
        self.client_id = client_id
        self.cooperative = assignor == "cooperative-sticky" if cooperative is None else cooperative
        self.member_id: str | None = None
        self.generation = -1
        self.owned: set[TP] = set()
        self.lock = threading.Lock()
        self.joins = 0
        self.lost: list[tuple[float, set[TP]]] = []  # (when, partitions) it gave up, for "never paused" checks
        self._url_index = 0
        self._stop = threading.Event()
        self._crashed = False
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"member-{client_id}")
        self.errors: list[str] = []

    # -------------------------------------------------------------------------------------------- control

    def start(self) -> GroupMember:
        self._thread.start()
        return self

    def leave(self) -> None:
        """Close: stop consuming, then leave at once."""
        self._stop.set()
        self._thread.join(SLOW_MACHINE_S)
        self._set_owned(set())
        if self.member_id:
            self._call("DELETE", f"/groups/{self.group}/members/{self.member_id}")

    def crash(self) -> None:
        """As SIGKILL would: no leave; a dead process consumes nothing."""
        self._crashed = True
        self._stop.set()
        self._set_owned(set())
        self._thread.join(SLOW_MACHINE_S)

    def snapshot(self) -> set[TP]:
        with self.lock:
            return set(self.owned)

    # ---------------------------------------------------------------------------------------------- loop

    def _set_owned(self, owned: set[TP]) -> None:
        with self.lock:
            gone = self.owned - owned
            if gone:
                self.lost.append((time.monotonic(), gone))
            self.owned = set() if self._crashed else set(owned)

    def _call(self, method: str, path: str, body: Any = None, timeout: float = 10.0,
              deadline: float | None = None) -> tuple[int, Any]:
        """The request through the brokers in turn (retrying on another where one is down or busy), each attempt
        within ``timeout`` s, and none past ``deadline`` (monotonic) when given."""
        for _ in range(len(self.urls) * 3):
            url = self.urls[self._url_index % len(self.urls)]
            left = timeout if deadline is None else min(timeout, deadline - time.monotonic())
            if left <= 0:
                break
            try:
                status, reply, _ = request(method, url + path, body, timeout=left)
            except OSError:
                self._url_index += 1
                time.sleep(0.05)
                continue
            if status == 503 or (status >= 500 and isinstance(reply, dict) and reply.get("retriable")):
                self._url_index += 1
                time.sleep(0.1)
                continue
            return status, reply
        return 503, {"error": "NO_BROKER"}

    def _join(self) -> bool:
        if not self.cooperative:
            self._set_owned(set())  # eager: revoke everything before joining
        body = {"member_id": self.member_id, "client_id": self.client_id, "topics": self.topics,
                "assignor": self.assignor, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "owned": sorted(self.snapshot())}
        status, reply = self._call("POST", f"/groups/{self.group}/members", body,
                                   timeout=self.rebalance_timeout_ms / 1000 + 15)
        if self._stop.is_set():
            return False
        if status != 200:
            self.errors.append(f"join {status} {reply}")
            if isinstance(reply, dict) and reply.get("error") == "UNKNOWN_MEMBER_ID":
                self.member_id = None
                self._set_owned(set())
            time.sleep(0.1)
            return False
        self.joins += 1
        self.member_id, self.generation = reply["member_id"], reply["generation"]
        # What it may consume now, plus what it must revoke: stopping that takes a while (finish the batch,
        # commit), modelled by ``revoke_delay_s``; then it says so by joining again.
        assigned = {(t, p) for t, p in reply["assignment"]}
        revoked = {(t, p) for t, p in reply["revoke"]}
        self._set_owned(assigned | (self.snapshot() & revoked))
        self._last_ok = time.monotonic()
        if revoked:
            self._stop.wait(self.revoke_delay_s)
            self._set_owned(assigned)
        return not revoked

    def _run(self) -> None:
        need_join = True
        self._last_ok = time.monotonic()
        while not self._stop.is_set():
            if need_join:
                need_join = not self._join()
                continue
            sent = time.monotonic()
            # Owning partitions, the heartbeat may take only until the member must give them up (checked below).
            gives_up_at = self._last_ok + self.session_timeout_ms / 1000 * 0.8 if self.snapshot() else None
            status, reply = self._call("POST", f"/groups/{self.group}/members/{self.member_id}/heartbeat",
                                       {"generation": self.generation}, timeout=HEARTBEAT_CALL_TIMEOUT_S,
                                       deadline=gives_up_at)
            if status == 200:
                self._last_ok = sent
                need_join = bool(reply.get("rebalance"))
            elif isinstance(reply, dict) and reply.get("error") in ("REBALANCE_IN_PROGRESS", "ILLEGAL_GENERATION"):
                need_join = True
            elif isinstance(reply, dict) and reply.get("error") == "UNKNOWN_MEMBER_ID":
                self._set_owned(set())
                self.member_id = None
                need_join = True
            if time.monotonic() - self._last_ok > self.session_timeout_ms / 1000 * 0.8:
                self._set_owned(set())  # missed its session: stop consuming at once
            self._stop.wait(self.heartbeat_s)
