"""The coordinator claim (zk/coordinators.py) over an in-memory kazoo, run through the real retry policy.

Both stores use it: the group coordinator's znode and the transaction coordinator's differ only in their paths.
Real ZooKeeper runs it in tests/integration/test_groups.py and test_transactions.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson
import pytest
from kazoo.exceptions import BadVersionError, ConnectionLoss, NodeExistsError, NoNodeError

from odradek.protocol.errors import CoordinationUnavailableError
from zk import coordinators
from zk.client import ZkClient
from zk.groups import GroupStore
from zk.retry import ZkRetry
from zk.transactions import TxnStore
from zk.znodes import (
    ConsumerGroupCoordinatorZNode,
    ConsumerGroupZNode,
    CoordinatorZNode,
    TransactionCoordinatorZNode,
)


@dataclass
class Stat:
    version: int


class FakeKazoo:
    """The few kazoo calls the claim makes: nodes with data and a version, one-shot watches, injected failures."""

    def __init__(self) -> None:
        self.nodes: dict[str, tuple[bytes, int]] = {}
        self.ephemeral: set[str] = set()
        self.watches: dict[str, list[Callable[[Any], None]]] = {}
        self.fail: dict[str, list[BaseException]] = {}  # call name -> errors to raise, first first
        self.after: dict[str, Callable[[], None]] = {}  # call name -> what happens just before it (a race)

    def _enter(self, call: str) -> None:
        if call in self.after:
            self.after.pop(call)()
        if self.fail.get(call):
            raise self.fail[call].pop(0)

    def _fire(self, path: str) -> None:
        for fire in self.watches.pop(path, []):
            fire(None)

    def ensure_path(self, path: str) -> None:
        self._enter("ensure_path")
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.nodes.setdefault("/" + "/".join(parts[:i]), (b"", 0))

    def create(self, path: str, value: bytes, ephemeral: bool = False) -> str:
        self._enter("create")
        if path in self.nodes:
            raise NodeExistsError()
        if path.rsplit("/", 1)[0] not in self.nodes:
            raise NoNodeError()
        self.nodes[path] = (value, 0)
        if ephemeral:
            self.ephemeral.add(path)
        self._fire(path)
        return path

    def get(self, path: str, watch: Callable[[Any], None] | None = None) -> tuple[bytes, Stat]:
        self._enter("get")
        if path not in self.nodes:
            raise NoNodeError()
        if watch is not None:
            self.watches.setdefault(path, []).append(watch)
        data, version = self.nodes[path]
        return data, Stat(version)

    def exists(self, path: str, watch: Callable[[Any], None] | None = None) -> Stat | None:
        self._enter("exists")
        if watch is not None:
            self.watches.setdefault(path, []).append(watch)
        return Stat(self.nodes[path][1]) if path in self.nodes else None

    def set(self, path: str, value: bytes) -> None:
        _, version = self.nodes[path]
        self.nodes[path] = (value, version + 1)
        self._fire(path)

    def delete(self, path: str, version: int = -1) -> None:
        self._enter("delete")
        if path not in self.nodes:
            raise NoNodeError()
        if version != -1 and self.nodes[path][1] != version:
            raise BadVersionError()
        del self.nodes[path]
        self.ephemeral.discard(path)
        self._fire(path)

    def expire(self, path: str) -> None:
        """The holder's session ended: its ephemeral node goes."""
        self.delete(path)


class FakeZkClient:
    """What zk/coordinators.py uses of ZkClient: ``kazoo``, ``retrying`` (the real ZkRetry) and ``_arm``."""

    _arm = staticmethod(ZkClient._arm)

    def __init__(self) -> None:
        self.kazoo = FakeKazoo()
        connected = threading.Event()
        connected.set()
        self.retrying = ZkRetry(lambda: True, connected, deadline_s=0.5, delay_s=0.001, max_delay_s=0.01)


GROUP_PATH = ConsumerGroupCoordinatorZNode.path("g")


@pytest.fixture
def zk() -> Any:
    return FakeZkClient()


def client(zk: FakeZkClient) -> ZkClient:
    return cast(ZkClient, zk)


