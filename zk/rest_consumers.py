"""Where a client-named REST consumer instance lives: ``/rest_consumers/<group>/<name>`` holds its broker's id.

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

ROOT = "/rest_consumers"


def _path(group: str, name: str) -> str:
    return f"{ROOT}/{group}/{name}"


def register_instance(zk: ZkClient, group: str, name: str, broker_id: int) -> None:
    data = str(broker_id).encode()

    def attempt() -> None:
        try:
            zk.kazoo.create(_path(group, name), data, ephemeral=True, makepath=True)
        except NodeExistsError:
            zk.kazoo.set(_path(group, name), data)

    zk.retrying(attempt)


def instance_holder(zk: ZkClient, group: str, name: str) -> int | None:
    try:
        data, _ = zk.retrying(zk.kazoo.get, _path(group, name))
    except NoNodeError:
        return None
    try:
        return int(data.decode())
    except ValueError:
        return None


def unregister_instance(zk: ZkClient, group: str, name: str, broker_id: int) -> None:
    def attempt() -> None:
        with contextlib.suppress(NoNodeError, BadVersionError):
            data, stat = zk.kazoo.get(_path(group, name))
            if data == str(broker_id).encode():
                zk.kazoo.delete(_path(group, name), version=stat.version)

    zk.retrying(attempt)
