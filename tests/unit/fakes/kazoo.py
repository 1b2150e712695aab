"""An in-memory kazoo whose multi is atomic as ZooKeeper's is, and a second session on a ZooKeeper follower that
lags the leader until it syncs (``LaggingKazoo``): for unit tests of ZkClient's and the stores' conditional writes
and of the admin reads that must see a write just made through another broker.

Only what those callers use: get / exists / get_children, create (sequential too), set, delete, ensure_path,
sync, and a transaction of create / set_data / delete / check. Real ZooKeeper is in the integration tests.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError, RuntimeInconsistency

from odradek.protocol.model import BrokerInfo
from zk.client import ZkClient
from zk.retry import ZkRetry
from zk.znodes import PERSISTENT_PATHS, BrokerIdZNode, ControllerEpochZNode, TopicNameClaimsZNode

_SEQUENCE = itertools.count()


@dataclass
class Stat:
    version: int
    czxid: int = 1


class FakeTransaction:
    def __init__(self, kazoo: FakeKazoo) -> None:
        self._kazoo = kazoo
        self._ops: list[tuple[str, tuple[Any, ...]]] = []

    def create(self, path: str, value: bytes = b"", sequence: bool = False) -> None:
        self._ops.append(("create", (path, value, sequence)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self._ops.append(("set", (path, value, version)))

    def delete(self, path: str, version: int = -1) -> None:
        self._ops.append(("delete", (path, version)))

    def check(self, path: str, version: int) -> None:
        self._ops.append(("check", (path, version)))

    def commit(self) -> list[Any]:
        """All or nothing, answered as kazoo answers a failed multi: the failing op's error, RolledBackError
        before it and RuntimeInconsistency after it."""
        kazoo = self._kazoo
        for hook in kazoo.before_commit[:]:
            kazoo.before_commit.remove(hook)
            hook()
        nodes = dict(kazoo.nodes)
        results: list[Any] = []
        for op, args in self._ops:
            try:
                results.append(getattr(self, f"_{op}")(nodes, *args))
            except (NodeExistsError, NoNodeError, BadVersionError) as e:
                return [RolledBackError()] * len(results) + [e] + \
                    [RuntimeInconsistency()] * (len(self._ops) - len(results) - 1)
        kazoo.nodes = nodes
        kazoo.commits.append([op for op, _ in self._ops])
        return results

    @staticmethod
    def _create(nodes: dict[str, tuple[bytes, int]], path: str, value: bytes, sequence: bool) -> str:
        if sequence:  # ZooKeeper's counter is the parent's; any number greater than the siblings' will do here
            path = f"{path}{next(_SEQUENCE):010d}"
        if path in nodes:
            raise NodeExistsError()
        if path.rsplit("/", 1)[0] not in nodes:
            raise NoNodeError()
        nodes[path] = (value, 0)
        return path

    @staticmethod
    def _set(nodes: dict[str, tuple[bytes, int]], path: str, value: bytes, version: int) -> Stat:
        FakeTransaction._check(nodes, path, version)
        nodes[path] = (value, nodes[path][1] + 1)
        return Stat(nodes[path][1])

    @staticmethod
    def _delete(nodes: dict[str, tuple[bytes, int]], path: str, version: int) -> bool:
        FakeTransaction._check(nodes, path, version)
        if any(p.startswith(path + "/") for p in nodes):
            raise NoNodeError()  # (NotEmpty in ZooKeeper; no test here deletes a parent first)
        del nodes[path]
        return True

    @staticmethod
    def _check(nodes: dict[str, tuple[bytes, int]], path: str, version: int) -> bool:
        if path not in nodes:
            raise NoNodeError()
        if version != -1 and nodes[path][1] != version:
            raise BadVersionError()
        return True


class NodeReads:
    """kazoo's reads over the nodes a server has applied (``applied``)."""

    def applied(self) -> dict[str, tuple[bytes, int]]:
        raise NotImplementedError

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Stat]:
        nodes = self.applied()
        if path not in nodes:
            raise NoNodeError()
        data, version = nodes[path]
        return data, Stat(version)

    def exists(self, path: str, watch: Any = None) -> Stat | None:
        nodes = self.applied()
        return Stat(nodes[path][1]) if path in nodes else None

    def get_children(self, path: str, watch: Any = None) -> list[str]:
        nodes = self.applied()
        if path not in nodes:
            raise NoNodeError()
        return [p.rsplit("/", 1)[1] for p in nodes if p.rsplit("/", 1)[0] == path and p != path]


