"""The broker resends a REST produce only when the first attempt certainly wrote nothing.

A fault run duplicated values of REST v2 producers that never retried: the broker's produce routing resent a
batch after NOT_LEADER_OR_FOLLOWER, also when that error came from an acks=all wait that lost leadership after
the append (the batch may survive on the new leader). These tests pin the decision (``retry_is_safe``), the
marker the partition puts on a post-append NOT_LEADER (real ``Partition``), and the service's behaviour against
a real HTTP "leader" (aiohttp on 127.0.0.1) that counts the appends it receives.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from aiohttp import web

from broker.interbroker import InterBrokerClient
from broker.produce.service import ProduceService, retry_is_safe
from broker.replication.partition import POSSIBLY_APPENDED
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)
from tests.harness.wait import SLOW_MACHINE_S
from tests.unit.produce.test_routing import OTHER, FakeInfo, FakeReplicas, Signal
from tests.unit.replication.fakes import batch, config, info, make_partition

T = TypeVar("T")


def run(factory: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(factory())  # type: ignore[arg-type]


def test_only_failures_before_the_append_are_safe_to_retry() -> None:
    assert retry_is_safe(LeaderNotAvailableError("electing"))
    assert retry_is_safe(NotLeaderOrFollowerError("not the leader", leader=2))
    assert retry_is_safe(BrokerNotAvailableError("connection refused", sent=False))
    ambiguous = NotLeaderOrFollowerError("lost leadership while waiting", leader=2, **{POSSIBLY_APPENDED: True})
    assert not retry_is_safe(ambiguous)
    assert retry_is_safe(ambiguous, idempotent=True)  # an Idempotency-Key: the leader recognises the resend
    assert not retry_is_safe(BrokerNotAvailableError("connection reset after sending"))
    assert not retry_is_safe(NotEnoughReplicasAfterAppendError("isr shrank"))
    assert not retry_is_safe(RequestTimedOutError("not replicated in time"))


def test_a_leadership_lost_during_an_acks_all_wait_is_marked_possibly_appended(tmp_path: Path) -> None:
    async def main() -> None:
        part, _, _ = make_partition(tmp_path)
        await part.apply(info(1, 5, (1, 2)), config())
        produce = asyncio.create_task(part.append(batch(), acks=-1, timeout_ms=10_000))
        for _ in range(5):
            await asyncio.sleep(0)
        assert part.log_end_offset == 1  # appended, waiting for broker 2
        await part.apply(info(2, 6, (2,)), config())  # leadership moves while the produce waits
        with pytest.raises(NotLeaderOrFollowerError) as after:
            await asyncio.wait_for(produce, SLOW_MACHINE_S)
        assert after.value.details[POSSIBLY_APPENDED] is True and not retry_is_safe(after.value)
        assert "may or may not survive" in after.value.message
        with pytest.raises(NotLeaderOrFollowerError) as before:  # refused before appending: safe
            await part.append(batch(), acks=-1, timeout_ms=1000)
        assert POSSIBLY_APPENDED not in before.value.details and retry_is_safe(before.value)
        assert part.log_end_offset == 1

    run(main)


class Leader:
    """A remote leader's binary produce path: answers ``answers`` in turn (then 200) and counts the requests."""

    def __init__(self, answers: list[tuple[int, dict]]) -> None:
        self.answers = answers
        self.requests = 0

    async def handle(self, request: web.Request) -> web.Response:
        await request.read()
        self.requests += 1
        if self.answers:
            status, body = self.answers.pop(0)
            return web.json_response(body, status=status)
        return web.json_response({"base_offset": 7, "leader": OTHER})


async def _service_against(leader: Leader | None, port: int) -> tuple[ProduceService, InterBrokerClient,
                                                                       web.AppRunner | None]:
    runner = None
    if leader is not None:
        app = web.Application()
        app.router.add_post("/topics/t/partitions/0/batches", leader.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
    replicas = FakeReplicas()
    replicas.cache.counts["t"] = 1
    replicas.infos[("t", 0)] = FakeInfo(OTHER, 6)
    replicas.urls[OTHER] = f"http://127.0.0.1:{port}"
    session = InterBrokerClient(1, lambda _: None)
    await session.start()
    return ProduceService(replicas, session, metadata_changed=Signal().changed), session, runner  # type: ignore[arg-type]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NOT_LEADER = {"error_code": 40903, "error": "NOT_LEADER_OR_FOLLOWER", "message": "m", "retriable": True,
              "leader": OTHER}


@pytest.mark.parametrize(("answer", "requests", "ok"), [
    ({**NOT_LEADER, POSSIBLY_APPENDED: True}, 1, False),  # ambiguous: answered to the client, not resent
    (NOT_LEADER, 2, True),  # before the append: waited out and resent
])
def test_a_forwarded_produce_is_resent_only_when_nothing_was_appended(answer: dict, requests: int, ok: bool) -> None:
    async def main() -> None:
        leader = Leader([(409, answer)])
        service, session, runner = await _service_against(leader, _free_port())
        try:
            result = await service.append("t", 0, bytes(batch()), -1, 3000)
        finally:
            await session.close()
            assert runner is not None
            await runner.cleanup()
        assert leader.requests == requests
        assert (result.error is None) is ok
        if not ok:
            assert isinstance(result.error, NotLeaderOrFollowerError) and result.error.retriable

    run(main)


def test_a_leader_that_refuses_connections_is_waited_out_until_the_deadline() -> None:
    async def main() -> None:
        service, session, _ = await _service_against(None, _free_port())  # nobody listens there
        loop = asyncio.get_running_loop()
        try:
            started = loop.time()
            result = await service.append("t", 0, bytes(batch()), -1, 600)
            waited = loop.time() - started
        finally:
            await session.close()
        assert isinstance(result.error, BrokerNotAvailableError) and result.error.details.get("sent") is False
        assert waited >= 0.5  # retried (nothing was sent) until the request's deadline, not failed at once

    run(main)
