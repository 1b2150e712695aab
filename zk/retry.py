"""The one retry policy of zk/: kazoo's KazooRetry bounded by a deadline, and one typed error out.

Why one policy: ZooKeeper reports a dropped connection (``ConnectionLoss``), a slow server
(``OperationTimeoutError``) or an ended session (``SessionExpiredError``) as exceptions that say nothing about
Odradek. A connection loss is transient (kazoo reconnects to another server of the ensemble within the session),
so a call is retried with backoff until its deadline; what is still failing then leaves zk/ as
``CoordinationUnavailableError``, which is retriable and answers HTTP 503, never as a raw kazoo exception (a 500).

Session expiry is not retried: the caller's ephemeral nodes and watches died with the session, so it must learn
of it (the broker re-registers and re-reads everything on the new session) rather than have the call silently
run on a session it never saw.

Why wait for the connection before each attempt: kazoo queues a request made while it is reconnecting and the
synchronous call then blocks until it reconnects, with no deadline at all. Waiting on the connected state
ourselves keeps every call bounded by the deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from kazoo.exceptions import (
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from odradek.protocol.errors import CoordinationUnavailableError

T = TypeVar("T")

# What means "ZooKeeper cannot be reached right now" (ConnectionClosedError is a SessionExpiredError).
UNAVAILABLE: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
    RetryFailedError,
    KazooTimeoutError,
)


class ZkRetry:
    """Runs a function of kazoo calls until it succeeds, under a deadline of ``deadline_s`` per call."""

    def __init__(self, connected: Callable[[], bool], connected_event: threading.Event, deadline_s: float,
                 *, delay_s: float = 0.05, max_delay_s: float = 0.5) -> None:
        self._connected = connected
        self._event = connected_event
        self.deadline_s = deadline_s
        self._delay_s = delay_s
        self._max_delay_s = max_delay_s

    def __call__(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        stop_at = time.monotonic() + self.deadline_s

        def attempt() -> T:
            remaining = stop_at - time.monotonic()
            if not self._connected() and not (self._event.wait(max(0.0, remaining)) and self._connected()):
                raise ConnectionLoss("not connected to ZooKeeper")
            return fn(*args, **kwargs)

        retry = KazooRetry(max_tries=-1, delay=self._delay_s, backoff=2, max_delay=self._max_delay_s,
                           deadline=self.deadline_s, ignore_expire=False)
        try:
            return retry(attempt)
        except UNAVAILABLE as e:
            raise unavailable(e, self.deadline_s) from e

    def remaining(self, started: float) -> float:
        """Seconds left of a deadline that started at ``started`` (for waits on asynchronous results)."""
        return max(0.0, started + self.deadline_s - time.monotonic())


def unavailable(error: BaseException, deadline_s: float | None = None) -> CoordinationUnavailableError:
    """Our typed, retriable error for a kazoo connection error."""
    if isinstance(error, SessionExpiredError):
        reason = "the ZooKeeper session expired"
    elif deadline_s is not None:
        reason = f"ZooKeeper did not answer within {deadline_s:.1f} s ({type(error).__name__})"
    else:
        reason = f"ZooKeeper is unavailable ({type(error).__name__})"
    return CoordinationUnavailableError(reason)
