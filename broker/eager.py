"""Coroutines started at once, in the caller's step: ``asyncio.gather`` without a task for those that never wait.

Why: ``asyncio.gather`` wraps each coroutine in a task, and a task's first step runs a turn of the loop later,
its result reaches the gatherer one more turn after that. Whatever the coroutines scheduled meanwhile runs first.
A Kafka produce of partitions this broker leads appends to the page cache without ever waiting, and the append
wakes the followers' parked fetches: through ``gather``, their answers (reads, encoding, writes to the socket)
went out before the produce's own answer, and an acks=1 produce at RF 3 answered about a millisecond later than
at RF 1 (Kafka answers the produce first: its delayed fetches complete after the request's response is queued).
Python 3.12's eager tasks do this; the broker runs on 3.11.

Invariants: each coroutine's first step runs now, in order, in the caller's context; one that returns or raises
in it costs no task; one that suspends goes on in a task from exactly where it stopped (the future it waits on,
cancellation and exceptions pass through as in a task of its own). Results come in argument order. Unlike
``gather``, an exception is raised only once every coroutine has finished (the first one, in argument order);
with ``return_exceptions`` each is returned in its place. Cancelling the gatherer cancels the tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

T = TypeVar("T")


class _Resumed:
    """The rest of a coroutine that suspended in its first step on ``yielded``, as an awaitable for a task:
    what the coroutine yields goes to the task, what the task sends or throws goes back in (PEP 380's
    ``yield from``, begun one step late)."""

    __slots__ = ("_coro", "_yielded")

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self._coro, self._yielded = coro, yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self._coro, self._yielded
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as e:  # a cancellation (or anything) the task throws in
                try:
                    value = coro.throw(e)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                value = coro.send(sent)
            except StopIteration as stop:
                return stop.value


async def _finish(resumed: _Resumed) -> Any:
    return await resumed


async def gather(*coros: Coroutine[Any, Any, T], return_exceptions: bool = False) -> list[T | BaseException]:
    """``asyncio.gather(*coros)`` whose coroutines run their first step now (see the module docstring)."""
    results: list[Any] = [None] * len(coros)
    raised: dict[int, BaseException] = {}  # by position (a coroutine may also *return* an exception: a result)
    pending: dict[int, asyncio.Future[Any]] = {}
    for i, coro in enumerate(coros):
        try:
            yielded = coro.send(None)
        except StopIteration as stop:
            results[i] = stop.value
        except BaseException as e:
            if not isinstance(e, Exception):  # a cancellation or an exit: the others go with it
                for task in pending.values():
                    task.cancel()
                for unstarted in coros[i + 1:]:
                    unstarted.close()
                raise
            results[i] = raised[i] = e
        else:
            pending[i] = asyncio.ensure_future(_finish(_Resumed(coro, yielded)))
    if pending:
        try:
            await asyncio.wait(pending.values())
        except asyncio.CancelledError:
            for task in pending.values():
                task.cancel()
            raise
        for i, task in pending.items():
            if task.cancelled():
                results[i] = raised[i] = asyncio.CancelledError()
            elif (error := task.exception()) is not None:
                results[i] = raised[i] = error
            else:
                results[i] = task.result()
    if raised and not return_exceptions:
        raise raised[min(raised)]
    return results
