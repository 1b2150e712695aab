"""The controller requests service (broker/controller/requests.py) against a controller double (is it active, its
queue), the real metadata cache and the fake inter-broker client: a controlled shutdown from the front door and
from the stopping broker itself, and an unclean election here or forwarded once to the controller."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

from broker.controller.controller import ControlledShutdown, UncleanElection
from broker.controller.requests import ControllerRequests
from broker.metadata.cache import MetadataCache
from broker.produce.forwarding import FORWARDED
from odradek.protocol.errors import NotControllerError, RequestTimedOutError, StaleBrokerEpochError
from odradek.protocol.model import BrokerInfo, TopicPartition
from tests.unit.fakes.interbroker import FakeInterBroker, reply

T = TypeVar("T")
ME, CONTROLLER = 1, 3
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class FakeQueue:
    def __init__(self) -> None:
        self.events: list[Any] = []
        self.closed = False
        self.answer: Callable[[Any], None] | None = None

    def put(self, event: Any) -> bool:
        if self.closed:
            return False
        self.events.append(event)
        if self.answer is not None:
            asyncio.get_running_loop().call_soon(self.answer, event)
        return True


class FakeController:
    def __init__(self, active: bool) -> None:
        self.active = active
        self.queue = FakeQueue()


def _service(active: bool, controller_id: int | None = CONTROLLER, timeout_s: float = 5.0
             ) -> tuple[ControllerRequests, FakeController, FakeInterBroker]:
    cache = MetadataCache()
    cache.brokers = {b: BrokerInfo(b, "h", 9000 + b, epoch=100 + b) for b in (1, 2, 3)}
    controller, ib = FakeController(active), FakeInterBroker(urls={CONTROLLER: "http://b3"})
    service = ControllerRequests(ME, controller, cache, ib, lambda: controller_id,  # type: ignore[arg-type]
                                 timeout_s=timeout_s)
    return service, controller, ib


def run(factory: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(factory())  # type: ignore[arg-type]


def test_a_controlled_shutdown_is_queued_for_a_live_registration_and_answers_what_it_still_leads() -> None:
    service, controller, _ = _service(active=True)
    controller.queue.answer = lambda event: event.reply.set_result([("t", 1)])
    assert run(lambda: service.controlled_shutdown(2, 102)) == [T1]
    [event] = controller.queue.events
    assert isinstance(event, ControlledShutdown) and (event.broker_id, event.broker_epoch) == (2, 102)


@pytest.mark.parametrize(("broker_id", "epoch"), [(2, 7), (9, 109)])
def test_a_controlled_shutdown_that_is_not_a_live_registration_is_refused_before_the_queue(broker_id: int,
                                                                                          epoch: int) -> None:
    service, controller, _ = _service(active=True)
    with pytest.raises(StaleBrokerEpochError):
        run(lambda: service.controlled_shutdown(broker_id, epoch))
    assert controller.queue.events == []


def test_only_the_controller_takes_a_controlled_shutdown_and_its_wait_is_bounded() -> None:
    service, _, _ = _service(active=False)
    with pytest.raises(NotControllerError) as e:
        run(lambda: service.controlled_shutdown(2, 102))
    assert e.value.details["controller_id"] == CONTROLLER
    service, controller, _ = _service(active=True)
    controller.queue.closed = True
    with pytest.raises(NotControllerError):
        run(lambda: service.controlled_shutdown(2, 102))
    service, _, _ = _service(active=True, timeout_s=0.05)  # nobody answers
    with pytest.raises(RequestTimedOutError, match="controlled shutdown"):
        run(lambda: service.controlled_shutdown(2, 102))


def test_a_brokers_own_shutdown_goes_to_the_queue_on_the_controller_and_over_the_wire_elsewhere() -> None:
    service, controller, ib = _service(active=True)
    controller.queue.answer = lambda event: event.reply.set_result([])
    assert run(lambda: service.request_own_shutdown(101)) == []
    assert controller.queue.events[0].broker_epoch == 101 and ib.sent == []

    service, _, ib = _service(active=False)
    ib.answer = lambda sent: reply({"remaining_partitions": [{"topic": "t", "partition": 0}]})
    assert run(lambda: service.request_own_shutdown(101)) == [T0]
    [sent] = ib.sent
    assert sent.where == f"node:{CONTROLLER}" and sent.request.path == "/controller/controlled_shutdown"
    assert sent.json() == {"broker_id": ME, "broker_epoch": 101} and sent.request.lane == "replication"

    service, _, _ = _service(active=False, controller_id=None)
    with pytest.raises(RuntimeError, match="no controller"):
        run(lambda: service.request_own_shutdown(101))


def test_an_unclean_election_runs_on_the_controller() -> None:
    service, controller, ib = _service(active=True)
    controller.queue.answer = lambda event: event.reply.set_result({T0: 2})
    assert run(lambda: service.unclean_election([T0, T1])) == {T0: 2}
    [event] = controller.queue.events
    assert isinstance(event, UncleanElection) and event.partitions == (T0, T1) and ib.sent == []


def test_an_unclean_election_is_forwarded_once_to_the_controller() -> None:
    service, controller, ib = _service(active=False)
    ib.answer = lambda sent: reply({"partitions": [
        {"topic": "t", "partition": 0, "leader": 2, "error": None},
        {"topic": "t", "partition": 1, "leader": None, "error": "ELIGIBLE_LEADERS_NOT_AVAILABLE"}]})
    assert run(lambda: service.unclean_election([T0, T1])) == {T0: 2, T1: None}
    [sent] = ib.sent
    assert sent.where == "http://b3" and sent.request.path == "/admin/unclean_leader_election"
    assert sent.request.headers[FORWARDED] == str(ME)
    assert sent.json() == {"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 1}]}
    assert controller.queue.events == []
    with pytest.raises(NotControllerError):  # already forwarded once: never passed on again
        run(lambda: service.unclean_election([T0], forwarded=True))
    with pytest.raises(NotControllerError):  # no controller to forward to
        run(lambda: _service(active=False, controller_id=None)[0].unclean_election([T0]))
    assert len(ib.sent) == 1
