"""Forwarded reads, coalesced: identical reads waiting here for another broker's partition share one upstream read.

Why: a REST read sent to a broker that does not lead the partition is forwarded to the leader
(:meth:`FetchService.fetch_anywhere <broker.fetch.service.FetchService.fetch_anywhere>`). A long-poll parks there
until records come or its timeout passes, and a forwarded one held one of the inter-broker client's forward
connections (``--inter-broker-max-connections``, broker/interbroker.py) for all that time. A thousand long-polls
at the log end took the hundred connections and queued the rest, and the forwarded produce that would have woken
them queued behind them too: most reads answered empty at their timeout, the rest long after it (issue 24). Sent
to the leader, the same thousand reads park on one event and all wake with the record. Here they park on one
upstream read instead: a thousand waiters cost one forward connection per distinct read, not a thousand.

What is shared: a *flight* is one upstream read of a :class:`ReadKey` (leader URL, topic, partition, offset,
max_bytes, isolation: everything the leader's answer depends on) with a long-poll of ``poll_ms``. The
embedded format (JSON, binary, ...) is not in the key: the answer is record batches as bytes, and every waiter
renders them itself. Two reads that differ in offset, max_bytes or isolation never share a flight, so each gets
exactly what it asked for.

Invariants:

* **a waiter's own deadline**: a waiter joins only a flight that ends (its long-poll's end) by its own deadline
  plus ``grace_s``, else it starts one that ends at its deadline; so each waiter is answered within its own
  timeout plus ``grace_s`` (plus the leader's answer time). A read with no wait (``poll_ms`` 0) joins only a
  flight that ends now.
* **one answer for all**: a flight's answer (immutable bytes and offsets) goes to every waiter of it; an upstream
  error too, each waiter raising its own copy (one exception object raised in a thousand tasks would collect all
  their tracebacks). An answer with records ends every waiter's read; an empty one (the leader's long-poll timed
  out) ends those whose deadline is within ``grace_s``, and the others poll again, joining one new flight.
* **leaving is private**: a waiter that is cancelled (its client went away) leaves without cancelling the flight
  (``asyncio.shield``); a flight nobody waits for any more is cancelled, which frees its connection.
* **bounded**: at most ``max_flights`` long-poll flights at once over all keys, so forwarded long-polls never take
  more than that many forward connections, and forwarded produces and calls always find one (the produce that
  would wake the waiting reads, first of all). A long-poll of a key with no flight it may join, when there is no
  room for one more, waits here without a connection until a flight ends (then it may start one) or one of its
  own key starts (then it joins), at most until its deadline, where it reads once without waiting (reads without
  a wait are not counted: they hold a connection for one read). So beyond ``max_flights`` distinct reads waiting
  at once, records may reach a waiter late, but by its deadline. Nothing is refused: a refusal would make the
  REST consumer instances (broker/rest_consumers.py, which read every assigned partition until records come or
  the deadline passes) spin on it. A flight is forgotten when it ends: the table holds only flights under way,
  each answer is held only by its waiters, and a waiter holds nothing but its place in one flight.

Concurrency: one instance per broker, used from its event loop only; every decision (which flight to join,
whether to start one) is made without awaiting, so it sees one consistent table.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from broker.produce.forwarding import RemoteBatches

__all__ = ["DEFAULT_MAX_FLIGHTS", "GRACE_S", "ForwardedReads", "ReadKey", "Upstream"]

GRACE_S = 0.25  # how much later than its own deadline a waiter may be answered, to share a flight
DEFAULT_MAX_FLIGHTS = 50  # half of the inter-broker client's default forward connections (100)


@dataclass(frozen=True, slots=True)
class ReadKey:
    """Everything a leader's answer to a forwarded read depends on, but its long-poll's length."""

    leader_url: str
    topic: str
    partition: int
    offset: int | None  # None: the leader's log start offset
    max_bytes: int
    committed: bool  # read_committed


Upstream = Callable[[ReadKey, int], Awaitable[RemoteBatches]]  # one read of the leader, long-polling poll_ms


@dataclass(slots=True)
class _Outcome:
    answer: RemoteBatches | None = None
    error: Exception | None = None


@dataclass(eq=False, slots=True)
class _Flight:
    key: ReadKey
    end: float  # loop time at which the leader's long-poll ends
    long: bool  # counted against max_flights
    task: asyncio.Task[_Outcome] = field(init=False)
    waiters: int = 0


class ForwardedReads:
    def __init__(self, upstream: Upstream, *, max_flights: int = DEFAULT_MAX_FLIGHTS,
                 grace_s: float = GRACE_S) -> None:
        self._upstream = upstream
        self.max_flights = max_flights
        self._grace_s = grace_s
        self._flights: dict[ReadKey, list[_Flight]] = {}
        self._long_flights = 0
        self._queued = 0  # long-polls waiting for room
        self._changed = asyncio.Event()  # set (and replaced) when a flight starts or ends while some wait for room
        self.started = 0  # flights started (upstream reads), for tests and metrics

    @property
    def long_flights(self) -> int:
        return self._long_flights

    @property
    def queued(self) -> int:
        return self._queued

    def flights(self, key: ReadKey | None = None) -> int:
        """Flights under way (for ``key``, or in all)."""
        if key is not None:
            return len(self._flights.get(key, ()))
        return sum(len(f) for f in self._flights.values())

    async def read(self, key: ReadKey, poll_ms: int) -> RemoteBatches:
        """The leader's answer to ``key``, long-polling up to ``poll_ms`` (shared with identical reads): the first
        answer with records, or an empty one at the deadline (within ``grace_s``).

        Raises:
            the upstream's error (a copy of it), as every waiter of the flight does.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(poll_ms, 0) / 1000
        grace = self._grace_s if poll_ms > 0 else 0.0
        last: RemoteBatches | None = None
        while True:
            if last is not None and deadline - loop.time() <= grace:
                return last  # answered empty, and (nearly) at the deadline
            flight = self._join(key, deadline, grace, loop.time())
            if flight is None:
                await self._wait_for_room(deadline)
                continue
            flight.waiters += 1
            try:
                outcome = await asyncio.shield(flight.task)
            finally:
                flight.waiters -= 1
                if flight.waiters == 0 and not flight.task.done():
                    flight.task.cancel()  # nobody waits for it any more: free its connection
                    self._forget(flight)
            if outcome.error is not None:
                raise _own_copy(outcome.error) from None
            assert outcome.answer is not None
            last = outcome.answer
            if last.data:
                return last

    def _join(self, key: ReadKey, deadline: float, grace: float, now: float) -> _Flight | None:
        """The flight under way for ``key`` that ends latest by ``deadline + grace``, or a new one to
        ``deadline``; None when that would be one long-poll more than ``max_flights``."""
        best: _Flight | None = None
        for flight in self._flights.get(key, ()):
            if not flight.task.done() and flight.end <= deadline + grace and (best is None or flight.end > best.end):
                best = flight
        if best is not None:
            return best
        poll_ms = max(0, round((deadline - now) * 1000))
        long = poll_ms > 0
        if long and self._long_flights >= self.max_flights:
            return None
        flight = _Flight(key, now + poll_ms / 1000, long)
        flight.task = asyncio.create_task(self._fly(key, poll_ms),
                                          name=f"forwarded-read {key.topic}-{key.partition}@{key.offset}")
        flight.task.add_done_callback(lambda _t, f=flight: self._forget(f))
        self._flights.setdefault(key, []).append(flight)
        self._long_flights += long
        self.started += 1
        self._signal()  # a waiter for room may join it
        return flight

    async def _wait_for_room(self, deadline: float) -> None:
        """Until a flight starts or ends (or ``deadline``), holding no connection."""
        changed = self._changed
        self._queued += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), max(0.0, deadline - asyncio.get_running_loop().time()))
        finally:
            self._queued -= 1

    def _signal(self) -> None:
        if self._queued:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _fly(self, key: ReadKey, poll_ms: int) -> _Outcome:
        try:
            return _Outcome(answer=await self._upstream(key, poll_ms))
        except Exception as e:  # every waiter raises it (a copy each); the task itself never fails
            return _Outcome(error=e)

    def _forget(self, flight: _Flight) -> None:
        flights = self._flights.get(flight.key)
        if flights is None or flight not in flights:
            return  # already forgotten (cancelled, then done)
        flights.remove(flight)
        if not flights:
            del self._flights[flight.key]
        self._long_flights -= flight.long
        self._signal()  # room for a waiting long-poll


def _own_copy(error: Exception) -> Exception:
    """A copy of a shared error (its class, message and details), with a traceback of its own."""
    try:
        return copy.copy(error)
    except Exception:  # an exception class that cannot be rebuilt from its args: share it
        return error
