"""The ISR manager writes conditionally, retries what may succeed later, and never retries a version conflict."""

from __future__ import annotations

import asyncio

from broker.replication.isr_manager import IsrChange, IsrManager, IsrResult
from odradek.protocol.errors import CoordinationUnavailableError
from odradek.protocol.model import LeaderAndIsr


class Conflict(Exception):
    pass


class Writer:
    """A scripted facade verb: each call pops the next outcome (an exception to raise or a version)."""

    def __init__(self, *outcomes: int | Exception) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[str, int, LeaderAndIsr, int]] = []

    def __call__(self, topic: str, partition: int, state: LeaderAndIsr, version: int) -> int:
        self.calls.append((topic, partition, state, version))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


STATE = LeaderAndIsr(1, 4, [1, 2], 7)


def submit(manager: IsrManager, results: list[IsrResult], wanted: list[bool] | None = None) -> bool:
    return manager.submit(IsrChange("t", 0, STATE, 10, results.append,
                                    still_wanted=(lambda: wanted[0]) if wanted else (lambda: True)))


async def until(predicate: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


def test_a_transient_failure_is_retried_until_written() -> None:
    async def main() -> None:
        writer = Writer(CoordinationUnavailableError("zk down"), OSError("connection loss"), 11)
        manager = IsrManager(writer, conflicts=(Conflict,), backoff_s=0.01)
        results: list[IsrResult] = []
        assert submit(manager, results)
        assert not submit(manager, results)  # one change per partition in flight
        await until(lambda: results)
        assert results[0].ok and results[0].zk_version == 11
        assert len(writer.calls) == 3 and all(c == ("t", 0, STATE, 10) for c in writer.calls)
        assert not manager.in_flight("t", 0)

    asyncio.run(main())


def test_a_version_conflict_is_reported_not_retried() -> None:
    async def main() -> None:
        writer = Writer(Conflict("stale"))
        manager = IsrManager(writer, conflicts=(Conflict,), backoff_s=0.01)
        results: list[IsrResult] = []
        submit(manager, results)
        await until(lambda: results)
        assert not results[0].ok and results[0].conflict and len(writer.calls) == 1

    asyncio.run(main())


def test_a_change_the_partition_no_longer_wants_is_dropped() -> None:
    async def main() -> None:
        writer = Writer(OSError("loss"), OSError("loss"), 12)
        manager = IsrManager(writer, backoff_s=0.01)
        results: list[IsrResult] = []
        wanted = [True]
        submit(manager, results, wanted)
        await until(lambda: writer.calls)
        wanted[0] = False
        await until(lambda: results)
        assert not results[0].ok and not results[0].conflict and len(writer.calls) <= 2

    asyncio.run(main())
