"""Where a client-named REST consumer instance lives: its znode (znodes.RestConsumerInstanceZNode) names its
broker.

Why: an instance lives in the broker that created it, and a request for it may reach any broker (a load
balancer). A generated instance id names its broker itself; a name the client chose does not, so its holder is
written here, and a broker that gets a request for it reads one znode and forwards in one hop.

Invariants: the znode is ephemeral (it goes with its broker's session); the last broker to create the name owns
it; a broker deletes only a znode that names itself. A znode may outlive its instance (expired on its broker):
the lookup then leads, still in one hop, to a broker that answers CONSUMER_INSTANCE_NOT_FOUND, which is right.
Blocking: asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zk.client import ZkClient
from zk.znodes import RestConsumerInstanceZNode


def register_instance(zk: ZkClient, group: str, name: str, broker_id: int) -> None:
    path, data = RestConsumerInstanceZNode.path(group, name), RestConsumerInstanceZNode.encode(broker_id)

    def attempt() -> None:
        try:
            zk.kazoo.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            zk.kazoo.set(path, data)

    zk.retrying(attempt)


def instance_holder(zk: ZkClient, group: str, name: str) -> int | None:
    """The holder's broker id, or None when no broker holds the name. A miss is confirmed after a ``sync``: this
    broker's ZooKeeper server may not have applied the holder's create yet (ZooKeeper reads are sequentially
    consistent per session, not linearizable across sessions), and a stale miss would answer 404 for an
    instance that exists."""
    path = RestConsumerInstanceZNode.path(group, name)

    def read() -> int | None:
        try:
            data, _ = zk.kazoo.get(path)
        except NoNodeError:
            return None
        return RestConsumerInstanceZNode.decode(data)

    found = zk.retrying(read)
    if found is None:
        zk.sync(path)
        found = zk.retrying(read)
    return found


def unregister_instance(zk: ZkClient, group: str, name: str, broker_id: int) -> None:
    path = RestConsumerInstanceZNode.path(group, name)

    def attempt() -> None:
        with contextlib.suppress(NoNodeError, BadVersionError):
            data, stat = zk.kazoo.get(path)
            if RestConsumerInstanceZNode.decode(data) == broker_id:
                zk.kazoo.delete(path, version=stat.version)

    zk.retrying(attempt)
