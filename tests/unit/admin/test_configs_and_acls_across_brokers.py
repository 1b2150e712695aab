"""Entity configs (quotas, SCRAM credentials, broker configs) and ACLs changed through one broker, then read or
changed through another whose ZooKeeper server has not applied the change yet (``LaggingKazoo``: a follower's copy
that catches up only on ``sync``). An admin read must see the change; a conditional write must merge with it,
not spin on the stale version or refuse a key it cannot see.

Real ZooKeeper: tests/integration/test_quotas.py, test_security.py and test_kafka_admin.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.admin.acls import AclAdmin, AclBinding, AclFilter
from broker.admin.client_quotas import ClientQuotaAdmin, QuotaOp
from broker.admin.entity_configs import EntityConfigAdmin
from tests.unit.fakes.kazoo import LaggingKazoo, fake_client
from zk.acls import AclEntry, AclStore
from zk.configs import EntityConfigs


def lagging_broker() -> tuple[Any, Any, LaggingKazoo]:
    """Broker 1's client on the ZooKeeper leader, broker 2's on a follower that has applied nothing since."""
    one, leader = fake_client()
    follower = LaggingKazoo(leader)
    two, _ = fake_client(follower)
    return one, two, follower


def bounded(follower: LaggingKazoo, reads: int = 20) -> None:
    """Fail instead of spinning: a write that re-reads a copy that never catches up would loop for ever."""
    plain_get = follower.get
    count = [0]

    def get(path: str, watch: Any = None) -> Any:
        count[0] += 1
        assert count[0] <= reads, f"{reads} reads of {path} on a copy that never catches up"
        return plain_get(path, watch)

    follower.get = get  # type: ignore[method-assign]


def test_a_quota_set_through_one_broker_is_described_and_removed_through_another() -> None:
    one, two, _ = lagging_broker()
    EntityConfigAdmin(one).alter("clients", "app", {"producer_byte_rate": "1024"}, [])
    assert EntityConfigs(two).describe("clients", "app") == {}  # a plain read of broker 2's server: not there yet
    admin2 = EntityConfigAdmin(two)
    assert admin2.describe("clients", "app") == {"producer_byte_rate": "1024"}
    assert admin2.list_entities("clients") == {"app": {"producer_byte_rate": "1024"}}
    remove = [(("client-id", "app"),), [QuotaOp("producer_byte_rate", 0.0, remove=True)]]
    assert asyncio.run(ClientQuotaAdmin(admin2).alter([remove])) == [None]  # type: ignore[list-item]
    assert EntityConfigs(one).describe("clients", "app") == {}  # removed, not silently kept


def test_a_key_set_through_one_broker_can_be_deleted_through_another_and_both_changes_merge() -> None:
    one, two, follower = lagging_broker()
    bounded(follower)
    EntityConfigs(one).alter("users", "alice", {"producer_byte_rate": "1024"}, [])
    EntityConfigs(two).alter("users", "alice", {"consumer_byte_rate": "2048"}, ["producer_byte_rate"])
    assert EntityConfigs(one).describe("users", "alice") == {"consumer_byte_rate": "2048"}
    EntityConfigs(one).alter("users", "alice", {"request_percentage": "50"}, [])
    EntityConfigs(two).alter("users", "alice", {"producer_byte_rate": "10"}, [])
    assert EntityConfigs(one).describe("users", "alice") == {
        "consumer_byte_rate": "2048", "request_percentage": "50", "producer_byte_rate": "10"}


def test_acls_added_through_two_brokers_are_both_kept_and_listed_by_either() -> None:
    one, two, follower = lagging_broker()
    bounded(follower)
    alice = AclEntry("User:alice", "Allow", "Read", "*")
    bob = AclEntry("User:bob", "Allow", "Write", "*")
    AclStore(one).change("Topic", "orders", "LITERAL", add=[alice])
    assert AclStore(two).get("Topic", "orders") == set()  # broker 2's server has not applied it
    assert AclStore(two).change("Topic", "orders", "LITERAL", add=[bob]) == {alice, bob}
    carol = AclBinding("Topic", "orders", "LITERAL", "User:carol", "*", "Describe", "Allow")
    assert asyncio.run(AclAdmin(one).create([carol])) == [None]
    listed = asyncio.run(AclAdmin(two).describe(AclFilter(resource_type="Topic")))
    assert sorted(b.principal for b in listed) == ["User:alice", "User:bob", "User:carol"]
    assert AclStore(two).list_all(fresh=True) == AclStore(one).list_all()


@pytest.mark.parametrize("entity", ["brokers", "users"])
def test_entity_admin_reads_are_fresh_and_the_brokers_own_are_not(entity: str) -> None:
    """The brokers' own re-reads follow change notifications (no sync each); the admin's view syncs."""
    _, two, follower = lagging_broker()
    EntityConfigs(two).describe(entity, "<default>")
    assert follower.syncs == []
    EntityConfigAdmin(two).describe(entity, "<default>")
    assert len(follower.syncs) == 1
