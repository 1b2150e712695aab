"""ReadBudget (queued.max.request.bytes): reservations that fit pass at once, others wait their turn for a
release, and one that stays unmet is a retriable BrokerBusyError."""

from __future__ import annotations

import asyncio

import pytest

from broker.api.app import ReadBudget
from odradek.protocol.errors import BrokerBusyError


def test_reservations_within_the_limit_pass_and_release_returns_them() -> None:
    async def run() -> None:
        budget = ReadBudget(100)
        await budget.reserve(60, 1.0)
        await budget.reserve(40, 1.0)
        assert budget.in_use == 100
        await budget.release(60)
        await budget.release(40)
        assert budget.in_use == 0
        await budget.reserve(10**9, 1.0)  # a body larger than the whole budget takes all of it, not more
        assert budget.in_use == 100

    asyncio.run(run())


def test_a_reservation_that_does_not_fit_waits_for_a_release() -> None:
    async def run() -> None:
        budget = ReadBudget(100)
        await budget.reserve(80, 1.0)
        waiter = asyncio.create_task(budget.reserve(50, 5.0))
        await asyncio.sleep(0.05)
        assert not waiter.done() and budget.in_use == 80
        await budget.release(80)
        await asyncio.wait_for(waiter, 1.0)
        assert budget.in_use == 50

    asyncio.run(run())


def test_a_waiter_does_not_hold_up_a_reservation_that_fits_and_gets_its_turn_after_releases() -> None:
    async def run() -> None:
        budget = ReadBudget(100)
        await budget.reserve(70, 1.0)
        big = asyncio.create_task(budget.reserve(60, 5.0))
        await asyncio.sleep(0.02)
        await asyncio.wait_for(budget.reserve(20, 5.0), 1.0)  # fits beside the 70: not queued behind the 60
        assert not big.done() and budget.in_use == 90
        await budget.release(70)
        await asyncio.wait_for(big, 1.0)  # the release woke the waiter: 20 + 60 fit
        assert budget.in_use == 80

    asyncio.run(run())


def test_a_reservation_unmet_within_its_timeout_is_broker_busy_and_holds_nothing() -> None:
    async def run() -> None:
        budget = ReadBudget(100)
        await budget.reserve(100, 1.0)
        with pytest.raises(BrokerBusyError, match=r"queued\.max\.request\.bytes"):
            await budget.reserve(1, 0.05)
        assert budget.in_use == 100
        await budget.release(100)
        await budget.reserve(100, 0.05)  # nobody is left queued: the next one passes at once
        assert budget.in_use == 100

    asyncio.run(run())
