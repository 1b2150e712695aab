"""Waiting in tests: on a condition, with a deadline, never for a fixed time.

A fixed sleep is either too short on a loaded machine (the test flakes) or too long everywhere else (the suite
crawls), and it hides what the test is actually waiting for. These helpers poll a predicate until it holds and
fail with the name of the awaited condition (and the last exception the predicate raised) when the deadline
passes, so a timeout says what did not happen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

SLOW_MACHINE_S = 60.0
"""The deadline for something a healthy run does in a second or two (a ZooKeeper watch firing, a session expiring,
an election, a rebalance, a broker or JVM starting): generous enough for a loaded 2-core machine where ZooKeeper,
brokers and Spark share the CPUs with other tests, short enough that a real hang still fails the test within a
minute. Use it (or a multiple of it) instead of a small literal wherever a test waits for the system; never where
the deadline itself is the property under test (there, name the bound and say what it excludes)."""


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy and return that; fail with ``what`` after ``timeout`` s.

    Exceptions from the predicate count as "not yet" (a connection refused while a broker restarts) and the
    last one is named in the failure.
    """
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except Exception as e:
            last_error = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what} (last error: {last_error})")
        time.sleep(interval)


async def wait_until_async(
    predicate: Callable[[], Awaitable[T]], timeout: float, what: str, interval: float = 0.05
) -> T:
    """:func:`wait_until` for coroutines: awaits ``predicate()`` until it is truthy, within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = await predicate()
            if value:
                return value
        except Exception as e:
            last_error = e
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what} (last error: {last_error})")
        await asyncio.sleep(interval)


def hold_for(predicate: Callable[[], object], duration: float, what: str, interval: float = 0.05) -> None:
    """Assert that ``predicate`` stays truthy for ``duration`` s, checked every ``interval``: for properties of the
    form "X does not happen", which no single look can show. Fails at the first look where it does not hold."""
    deadline = time.monotonic() + duration
    while True:
        value = predicate()
        assert value, f"{what} stopped holding after {duration - (deadline - time.monotonic()):.1f} s"
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)


def wait_at_most(predicate: Callable[[], object], timeout: float, interval: float = 0.02) -> bool:
    """Poll ``predicate`` for up to ``timeout`` s and say whether it came true; never fails.

    For conditions that are sufficient but not necessary (a request seen queued at a frozen broker proves it
    hangs there, but one the broker was already handling hangs just as well, invisibly): the wait ends as soon
    as the evidence shows, and otherwise after a bound that is the old fixed sleep's length.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return True
        except Exception:
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
