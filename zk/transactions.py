"""Transaction-coordinator verbs over ZooKeeper: the coordinator claim (zk/coordinators.py) and the state of each
transactional id.

Why ZooKeeper (docs/transactions.md): the cluster's coordination already lives there, a transactional id's
state is small and written a few times per transaction, and a write conditional on the znode's version fences
a deposed coordinator for free. Every kazoo call runs inside ``zk.retrying``.

Concurrency: blocking, thread-safe (kazoo is); asyncio callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from zk import coordinators
from zk.client import ZkClient
from zk.znodes import TransactionCoordinatorZNode, TransactionsZNode, TransactionZNode


class StaleTxnStateError(Exception):
    """The state changed since it was read (another coordinator wrote it): re-read and decide again."""


class TxnStore:
    def __init__(self, zk: ZkClient) -> None:
        self._zk = zk

    @property
    def _k(self) -> Any:
        return self._zk.kazoo

    def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._zk.retrying(fn, *args)

    def claim_coordinator(self, tid: str, broker_id: int, epoch: int) -> int:
        """Create the ephemeral coordinator node if nobody holds it; the holder's broker id (-1: retry)."""
        return coordinators.claim(self._zk, TransactionZNode.path(tid), TransactionCoordinatorZNode.path(tid),
                                  broker_id, epoch)

    def get_coordinator(self, tid: str) -> int | None:
        return coordinators.get(self._zk, TransactionCoordinatorZNode.path(tid))

    def release_coordinator(self, tid: str, broker_id: int) -> None:
        coordinators.release(self._zk, TransactionCoordinatorZNode.path(tid), broker_id)

    def list_ids(self) -> list[str]:
        def ls() -> list[str]:
            try:
                return [TransactionZNode.name_of(c) for c in self._k.get_children(TransactionsZNode.path)]
            except NoNodeError:
                return []

        return list(self._run(ls))

    def get_state(self, tid: str, fresh: bool = False) -> tuple[dict[str, Any] | None, int]:
        """(state, zkVersion); (None, version) when the id has no state yet (-1: no node at all). ``fresh``: sync
        first, so the read sees every write the quorum committed before it (ZooKeeper's reads may lag otherwise)."""
        def get() -> tuple[dict[str, Any] | None, int]:
            if fresh:
                self._k.sync(TransactionZNode.path(tid))
            try:
                data, stat = self._k.get(TransactionZNode.path(tid))
            except NoNodeError:
                return None, -1
            return (TransactionZNode.decode(data) if data else None), stat.version

        state, version = self._run(get)
        return state, int(version)

    def set_state(self, tid: str, state: dict[str, Any], version: int) -> int:
        """Write conditionally on ``version`` (-1: create); the new version. StaleTxnStateError on a race."""
        path = TransactionZNode.path(tid)
        data = TransactionZNode.encode(state)

        def put() -> int:
            if version < 0:
                try:
                    self._k.create(path, data, makepath=True)
                    return 0
                except NodeExistsError:
                    raise StaleTxnStateError(tid) from None
            try:
                return int(self._k.set(path, data, version=version).version)
            except (BadVersionError, NoNodeError):
                raise StaleTxnStateError(tid) from None

        return int(self._run(put))

    def group_generation(self, group: str) -> int | None:
        """The group's current generation (its state znode), for fencing transactional offset commits."""
        from zk.groups import GroupStore

        state = GroupStore(self._zk).get_state(group)
        return None if state is None else int(state.get("generation", -1))