def test_the_first_claim_wins_and_every_claim_names_the_holder(zk: FakeZkClient) -> None:
    parent = ConsumerGroupZNode.path("g")
    assert coordinators.get(client(zk), GROUP_PATH) is None
    assert coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=2, epoch=7) == 2
    assert coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=3, epoch=9) == 2
    assert coordinators.get(client(zk), GROUP_PATH) == 2
    assert GROUP_PATH in zk.kazoo.ephemeral and parent in zk.kazoo.nodes
    assert orjson.loads(zk.kazoo.nodes[GROUP_PATH][0]) == {"version": 1, "broker_id": 2, "epoch": 7}
    zk.kazoo.expire(GROUP_PATH)
    assert coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=3, epoch=9) == 3


def test_a_holder_gone_between_our_create_and_our_read_asks_the_caller_to_retry(zk: FakeZkClient) -> None:
    parent = ConsumerGroupZNode.path("g")
    coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=1, epoch=1)
    zk.kazoo.after["get"] = lambda: zk.kazoo.expire(GROUP_PATH)
    assert coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=2, epoch=1) == -1


def test_a_connection_loss_is_retried_and_a_create_that_went_through_reads_as_ours(zk: FakeZkClient) -> None:
    parent = ConsumerGroupZNode.path("g")
    # the create reached ZooKeeper but its answer was lost: the retry meets our own node
    zk.kazoo.after["create"] = lambda: zk.kazoo.nodes.update({GROUP_PATH: (CoordinatorZNode.encode(4, 1), 0)})
    zk.kazoo.fail["ensure_path"] = [ConnectionLoss()]
    zk.kazoo.fail["create"] = [ConnectionLoss()]
    assert coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=4, epoch=1) == 4


def test_a_zookeeper_that_stays_away_is_coordination_unavailable(zk: FakeZkClient) -> None:
    zk.kazoo.fail["get"] = [ConnectionLoss()] * 10_000
    with pytest.raises(CoordinationUnavailableError):
        coordinators.get(client(zk), GROUP_PATH)


def test_release_deletes_only_our_own_claim(zk: FakeZkClient) -> None:
    parent = ConsumerGroupZNode.path("g")
    coordinators.release(client(zk), GROUP_PATH, broker_id=1)  # nobody holds it: a no-op
    coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=1, epoch=1)
    coordinators.release(client(zk), GROUP_PATH, broker_id=2)
    assert coordinators.get(client(zk), GROUP_PATH) == 1
    zk.kazoo.after["delete"] = lambda: zk.kazoo.set(GROUP_PATH, zk.kazoo.nodes[GROUP_PATH][0])
    coordinators.release(client(zk), GROUP_PATH, broker_id=1)  # changed since read: not ours to delete
    assert coordinators.get(client(zk), GROUP_PATH) == 1
    coordinators.release(client(zk), GROUP_PATH, broker_id=1)
    assert coordinators.get(client(zk), GROUP_PATH) is None


def test_a_watch_fires_on_the_next_claim_or_release(zk: FakeZkClient) -> None:
    parent = ConsumerGroupZNode.path("g")
    fired: list[str] = []
    assert coordinators.get(client(zk), GROUP_PATH, watch=lambda: fired.append("claimed")) is None
    coordinators.claim(client(zk), parent, GROUP_PATH, broker_id=1, epoch=1)
    assert fired == ["claimed"]
    assert coordinators.get(client(zk), GROUP_PATH, watch=lambda: fired.append("released")) == 1
    coordinators.release(client(zk), GROUP_PATH, broker_id=1)
    assert fired == ["claimed", "released"]


def test_both_stores_claim_through_the_one_verb_at_their_own_paths(zk: FakeZkClient) -> None:
    groups, txns = GroupStore(client(zk)), TxnStore(client(zk))
    assert groups.claim_coordinator("g", 1, 5) == 1 and txns.claim_coordinator("a/b", 2, 6) == 2
    assert groups.get_coordinator("g") == 1 and txns.get_coordinator("a/b") == 2
    assert set(zk.kazoo.ephemeral) == {"/consumers/g/coordinator", "/transactions/a%2Fb/coordinator"}
    assert zk.kazoo.nodes["/transactions/a%2Fb"] == (b"", 0)  # the id's state node, still empty (no state yet)
    assert TxnStore(client(zk)).get_state("a/b") == (None, 0)
    assert groups.claim_coordinator("g", 2, 5) == 1 and txns.claim_coordinator("a/b", 1, 6) == 2
    groups.release_coordinator("g", 1)
    txns.release_coordinator("a/b", 2)
    assert groups.get_coordinator("g") is None and txns.get_coordinator("a/b") is None
    assert TransactionCoordinatorZNode.path("a/b") not in zk.kazoo.nodes
