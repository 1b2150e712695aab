"""Kafka's nested user+client quota entity end to end without ZooKeeper: the store (zk/configs.py) writes
``/config/users/<user>/clients/<client id>`` and its notification in one multi, lists it back, and the metadata
watcher puts it in the cache under the key broker/quotas.py looks it up by, so the quota manager applies it.

The ZooKeeper stand-in is a minimal in-memory kazoo (only the calls the store makes); real ZooKeeper is in
tests/integration/test_admin_scripts.py and test_quotas.py."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from broker.metadata.cache import MetadataCache, MetadataListener
from broker.metadata.watcher import MetadataWatcher
from broker.quotas import DEFAULT, PRODUCE, ClientQuotaManager, user_client_entity
from odradek.protocol.errors import InvalidConfigError, InvalidRequestError
from zk.configs import EntityConfigs


class _Result:
    def __init__(self, fn: Any, *args: Any) -> None:
        try:
            self._value, self._error = fn(*args), None
        except Exception as e:
            self._value, self._error = None, e

    def get(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._value


class FakeKazoo:
    """Nodes as path -> [data, version]; sequential children numbered per parent."""

    def __init__(self) -> None:
        self.nodes: dict[str, list[Any]] = {"/config": [b"", 0]}
        self.multis = 0

    def _children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError(path)
        return [p[len(path) + 1:] for p in self.nodes if p.startswith(path + "/") and "/" not in p[len(path) + 1:]]

    def get_children(self, path: str) -> list[str]:
        return self._children(path)

    def get_children_async(self, path: str) -> _Result:
        return _Result(self._children, path)

    def get(self, path: str) -> tuple[bytes, SimpleNamespace]:
        if path not in self.nodes:
            raise NoNodeError(path)
        data, version = self.nodes[path]
        return data, SimpleNamespace(version=version)

    def get_async(self, path: str) -> _Result:
        return _Result(self.get, path)

    def ensure_path(self, path: str) -> None:
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.nodes.setdefault("/" + "/".join(parts[:i]), [b"", 0])

    def transaction(self) -> FakeTransaction:
        return FakeTransaction(self)

    def sync(self, path: str) -> None:
        """One server, never behind (a lagging one: tests/unit/admin/test_configs_and_acls_across_brokers.py)."""


class FakeTransaction:
    def __init__(self, kazoo: FakeKazoo) -> None:
        self._k = kazoo
        self._ops: list[tuple[str, str, bytes, Any]] = []

    def create(self, path: str, data: bytes, sequence: bool = False) -> None:
        self._ops.append(("create", path, data, sequence))

    def set_data(self, path: str, data: bytes, version: int = -1) -> None:
        self._ops.append(("set", path, data, version))

    def commit(self) -> list[Any]:
        nodes = self._k.nodes
        for op, path, _data, arg in self._ops:  # all or nothing, as a ZooKeeper multi
            parent = path.rsplit("/", 1)[0]
            if op == "create" and (parent not in nodes or (not arg and path in nodes)):
                return [NoNodeError() if parent not in nodes else NodeExistsError()]
            if op == "set" and (path not in nodes or nodes[path][1] != arg):
                return [BadVersionError()]
        self._k.multis += 1
        results: list[Any] = []
        for op, path, data, arg in self._ops:
            if op == "create":
                name = f"{path}{len(self._k._children(path.rsplit('/', 1)[0])):010d}" if arg else path
                nodes[name] = [data, 0]
                results.append(name)
            else:
                nodes[path] = [data, nodes[path][1] + 1]
                results.append(SimpleNamespace(version=nodes[path][1]))
        return results


class FakeZk:
    """The two ZkClient members the store uses, and the one the watcher calls directly."""

    def __init__(self) -> None:
        self.kazoo = FakeKazoo()

    def retrying(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def get_config_changes(self, watch: Any = None) -> list[str]:
        return []


def notifications(k: FakeKazoo) -> list[dict[str, Any]]:
    return [orjson.loads(k.nodes[f"/config/changes/{n}"][0]) for n in sorted(k.get_children("/config/changes"))]


def test_the_store_writes_reads_and_lists_nested_entities_with_one_multi_each() -> None:
    zk = FakeZk()
    store = EntityConfigs(zk)  # type: ignore[arg-type]
    assert store.describe_user_client("alice", "app1") == {} and store.list_user_clients() == {}
    assert store.alter_user_client("alice", "app 1", {"producer_byte_rate": " 1024 "}, []) == {
        "producer_byte_rate": "1024"}
    store.alter_user_client(DEFAULT, DEFAULT, {"consumer_byte_rate": "10"}, [])
    store.alter_user_client("alice", "app 1", {"request_percentage": "50"}, ["producer_byte_rate"])
    store.alter("users", "alice", {"producer_byte_rate": "99"}, [])
    k = zk.kazoo
    assert k.multis == 4  # node and notification together, every time
    assert orjson.loads(k.nodes["/config/users/alice/clients/app%201"][0]) == {
        "version": 1, "config": {"request_percentage": "50"}}
    assert k.nodes["/config/users/alice/clients/app%201"][1] == 1  # created, then a conditional set
    assert [n["entity_path"] for n in notifications(k)] == [
        "users/alice/clients/app%201", "users/<default>/clients/<default>", "users/alice/clients/app%201",
        "users/alice"]
    assert store.describe_user_client("alice", "app 1") == {"request_percentage": "50"}
    assert store.list_user_clients() == {("<default>", "<default>"): {"consumer_byte_rate": "10"},
                                         ("alice", "app 1"): {"request_percentage": "50"}}
    # the nested parents do not disturb the single-level listing (the data-less <default> user is skipped)
    assert store.list_entities("users") == {"alice": {"producer_byte_rate": "99"}}
    # quotas only on the nested entity (SCRAM credentials are the user's), names and deletes checked
    with pytest.raises(InvalidConfigError, match="SCRAM-SHA-256"):
        store.alter_user_client("alice", "app1", {"SCRAM-SHA-256": "[password=x]"}, [])
    with pytest.raises(InvalidConfigError, match="producer_byte_rate"):
        store.alter_user_client("alice", "app 1", {}, ["producer_byte_rate"])
    with pytest.raises(InvalidRequestError):
        store.alter_user_client("alice", "", {"producer_byte_rate": "1"}, [])
    assert k.multis == 4


def test_a_lost_race_is_merged_again() -> None:
    zk = FakeZk()
    store = EntityConfigs(zk)  # type: ignore[arg-type]
    store.alter_user_client("bob", "c", {"producer_byte_rate": "1"}, [])
    real_get, raced = zk.kazoo.get, []

    def get(path: str) -> Any:  # another writer adds a key between our read and our multi
        got = real_get(path)
        if not raced and path.endswith("/clients/c"):
            raced.append(path)
            zk.kazoo.nodes[path] = [b'{"version":1,"config":{"producer_byte_rate":"1","consumer_byte_rate":"2"}}',
                                    got[1].version + 1]
        return got

    zk.kazoo.get = get  # type: ignore[method-assign]
    assert store.alter_user_client("bob", "c", {"request_percentage": "5"}, []) == {
        "producer_byte_rate": "1", "consumer_byte_rate": "2", "request_percentage": "5"}


def test_the_watcher_puts_nested_entities_under_the_quota_managers_key() -> None:
    zk = FakeZk()
    store = EntityConfigs(zk)  # type: ignore[arg-type]
    store.alter_user_client("alice", "app1", {"producer_byte_rate": "1024"}, [])
    store.alter("users", "alice", {"producer_byte_rate": "4096"}, [])
    store.alter("clients", "app1", {"producer_byte_rate": "8192"}, [])
    cache = MetadataCache()
    queue = SimpleNamespace(watcher=lambda event: lambda: None)
    watcher = MetadataWatcher(zk, queue, cache, MetadataListener())  # type: ignore[arg-type]
    asyncio.run(watcher._dynamic_configs())
    assert cache.dynamic[user_client_entity("alice", "app1")] == {"producer_byte_rate": "1024"}
    assert cache.dynamic[("users", "alice")] == {"producer_byte_rate": "4096"}
    quotas = ClientQuotaManager(cache)
    assert quotas.quota(PRODUCE, "app1", user="alice") == 1024  # the nested entity wins (KIP-55)
    assert quotas.quota(PRODUCE, "app2", user="alice") == 4096  # another client id of alice: her user quota
    assert quotas.quota(PRODUCE, "app1") == 8192  # no user: the client quota
