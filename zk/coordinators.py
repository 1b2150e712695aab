"""The coordinator claim: one broker holds an ephemeral coordinator znode (CoordinatorZNode's JSON) for a consumer
group (zk/groups.py) or a transactional id (zk/transactions.py). The callers name the znode; zk/znodes.py
builds its path.

Why ephemeral: the znode belongs to the holder's ZooKeeper session, so a dead coordinator's claim goes with its
session and another broker's claim then succeeds. The create is the claim; a release deletes the znode only
while this broker holds it, conditionally on the version it read. Every kazoo call runs inside
``ZkClient.retrying`` (the one retry policy of zk/retry.py), so each function is safe to repeat.

Concurrency: blocking, thread-safe (kazoo is); asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zk.client import ZkClient
from zk.znodes import CoordinatorZNode


def claim(zk: ZkClient, parent: str, path: str, broker_id: int, epoch: int) -> int:
    """Create the ephemeral ``path`` (under ``parent``, created if missing) if nobody holds it; the holder's
    broker id, -1 when the holder released it between our create and our read (the caller asks again)."""

    def attempt() -> int:
        zk.kazoo.ensure_path(parent)
        try:
            zk.kazoo.create(path, CoordinatorZNode.encode(broker_id, epoch), ephemeral=True)
            return broker_id
        except NodeExistsError:
            try:
                data, _ = zk.kazoo.get(path)
            except NoNodeError:
                return -1
            return CoordinatorZNode.decode(data)[0]

    return int(zk.retrying(attempt))


def get(zk: ZkClient, path: str, watch: Callable[[], None] | None = None) -> int | None:
    """The holder's broker id, None if nobody holds ``path``. ``watch`` fires once on the next change,
    including the znode's creation when nobody holds it."""

    def read() -> int | None:
        try:
            data, _ = zk.kazoo.get(path, watch=zk._arm(watch))
        except NoNodeError:
            if watch is not None:
                zk.kazoo.exists(path, watch=zk._arm(watch))
            return None
        return CoordinatorZNode.decode(data)[0]

    result = zk.retrying(read)
    return None if result is None else int(result)


def release(zk: ZkClient, path: str, broker_id: int) -> None:
    """Delete ``path`` if ``broker_id`` holds it, never another broker's claim; a no-op if nobody does."""

    def delete() -> None:
        with contextlib.suppress(NoNodeError, BadVersionError):
            data, stat = zk.kazoo.get(path)
            if CoordinatorZNode.decode(data)[0] == broker_id:
                zk.kazoo.delete(path, version=stat.version)

    zk.retrying(delete)
