"""Calling the coordinator of a consumer group, wherever it is: the one routing step of every group operation.

Who coordinates group G is whoever holds G's coordinator znode (``GroupCoordinator.locate``, which claims it
when nobody does). Two callers need "run this operation on G's coordinator": the group API's handlers
(broker/api/groups.py), for any client, and the REST v2 consumer instances this broker holds
(broker/rest_consumers.py). Both go through :class:`GroupRouter`, so the rules below hold for both.

Invariants:

* when this broker coordinates G, the operation runs on the coordinator service in-process, never through this
  broker's own HTTP port;
* otherwise it is sent once, over the inter-broker client (broker/interbroker.py), to the coordinator's group
  API, marked ``Odradek-Forwarded``; a forwarded operation is never forwarded again: a broker that receives one
  and does not coordinate G answers NOT_COORDINATOR (retriable), so a coordinator change in between cannot make
  a request bounce between brokers;
* a local NOT_COORDINATOR (the group left this broker between ``locate`` and the call: a lost ZooKeeper
  session) is retried once after locating again, unless the operation was itself forwarded;
* the value is the same either way: the local coordinator's return value, or the remote's JSON body, which the
  remote's handler rendered from the same coordinator method; typed errors come back as the same types
  (``decode_error``);
* ``here`` is for clients that find the coordinator themselves and talk to it (Kafka's, told by FindCoordinator):
  the call runs on this broker when it coordinates G, and is NOT_COORDINATOR otherwise, never forwarded, so the
  client locates the coordinator again, as Kafka's brokers answer it.

The loop of locating, running here or forwarding once is broker/coordinator_routing.py's ``CoordinatorRouter``
(two attempts, "group" in its errors); this module gives it the group API's requests and decodings.

Concurrency: one instance per broker, used from the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import quote

import orjson

from broker.coordinator_routing import CoordinatorRouter, Forward, Routed, json_body
from broker.interbroker import InterBrokerClient
from broker.produce.forwarding import FORWARDED
from consumer_coordinator.assignors import TP
from consumer_coordinator.coordinator import GroupCoordinator, JoinRequest
from odradek.protocol.errors import GroupIdNotFoundError

__all__ = ["COORDINATOR_HEADER", "FORWARDED_HEADER", "GroupRouter", "Routed"]

T = TypeVar("T")

COORDINATOR_HEADER = "Odradek-Coordinator"  # names the coordinator in every group reply
FORWARDED_HEADER = FORWARDED  # on a forwarded request: the forwarding broker's id
FORWARD_TIMEOUT_S = 30.0
JOIN_FORWARD_SLACK_S = 10.0  # beyond the rebalance timeout, which bounds how long the coordinator holds a join

Offset = tuple[int, str, int]  # offset, metadata, commit timestamp

# ``here`` never forwards (its calls are marked forwarded): this request is never sent.
_NOWHERE: Forward[Any] = Forward("GET", "/", None, json_body)


class GroupRouter:
    def __init__(self, coordinator: GroupCoordinator, interbroker: InterBrokerClient) -> None:
        self.coordinator = coordinator
        self.interbroker = interbroker
        self._router = CoordinatorRouter(coordinator.broker_id, coordinator.locate, interbroker, noun="group",
                                         attempts=2)

    # -------------------------------------------------------------------------------------------- members

    async def join(self, group: str, req: JoinRequest, *, forwarded: bool = False) -> Routed[Any]:
        """Join (long-polls until the rebalance completes). Forwarded, the coordinator sees this broker's address
        as the member's host, as for any forwarded request."""
        body: dict[str, Any] = {
            "client_id": req.client_id, "assignor": req.assignor, "session_timeout_ms": req.session_timeout_ms,
            "rebalance_timeout_ms": req.rebalance_timeout_ms, "owned": [list(tp) for tp in req.owned],
        }
        if req.member_id:
            body["member_id"] = req.member_id
        if req.topics is not None:
            body["topics"] = sorted(req.topics)
        if req.pattern is not None:
            body["pattern"] = req.pattern
        return await self._call(group, lambda c: c.join(group, req), "POST", "/members", body, forwarded=forwarded,
                                timeout_s=req.rebalance_timeout_ms / 1000 + JOIN_FORWARD_SLACK_S)

    async def heartbeat(self, group: str, member_id: str, generation: int, *, forwarded: bool = False) -> Routed[Any]:
        return await self._call(group, lambda c: c.heartbeat(group, member_id, generation), "POST",
                                f"/members/{quote(member_id, safe='')}/heartbeat", {"generation": generation},
                                forwarded=forwarded)

    async def leave(self, group: str, member_id: str, *, forwarded: bool = False) -> Routed[Any]:
        return await self._call(group, lambda c: c.leave(group, member_id), "DELETE",
                                f"/members/{quote(member_id, safe='')}", forwarded=forwarded)

    # -------------------------------------------------------------------------------------------- offsets

    async def commit(self, group: str, member_id: str, generation: int, offsets: dict[TP, tuple[int, str]], *,
                     forwarded: bool = False) -> Routed[Any]:
        body = {"member_id": member_id, "generation": generation,
                "offsets": [{"topic": t, "partition": p, "offset": o, "metadata": m}
                            for (t, p), (o, m) in sorted(offsets.items())]}
        return await self._call(group, lambda c: c.commit(group, member_id, generation, offsets), "POST",
                                "/offsets", body, forwarded=forwarded)

    async def reset_offsets(self, group: str, offsets: dict[TP, int], *, forwarded: bool = False) -> Routed[Any]:
        body = {"offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(offsets.items())]}
        return await self._call(group, lambda c: c.reset_offsets(group, offsets), "POST", "/offsets/reset", body,
                                must_exist=True, forwarded=forwarded)

    async def delete_offsets(self, group: str, topic: str, partitions: list[int] | None, *,
                             forwarded: bool = False) -> Routed[Any]:
        query = {"topic": topic} if partitions is None else {"topic": topic,
                                                             "partitions": ",".join(map(str, partitions))}
        return await self._call(group, lambda c: c.delete_offsets(group, topic, partitions), "DELETE", "/offsets",
                                query=query, must_exist=True, forwarded=forwarded)

    async def committed_offsets(self, group: str) -> dict[TP, Offset]:
        """The group's committed offsets, from ZooKeeper (any broker reads them; no coordinator involved).

        Raises:
            GroupIdNotFoundError: the group has no znode (nobody joined or committed yet).
        """
        store = self.coordinator.store
        if not await asyncio.to_thread(store.exists, group):
            raise GroupIdNotFoundError(f"group {group!r} does not exist")
        offsets: dict[TP, Offset] = await asyncio.to_thread(store.get_offsets, group)
        return offsets

    # ---------------------------------------------------------------------------------------------- admin

    async def describe(self, group: str, *, forwarded: bool = False) -> Routed[Any]:
        return await self._call(group, lambda c: c.describe(group), "GET", "", must_exist=True, forwarded=forwarded)

    async def delete(self, group: str, *, forwarded: bool = False) -> Routed[Any]:
        return await self._call(group, lambda c: c.delete(group), "DELETE", "", must_exist=True, forwarded=forwarded)

    # ------------------------------------------------------------------------------- clients that locate

    async def locate(self, group: str) -> int:
        """The broker coordinating ``group``, claiming it for this broker if nobody does (FindCoordinator)."""
        return await self.coordinator.locate(group)

    async def here(self, group: str, call: Callable[[GroupCoordinator], Awaitable[T]], *,
                   must_exist: bool = False) -> T:
        """``call`` on this broker's coordinator when it coordinates ``group`` (claiming it if nobody does).

        Raises:
            NotCoordinatorError: another broker coordinates ``group`` (never forwarded: the client asks again).
            GroupIdNotFoundError: ``must_exist`` and the group has no znode.
            whatever ``call`` raises.
        """
        routed: Routed[T] = await self._router.run(group, lambda: call(self.coordinator), _NOWHERE, forwarded=True,
                                                   locate=self._locator(must_exist))
        return routed.value

    # ---------------------------------------------------------------------------------------------- inner

    def _locator(self, must_exist: bool) -> Callable[[str], Awaitable[int]] | None:
        if not must_exist:
            return None
        return lambda group: self.coordinator.locate(group, must_exist=True)

    async def _call(self, group: str, local: Callable[[GroupCoordinator], Awaitable[Any]], method: str, path: str,
                    body: Any = None, *, query: dict[str, str] | None = None, must_exist: bool = False,
                    forwarded: bool, timeout_s: float = FORWARD_TIMEOUT_S) -> Routed[Any]:
        forward: Forward[Any] = Forward(method, f"/groups/{quote(group, safe='')}{path}",
                                        None if body is None else orjson.dumps(body), json_body, params=query,
                                        timeout_s=timeout_s)
        return await self._router.run(group, lambda: local(self.coordinator), forward, forwarded=forwarded,
                                      locate=self._locator(must_exist))
