"""Running a transactional id's call on its coordinator (broker/coordinator_routing.py, broker/transaction_router.py)
against a coordinator double and the fake inter-broker client: here when this broker coordinates the id, else
forwarded once, marked, with the same call's body; and the generic router's rules (never forwarded twice, a
coordinator that is not registered, a key that moved away in between)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from broker.coordinator_routing import CoordinatorRouter, Forward, Routed, json_body
from broker.produce.forwarding import FORWARDED
from broker.transaction_router import ProducerIdAndEpoch, TransactionRouter
from odradek.protocol.errors import CoordinatorNotAvailableError, NotCoordinatorError, ProducerFencedError
from tests.unit.fakes.interbroker import FakeInterBroker, reply
from transaction_coordinator.coordinator import TxnCoordinator
from transaction_coordinator.state import TxnOffsets

T = TypeVar("T")
ME, OTHER = 1, 2


def run(factory: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(factory())  # type: ignore[arg-type]


class FakeTxnCoordinator:
    broker_id = ME

    def __init__(self, owner: int = ME) -> None:
        self.owner = owner
        self.calls: list[tuple[Any, ...]] = []
        self.tickets = 0

    async def locate(self, tid: str) -> int:
        return self.owner

    def ticket(self) -> int:
        self.tickets += 1
        return self.tickets

    async def init(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None = None,
                   ticket: int | None = None) -> tuple[int, int]:
        self.calls.append(("init", tid, timeout_ms))
        return 4000, 3

    async def add_partitions(self, tid: str, pid: int, epoch: int, partitions: list[tuple[str, int]],
                             txn: int | None = None, ticket: int | None = None) -> int:
        self.calls.append(("add_partitions", tid, pid, epoch, partitions, txn))
        return 12

    async def add_offsets(self, tid: str, pid: int, epoch: int, offsets: TxnOffsets, txn: int | None = None,
                          ticket: int | None = None) -> int:
        self.calls.append(("add_offsets", tid, pid, epoch, offsets, txn))
        return 12

    async def end(self, tid: str, pid: int, epoch: int, commit: bool, txn: int | None = None,
                  ticket: int | None = None) -> str:
        self.calls.append(("end", tid, pid, epoch, commit, txn))
        if epoch < 3:
            raise ProducerFencedError("an older epoch")
        return "CompleteCommit" if commit else "CompleteAbort"


def _router(owner: int, answer: Callable[[Any], Any] | None = None
            ) -> tuple[TransactionRouter, FakeTxnCoordinator, FakeInterBroker]:
    coordinator = FakeTxnCoordinator(owner)
    ib = FakeInterBroker(urls={OTHER: "http://b2"})
    if answer is not None:
        ib.answer = answer
    return TransactionRouter(coordinator, ib), coordinator, ib  # type: ignore[arg-type]


def test_the_coordinator_runs_the_calls_itself() -> None:
    router, coordinator, ib = _router(ME)
    assert run(lambda: router.init("tx", 5000)) == Routed(ProducerIdAndEpoch(4000, 3), ME)
    assert run(lambda: router.add_partitions("tx", 4000, 3, [("t", 0)], txn=-1)) == Routed(12, ME)
    assert run(lambda: router.end("tx", 4000, 3, True, txn=12)) == Routed("CompleteCommit", ME)
    with pytest.raises(ProducerFencedError):  # the coordinator's typed errors reach the front door as they are
        run(lambda: router.end("tx", 4000, 2, True))
    assert [c[0] for c in coordinator.calls] == ["init", "add_partitions", "end", "end"] and ib.sent == []
    assert [c[-1] for c in coordinator.calls[1:]] == [-1, 12, None]  # the transaction named, as it was


def test_another_coordinator_gets_the_same_call_forwarded_once_and_marked() -> None:
    answers = {"init": {"producer_id": 7, "producer_epoch": 1}, "end": {"state": "CompleteAbort"},
               "offsets": {"transaction": 5}}
    router, coordinator, ib = _router(OTHER, lambda sent: reply(answers.get(sent.request.path.rsplit("/", 1)[1], {})))
    assert run(lambda: router.init("tx", 5000)) == Routed(ProducerIdAndEpoch(7, 1), OTHER)
    offsets = TxnOffsets("g", 4, (("t", 0, 10, "m"),))
    assert run(lambda: router.add_offsets("tx", 7, 1, offsets)) == Routed(5, OTHER)
    assert run(lambda: router.end("tx", 7, 1, False, txn=5)) == Routed("CompleteAbort", OTHER)
    assert coordinator.calls == []
    assert [(s.where, s.request.method, s.request.path) for s in ib.sent] == [
        ("http://b2", "POST", "/transactions/tx/init"), ("http://b2", "POST", "/transactions/tx/offsets"),
        ("http://b2", "POST", "/transactions/tx/end")]
    assert [s.json() for s in ib.sent] == [
        {"transaction_timeout_ms": 5000},
        {"producer_id": 7, "producer_epoch": 1, "group": "g", "generation": 4, "offsets": [["t", 0, 10, "m"]]},
        {"producer_id": 7, "producer_epoch": 1, "commit": False, "transaction": 5}]
    assert all(s.request.headers[FORWARDED] == str(ME) for s in ib.sent)


def test_a_forwarded_call_is_never_forwarded_again_nor_sent_to_an_unregistered_coordinator() -> None:
    router, _, ib = _router(OTHER)
    with pytest.raises(NotCoordinatorError, match="does not coordinate 'tx'"):
        run(lambda: router.init("tx", 5000, forwarded=True))
    router, _, ib = _router(5)  # broker 5 holds the id but is not registered
    with pytest.raises(CoordinatorNotAvailableError, match=r"the coordinator of 'tx' \(broker 5\) is not live"):
        run(lambda: router.init("tx", 5000))
    assert ib.sent == []


def test_a_key_that_moved_away_in_between_is_located_again_when_attempts_allow() -> None:
    owners = [ME, OTHER]
    ib = FakeInterBroker(urls={OTHER: "http://b2"}, answer=lambda sent: reply({"joined": True}))

    async def locate(key: str) -> int:
        return owners.pop(0)

    async def local() -> Any:
        raise NotCoordinatorError("lost the group")

    forward = Forward("POST", "/groups/g/members", b"{}", json_body)
    router = CoordinatorRouter(ME, locate, ib, noun="group", attempts=2)  # type: ignore[arg-type]
    assert run(lambda: router.run("g", local, forward)) == Routed({"joined": True}, OTHER)
    owners[:] = [ME, ME]
    with pytest.raises(NotCoordinatorError):  # the last attempt's error goes to the caller
        run(lambda: router.run("g", local, forward))
    owners[:] = [ME]
    with pytest.raises(NotCoordinatorError):  # a forwarded call is not located again
        run(lambda: router.run("g", local, forward, forwarded=True))
    owners[:] = [OTHER]
    with pytest.raises(NotCoordinatorError, match="does not coordinate group 'g'"):
        run(lambda: router.run("g", local, forward, forwarded=True))


def test_a_producer_without_a_transactional_id_gets_a_fresh_id_at_epoch_zero_from_any_broker() -> None:
    ids = iter([500, 501])
    coordinator = TxnCoordinator(ME, object(), lambda: 1, lambda: next(ids), None)  # type: ignore[arg-type]
    assert run(coordinator.init_producer_id) == (500, 0)
    assert run(coordinator.init_producer_id) == (501, 0)
