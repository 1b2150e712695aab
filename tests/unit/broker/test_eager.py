"""broker/eager.py's gather: a coroutine that never waits runs to its end in the caller's step, before anything
it scheduled; one that waits goes on in a task from where it stopped, with results, exceptions and cancellation
as asyncio.gather's."""

from __future__ import annotations

import asyncio

import pytest

from broker import eager


async def answer(value: int, order: list[str], woken: asyncio.Future[None] | None = None) -> int:
    order.append(f"run {value}")
    if woken is not None:
        woken.set_result(None)  # as an append waking a parked follower fetch
    return value


def test_coroutines_that_never_wait_are_done_before_what_they_woke_runs() -> None:
    """The produce's case: its answer is ready before the follower fetch it woke goes on, where asyncio.gather's
    tasks let the woken one go first."""

    async def main(gather: object) -> list[str]:
        order: list[str] = []
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def follower() -> None:
            await woken
            order.append("follower answered")

        parked = asyncio.ensure_future(follower())
        await asyncio.sleep(0)  # the follower parks
        results = await gather(answer(1, order, woken), answer(2, order))  # type: ignore[operator]
        order.append(f"produce answered {results}")
        await parked
        return order

    assert asyncio.run(main(eager.gather)) == ["run 1", "run 2", "produce answered [1, 2]", "follower answered"]
    assert asyncio.run(main(asyncio.gather))[2] == "follower answered"  # what the eager gather is for


def test_a_coroutine_that_waits_goes_on_from_where_it_stopped() -> None:
    async def main() -> tuple[list[object], list[str]]:
        order: list[str] = []
        gate: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def waits() -> int:
            order.append("first step")
            got = await gate  # suspends: the rest runs in a task
            order.append(f"woke with {got}")
            await asyncio.sleep(0)  # a bare yield passes through too
            got += await asyncio.sleep(0.01, result=1)
            return got

        asyncio.get_running_loop().call_later(0.01, gate.set_result, 41)
        results = await eager.gather(waits(), answer(7, order))
        return results, order

    results, order = asyncio.run(main())
    assert results == [42, 7] and order == ["first step", "run 7", "woke with 41"]


def test_exceptions_come_after_all_finished_or_in_place() -> None:
    async def fails_now() -> int:
        raise ValueError("now")

    async def fails_later() -> int:
        await asyncio.sleep(0.01)
        raise KeyError("later")

    async def main() -> tuple[list[object], list[bool]]:
        finished: list[bool] = []

        async def slow() -> int:
            await asyncio.sleep(0.02)
            finished.append(True)
            return 3

        with pytest.raises(ValueError, match="now"):
            await eager.gather(slow(), fails_now(), fails_later())
        returned = await eager.gather(fails_later(), fails_now(), slow(), return_exceptions=True)
        return returned, finished

    returned, finished = asyncio.run(main())
    assert [type(r) for r in returned] == [KeyError, ValueError, int] and returned[2] == 3
    assert finished == [True, True]  # the first call waited for its slow coroutine before raising


def test_cancelling_the_gatherer_cancels_a_suspended_coroutine_inside() -> None:
    async def main() -> list[str]:
        seen: list[str] = []

        async def parked() -> None:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                seen.append("cancelled inside")
                raise

        gathering = asyncio.ensure_future(eager.gather(parked(), parked()))
        await asyncio.sleep(0.01)
        gathering.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gathering
        return seen

    assert asyncio.run(main()) == ["cancelled inside", "cancelled inside"]


def test_an_exception_returned_as_a_value_is_a_result_not_a_failure() -> None:
    """The Kafka door's appends return their typed errors (one partition's refusal is that partition's answer)."""

    async def refuses() -> Exception:
        return ValueError("this partition's answer")

    async def refuses_later() -> Exception:
        await asyncio.sleep(0)
        return KeyError("later")

    results = asyncio.run(eager.gather(refuses(), refuses_later()))
    assert [type(r) for r in results] == [ValueError, KeyError]
