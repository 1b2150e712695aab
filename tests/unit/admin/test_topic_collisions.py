"""Colliding topic names ('.' against '_', issue 24 point 6): the rule, the claim znode, and ZkClient's topic
creation and deletion over an in-memory kazoo whose multi is atomic as ZooKeeper's is; and the admin requests
that follow one made through another broker, over a second broker's ZooKeeper server that lags the leader until
it is synced (``LaggingKazoo``).

Real ZooKeeper and three brokers racing over HTTP and Kafka's protocol: tests/integration/test_topic_collisions.py.
"""

from __future__ import annotations

import re

import pytest

from broker.admin.reassignment import ReassignmentAdmin
from broker.admin.topics import TopicAdmin, colliding_topics, new_topic_id
from broker.metadata.cache import MetadataCache
from odradek.protocol.errors import InvalidTopicError, TopicAlreadyExistsError
from odradek.protocol.model import TopicAssignment, TopicPartition
from tests.unit.fakes.kazoo import FakeKazoo, LaggingKazoo, fake_client
from zk.client import ControllerClaim
from zk.znodes import (
    PERSISTENT_PATHS,
    ConfigEntityZNode,
    DeleteTopicZNode,
    TopicNameClaimsZNode,
    TopicNameClaimZNode,
    TopicsZNode,
    TopicZNode,
)

# ------------------------------------------------------------------------------------------------ the rule


def test_names_collide_when_they_differ_only_in_dot_against_underscore() -> None:
    assert TopicNameClaimZNode.key("a.b") == TopicNameClaimZNode.key("a_b") == "a_b"
    assert colliding_topics("a_b", ["a.b", "a-b", "ab", "a_b", "x"]) == ["a.b"]
    assert colliding_topics("a.b_c", ["a_b.c", "a_b_c", "a.b.c", "a.b_c"]) == ["a_b.c", "a_b_c", "a.b.c"]
    assert colliding_topics("plain", ["plain", "pla.in"]) == []


def test_the_claim_znode_is_keyed_by_the_collision_key_and_names_its_holder() -> None:
    assert TopicNameClaimZNode.path("a.b") == TopicNameClaimZNode.path("a_b") == "/topic_name_claims/a_b"
    assert TopicNameClaimsZNode.path in PERSISTENT_PATHS
    assert TopicNameClaimZNode.encode("a.b") == b'{"version":1,"topic":"a.b"}'
    assert TopicNameClaimZNode.decode(TopicNameClaimZNode.encode("a.b")) == "a.b"
    for foreign in (b"", None, b"junk", b"[]", b'{"version":1}', b'{"topic":""}'):
        assert TopicNameClaimZNode.decode(foreign) is None


CLAIM = ControllerClaim(broker_id=1, epoch=1, epoch_zk_version=0)


def assignment() -> TopicAssignment:
    return TopicAssignment({0: [1]}, topic_id=new_topic_id())


def collides(topic: str, existing: str) -> str:
    """Kafka's message, as a pattern for ``pytest.raises``."""
    return f"^{re.escape(f'Topic {topic!r} collides with existing topics: {existing}')}$"


def holder(kazoo: FakeKazoo, topic: str) -> str | None:
    got = kazoo.nodes.get(TopicNameClaimZNode.path(topic))
    return None if got is None else TopicNameClaimZNode.decode(got[0])


# ---------------------------------------------------------------------------------------- create and delete


def test_the_claim_is_created_in_the_topics_own_multi_and_refuses_a_collider() -> None:
    zk, kazoo = fake_client()
    zk.create_topic("a.b", assignment(), {"retention.ms": "1000"})
    assert kazoo.commits == [["create", "create", "create"]]  # config, assignment and claim: one multi
    assert holder(kazoo, "a_b") == "a.b"
    with pytest.raises(InvalidTopicError, match=collides("a_b", "a.b")) as info:
        zk.create_topic("a_b", assignment(), {})
    assert info.value.kafka_code == 17
    assert TopicZNode.path("a_b") not in kazoo.nodes and ConfigEntityZNode.path("topics", "a_b") not in kazoo.nodes
    with pytest.raises(TopicAlreadyExistsError):
        zk.create_topic("a.b", assignment(), {})


