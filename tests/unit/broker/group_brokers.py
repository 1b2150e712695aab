"""Two brokers' group coordinators for unit tests of group routing and of REST consumer instances.

Both run the real ``GroupCoordinator`` over one fake ZooKeeper store (tests/unit/groups/fakes.py), so whichever
claims a group first coordinates it, as with the real coordinator znode. Broker 2 serves the real group API
handlers (broker/api/groups.py) over HTTP on 127.0.0.1; broker 1 reaches it through a real inter-broker client,
so a forwarded operation is encoded by broker 1's router and decoded by broker 2's handlers, as in a cluster.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from aiohttp import web

from broker.api import groups
from broker.api.context import BROKER
from broker.api.errors import error_answer
from broker.group_router import GroupRouter
from broker.interbroker import InterBrokerClient
from broker.metadata.events import EventQueue
from consumer_coordinator.coordinator import GroupCoordinator
from tests.unit.groups.fakes import FakeGroupStore, FakeMetadata, FakeSession

PARTITIONS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _group_routes() -> list[web.RouteDef]:
    g = "/groups/{group}"
    return [web.get(g, groups.describe), web.delete(g, groups.delete), web.post(f"{g}/members", groups.join),
            web.post(f"{g}/members/{{member}}/heartbeat", groups.heartbeat),
            web.delete(f"{g}/members/{{member}}", groups.leave), web.get(f"{g}/offsets", groups.offsets),
            web.post(f"{g}/offsets", groups.commit), web.post(f"{g}/offsets/reset", groups.reset_offsets),
            web.delete(f"{g}/offsets", groups.delete_offsets)]


@dataclass
class Brokers:
    store: FakeGroupStore
    coordinator1: GroupCoordinator
    coordinator2: GroupCoordinator
    router1: GroupRouter  # broker 1's: local for its groups, one HTTP hop to broker 2 for the others
    router2: GroupRouter
    url2: str


@asynccontextmanager
async def two_brokers() -> AsyncIterator[Brokers]:
    store, metadata = FakeGroupStore(), FakeMetadata()
    metadata.set_partitions("t", PARTITIONS)
    coordinators = [GroupCoordinator(b, FakeSession(), metadata, lambda: 7,  # type: ignore[arg-type]
                                     queue_factory=EventQueue, store=store, initial_rebalance_delay_ms=0)
                    for b in (1, 2)]
    for c in coordinators:
        await c.start()
    url2 = f"http://127.0.0.1:{_free_port()}"
    client1 = InterBrokerClient(1, {2: url2}.get)
    client2 = InterBrokerClient(2, {}.get)
    router1, router2 = GroupRouter(coordinators[0], client1), GroupRouter(coordinators[1], client2)

    @web.middleware
    async def errors(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as e:
            return error_answer(request, e)

    app = web.Application(middlewares=[errors])
    app[BROKER] = SimpleNamespace(group_router=router2)  # type: ignore[assignment]
    app.add_routes(_group_routes())
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(url2.rsplit(":", 1)[1])).start()
    await client1.start()
    await client2.start()
    try:
        yield Brokers(store, coordinators[0], coordinators[1], router1, router2, url2)
    finally:
        await client1.close()
        await client2.close()
        await runner.cleanup()
        for c in coordinators:
            await c.stop()