class FakeKazoo(NodeReads):
    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.before_commit: list[Callable[[], None]] = []  # what another broker does just before our next multi
        self.commits: list[list[str]] = []
        self.ensure_path("/")

    def ensure_path(self, path: str) -> None:
        parts = [p for p in path.split("/") if p]
        self.nodes.setdefault("", (b"", 0))
        for i in range(1, len(parts) + 1):
            self.nodes.setdefault("/" + "/".join(parts[:i]), (b"", 0))

    def applied(self) -> dict[str, tuple[bytes, int]]:
        return self.nodes

    def transaction(self) -> FakeTransaction:
        return FakeTransaction(self)

    def create(self, path: str, value: bytes = b"", makepath: bool = False, sequence: bool = False) -> str:
        if makepath:
            self.ensure_path(path.rsplit("/", 1)[0])
        tx = self.transaction()
        tx.create(path, value, sequence)
        result = tx.commit()[0]
        if isinstance(result, Exception):
            raise result
        return str(result)

    def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        tx = self.transaction()
        tx.set_data(path, value, version)
        result = tx.commit()[0]
        if isinstance(result, Exception):
            raise result
        return result  # type: ignore[no-any-return]

    def delete(self, path: str, version: int = -1) -> None:
        tx = self.transaction()
        tx.delete(path, version)
        result = tx.commit()[0]
        if isinstance(result, Exception):
            raise result

    def sync(self, path: str) -> None:
        """The leader's own copy is never behind."""


class LaggingKazoo(NodeReads):
    """Another broker's session on a ZooKeeper follower: its writes (multis) are the leader's to commit, but it
    reads the follower's copy, which has applied the commits up to some point and catches up with the leader
    only on ``sync`` (ZooKeeper's reads are not linearizable across sessions)."""

    def __init__(self, leader: FakeKazoo) -> None:
        self.leader = leader
        self.copy = dict(leader.nodes)  # what this follower has applied
        self.syncs: list[str] = []

    def applied(self) -> dict[str, tuple[bytes, int]]:
        return self.copy

    def sync(self, path: str) -> None:
        self.syncs.append(path)
        self.copy = dict(self.leader.nodes)

    def transaction(self) -> FakeTransaction:
        return self.leader.transaction()

    def ensure_path(self, path: str) -> None:
        self.leader.ensure_path(path)

    def create(self, path: str, value: bytes = b"", makepath: bool = False, sequence: bool = False) -> str:
        return self.leader.create(path, value, makepath, sequence)

    def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        return self.leader.set(path, value, version)


def fake_client(kazoo: Any = None, *, with_claims_parent: bool = True) -> tuple[ZkClient, FakeKazoo]:
    """A ZkClient over the fake (a new one, or ``kazoo``: another broker on the same ZooKeeper), through the real
    retry policy (only the connection is skipped)."""
    if kazoo is None:
        kazoo = FakeKazoo()
        for path in PERSISTENT_PATHS:
            if with_claims_parent or path != TopicNameClaimsZNode.path:
                kazoo.ensure_path(path)
        kazoo.nodes[ControllerEpochZNode.path] = (ControllerEpochZNode.encode(1), 0)
        kazoo.nodes[BrokerIdZNode.path(1)] = (BrokerIdZNode.encode(BrokerInfo(1, "127.0.0.1", 8082)), 0)
    client = ZkClient.__new__(ZkClient)
    client._kazoo = kazoo  # type: ignore[assignment]
    connected = threading.Event()
    connected.set()
    client._retry = ZkRetry(lambda: True, connected, deadline_s=0.5, delay_s=0.001, max_delay_s=0.01)
    return client, kazoo