def test_a_collider_created_after_our_read_check_still_loses_on_the_claim() -> None:
    """The race of issue 24: TopicAdmin reads the topics (no collider yet), another broker then creates one, and
    our multi fails on its claim."""
    zk, kazoo = fake_client()
    other, _ = fake_client(kazoo)  # another broker
    kazoo.before_commit.append(lambda: other.create_topic("race.1", assignment(), {}))
    with pytest.raises(InvalidTopicError, match=collides("race_1", "race.1")):
        TopicAdmin(zk).create_topic("race_1", 1, 1)
    assert zk.get_topics() == ["race.1"] and holder(kazoo, "race_1") == "race.1"


def test_a_creation_after_a_deletion_through_another_broker_sees_it_whatever_its_server_has_applied() -> None:
    """The controller deletes race.8 through its own ZooKeeper server; a creation of race_8 then comes to a broker
    whose server has not applied that deletion yet (the integration test met this: the DELETE had answered 204).
    The creation's checks read after a ``sync``, so they see the deletion: race_8 is created, not refused as a
    collider of a topic that no longer exists."""
    controller, leader = fake_client()
    controller.create_topic("race.8", assignment(), {})
    follower = LaggingKazoo(leader)  # broker 2's server: it has applied the creation
    broker2, _ = fake_client(follower)
    controller.mark_topic_for_deletion("race.8")
    controller.delete_topic_znodes(CLAIM, "race.8")
    assert broker2.get_topics() == ["race.8"]  # a plain read still sees it on that server
    TopicAdmin(broker2).create_topic("race_8", 1, 1)
    assert controller.get_topics() == ["race_8"] and holder(leader, "race_8") == "race_8"
    assert TopicsZNode.path in follower.syncs


def test_a_fresh_lookup_finds_a_topic_another_broker_just_created() -> None:
    """What a produce to a topic this broker has not heard of asks (broker/produce/routing.py): whether ZooKeeper
    knows it, which a lagging server would deny."""
    creator, leader = fake_client()
    follower = LaggingKazoo(leader)
    broker2, _ = fake_client(follower)
    creator.create_topic("fresh.t", assignment(), {})
    assert broker2.get_topic_assignment("fresh.t") is None  # the follower has not applied the creation
    found = broker2.get_topic_assignment("fresh.t", fresh=True)
    assert found is not None and found == creator.get_topic_assignment("fresh.t")


def test_admin_requests_after_one_through_another_broker_see_it() -> None:
    """Create through broker 1, then describe, alter, grow and delete through broker 2, whose server has applied
    nothing since: each finds the topic, and an alteration there keeps the one made through broker 1 (a stale
    read-modify-write would have dropped it)."""
    one, leader = fake_client()
    follower = LaggingKazoo(leader)
    two, _ = fake_client(follower)
    admin1, admin2 = TopicAdmin(one), TopicAdmin(two)
    admin1.create_topic("late.t", 1, 1)
    assert admin2.describe_configs("late.t")[0] == {}
    admin1.alter_configs("late.t", {"retention.ms": "1000"}, [])
    assert two.get_topic_config("late.t") == {}  # not applied on broker 2's server
    admin2.alter_configs("late.t", {"cleanup.policy": "compact"}, [])
    assert one.get_topic_config("late.t") == {"retention.ms": "1000", "cleanup.policy": "compact"}
    admin1.add_partitions("late.t", 2)
    assert len(admin2.add_partitions("late.t", 3).partitions) == 3  # grown from 2, as broker 1 left it
    admin2.delete_topic("late.t")
    assert one.get_topics_to_delete() == ["late.t"]


def test_a_cancel_through_a_lagging_server_sees_the_move_just_requested_elsewhere() -> None:
    """A reassignment requested through broker 1 and cancelled through broker 2 at once: the cancel finds the move
    and reverts it to the original replicas."""
    one, leader = fake_client()
    follower = LaggingKazoo(leader)
    two, _ = fake_client(follower)
    one.create_topic("mv", TopicAssignment({0: [1]}, topic_id=new_topic_id()), {})
    tp = TopicPartition("mv", 0)
    assert one.request_reassignment({tp: [2]})
    assert two.get_reassignment() is None  # not applied on broker 2's server
    cancelled = ReassignmentAdmin(two, MetadataCache()).cancel()
    assert cancelled.cancelled == [tp] and one.get_reassignment() == {tp: [1]}


