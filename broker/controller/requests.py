"""Requests any broker makes of the active controller: a controlled shutdown and an unclean leader election.

Why one place: the same request is made from two sides. A stopping broker asks for its own controlled shutdown
(broker/server.py): on the controller's own broker it goes straight into the controller's event queue, elsewhere
it is sent to the controller over the inter-broker client. The controller's broker takes requests from other
brokers through a front door (broker/api/controller_ops.py) and puts the same event into the same queue. Front
doors call these methods with decoded arguments and render the typed answers.

Invariants: an event reaches the controller's queue only while this broker is the active controller
(NOT_CONTROLLER otherwise, naming the controller this broker knows); a front door's controlled shutdown is refused
unless the broker id and epoch are a live registration in this broker's metadata (the controller checks again
against its own view); a request forwarded to the controller is forwarded at most once (the forward is marked,
and a marked request on a broker that is not the controller is NOT_CONTROLLER, never passed on again); a wait for
the controller's answer is bounded (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from broker.controller.controller import ControlledShutdown, UncleanElection
from broker.interbroker import REPLICATION, Request
from broker.produce.forwarding import FORWARDED
from odradek.protocol.errors import NotControllerError, RequestTimedOutError, StaleBrokerEpochError
from odradek.protocol.model import TopicPartition

if TYPE_CHECKING:
    from broker.controller.controller import Controller
    from broker.interbroker import InterBrokerClient
    from broker.metadata.cache import MetadataCache

__all__ = ["CONTROLLED_SHUTDOWN_PATH", "UNCLEAN_ELECTION_PATH", "ControllerRequests"]

T = TypeVar("T")

CONTROLLED_SHUTDOWN_PATH = "/controller/controlled_shutdown"  # the controller broker's routes for the two requests
UNCLEAN_ELECTION_PATH = "/admin/unclean_leader_election"
FORWARD_TIMEOUT_S = 35.0  # a forwarded election: the controller's own bound, plus the way there and back


class ControllerRequests:
    def __init__(self, broker_id: int, controller: Controller, cache: MetadataCache, interbroker: InterBrokerClient,
                 controller_id: Callable[[], int | None], *, timeout_s: float = 30.0) -> None:
        """``controller_id`` is the controller this broker knows now (from ZooKeeper's /controller; None while
        none is known); ``timeout_s`` bounds the wait for the controller's answer to a front door's request."""
        self._broker_id = broker_id
        self._controller = controller
        self._cache = cache
        self._interbroker = interbroker
        self._controller_id = controller_id
        self._timeout_s = timeout_s

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TopicPartition]:
        """On the controller: move ``broker_id``'s leaderships away (Kafka's ControlledShutdown); the partitions
        it still leads come back (empty: it may stop).

        Raises:
            StaleBrokerEpochError: not a live registration (only the broker itself knows its epoch).
            NotControllerError: this broker is not the controller.
            RequestTimedOutError: the controller did not answer in ``timeout_s``.
        """
        registered = self._cache.brokers.get(broker_id)
        if registered is None or registered.epoch != broker_epoch:
            raise StaleBrokerEpochError(f"broker {broker_id} with epoch {broker_epoch} is not a live registration")
        reply: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
        self._submit(ControlledShutdown(broker_id, broker_epoch, reply))
        remaining = await self._answer(reply, "the controlled shutdown")
        return [TopicPartition(t, p) for t, p in remaining]

    async def request_own_shutdown(self, broker_epoch: int | None) -> list[TopicPartition]:
        """This broker's own controlled shutdown, wherever the controller is: into the queue when this broker is
        the controller, else sent to the controller. Unbounded here: the caller bounds and retries it.

        Raises:
            RuntimeError: no controller is known, or the controller's queue is closed (retry later).
            the controller's typed error, when it refuses the request.
        """
        if self._controller.active:
            reply: asyncio.Future[list[tuple[str, int]]] = asyncio.get_running_loop().create_future()
            if not self._controller.queue.put(ControlledShutdown(self._broker_id, broker_epoch or -1, reply)):
                raise RuntimeError("the controller queue is closed")
            return [TopicPartition(t, p) for t, p in await reply]
        controller_id = self._controller_id()
        if controller_id is None:
            raise RuntimeError("no controller is known")
        body = {"broker_id": self._broker_id, "broker_epoch": broker_epoch}
        answer = await self._interbroker.send(controller_id, Request(
            "POST", CONTROLLED_SHUTDOWN_PATH, body=orjson.dumps(body), headers={"Content-Type": "application/json"},
            lane=REPLICATION))
        return [TopicPartition(p["topic"], p["partition"]) for p in answer.json()["remaining_partitions"]]

    async def unclean_election(self, partitions: Sequence[TopicPartition], *,
                               forwarded: bool = False) -> dict[TopicPartition, int | None]:
        """Elect leaders for ``partitions`` from any live replica, in sync or not (Kafka's ElectLeaders with
        UNCLEAN): per partition, the leader elected or already leading, or None when no replica is alive (a
        partition the controller does not know is left out). Any broker takes it: one that is not the controller
        forwards it to the controller, once (``forwarded``: this request already was).

        Raises:
            NotControllerError: not the controller, and no controller to forward to (or already forwarded).
            RequestTimedOutError: the controller did not answer in ``timeout_s``.
        """
        if not self._controller.active:
            return await self._forward_election(partitions, forwarded)
        reply: asyncio.Future[dict[TopicPartition, int | None]] = asyncio.get_running_loop().create_future()
        self._submit(UncleanElection(tuple(partitions), reply))
        return await self._answer(reply, "the election")

    async def _forward_election(self, partitions: Sequence[TopicPartition],
                                forwarded: bool) -> dict[TopicPartition, int | None]:
        controller_id = self._controller_id()
        url = self._interbroker.url_of(controller_id) if controller_id is not None else None
        if url is None or forwarded:
            raise self._not_controller()
        body = {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
        reply = await self._interbroker.send_to(url, Request(
            "POST", UNCLEAN_ELECTION_PATH, body=orjson.dumps(body), timeout_s=FORWARD_TIMEOUT_S,
            headers={FORWARDED: str(self._broker_id), "Content-Type": "application/json"}))
        answer: Any = reply.json()
        return {TopicPartition(p["topic"], p["partition"]): p.get("leader") for p in answer["partitions"]}

    def _submit(self, event: ControlledShutdown | UncleanElection) -> None:
        if not self._controller.active or not self._controller.queue.put(event):
            raise self._not_controller()

    async def _answer(self, reply: asyncio.Future[T], what: str) -> T:
        try:
            return await asyncio.wait_for(reply, self._timeout_s)
        except TimeoutError:
            raise RequestTimedOutError(
                f"the controller did not finish {what} in {self._timeout_s:.0f} s") from None

    def _not_controller(self) -> NotControllerError:
        return NotControllerError(f"broker {self._broker_id} is not the controller",
                                  controller_id=self._controller_id())