def test_a_retried_multi_that_had_succeeded_is_ours() -> None:
    zk, _ = fake_client()
    mine = assignment()
    zk.create_topic("a.b", mine, {})
    zk.create_topic("a.b", mine, {})  # as a retry after a lost answer would: the config's NodeExists, our id
    assert zk.get_topics() == ["a.b"]


def test_deletion_removes_the_claim_in_the_same_multi_and_the_other_name_can_then_be_created() -> None:
    zk, kazoo = fake_client()
    zk.create_topic("a.b", assignment(), {})
    zk.mark_topic_for_deletion("a.b")
    zk.delete_topic_znodes(CLAIM, "a.b")
    assert kazoo.commits[-1] == ["check", "delete", "delete", "delete", "delete"]  # topic, claim, config, marker
    assert holder(kazoo, "a.b") is None and DeleteTopicZNode.path("a.b") not in kazoo.nodes
    zk.create_topic("a_b", assignment(), {})
    assert holder(kazoo, "a.b") == "a_b"
    with pytest.raises(InvalidTopicError, match=collides("a.b", "a_b")):
        zk.create_topic("a.b", assignment(), {})


def test_a_topic_without_a_claim_is_deleted_and_a_claim_held_by_another_name_stays() -> None:
    """Topics created before the claims have none, and two colliders from then may both exist: deleting one
    removes only a claim that names it."""
    zk, kazoo = fake_client()
    kazoo.nodes[TopicZNode.path("old.t")] = (TopicZNode.encode(assignment()), 0)
    zk.delete_topic_znodes(CLAIM, "old.t")  # no claim to delete
    assert kazoo.commits[-1] == ["check", "delete"] and zk.get_topics() == []

    kazoo.nodes[TopicZNode.path("old.t")] = (TopicZNode.encode(assignment()), 0)
    kazoo.nodes[TopicZNode.path("old_t")] = (TopicZNode.encode(assignment()), 0)
    kazoo.nodes[TopicNameClaimZNode.path("old_t")] = (TopicNameClaimZNode.encode("old_t"), 0)
    zk.delete_topic_znodes(CLAIM, "old.t")  # the claim is old_t's: it stays
    assert holder(kazoo, "old.t") == "old_t" and zk.get_topics() == ["old_t"]
    zk.delete_topic_znodes(CLAIM, "old_t")
    assert holder(kazoo, "old.t") is None and zk.get_topics() == []


def test_the_read_check_refuses_a_collider_of_an_unclaimed_topic() -> None:
    zk, kazoo = fake_client()
    kazoo.nodes[TopicZNode.path("legacy.t")] = (TopicZNode.encode(assignment()), 0)  # no claim: from before
    with pytest.raises(InvalidTopicError, match=collides("legacy_t", "legacy.t")):
        TopicAdmin(zk).create_topic("legacy_t", 1, 1)
    assert holder(kazoo, "legacy_t") is None


def test_a_stale_claim_is_taken_over_once() -> None:
    """A claim whose holder has no topic (removed by hand, or by an older controller) does not block the name;
    of two takers racing for it, the second sees the first's topic and collides with it."""
    zk, kazoo = fake_client()
    stale = TopicNameClaimZNode.path("gone.t")
    kazoo.nodes[stale] = (TopicNameClaimZNode.encode("gone.t"), 3)
    zk.create_topic("gone.t", assignment(), {})  # its own name's stale claim
    assert holder(kazoo, "gone.t") == "gone.t" and kazoo.nodes[stale][1] == 4

    del kazoo.nodes[TopicZNode.path("gone.t")]
    del kazoo.nodes[ConfigEntityZNode.path("topics", "gone.t")]
    other, _ = fake_client(kazoo)
    # We read the stale claim, then the other broker takes it over before our takeover commits.
    kazoo.before_commit.append(lambda: kazoo.before_commit.append(
        lambda: other.create_topic("gone_t", assignment(), {})))
    with pytest.raises(InvalidTopicError, match=collides("gone.t", "gone_t")):
        zk.create_topic("gone.t", assignment(), {})
    assert holder(kazoo, "gone.t") == "gone_t" and zk.get_topics() == ["gone_t"]


def test_a_cluster_without_the_claims_parent_gets_it_on_first_use() -> None:
    zk, kazoo = fake_client(with_claims_parent=False)
    zk.create_topic("a.b", assignment(), {})
    assert TopicNameClaimsZNode.path in kazoo.nodes and holder(kazoo, "a.b") == "a.b"
