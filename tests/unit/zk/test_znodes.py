"""Znode codecs keep Kafka's shapes byte-compatible enough for Kafka's own readers."""

from __future__ import annotations

import orjson

from zk import znodes as z


def test_paths_follow_kafkas_layout() -> None:
    assert z.BrokerIdZNode.path(3) == "/brokers/ids/3"
    assert z.TopicZNode.path("t") == "/brokers/topics/t"
    assert z.TopicPartitionStateZNode.path("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert z.ConfigEntityZNode.path("topics", "t") == "/config/topics/t"
    assert z.ConfigEntityZNode.user_client_path("alice", "app1") == "/config/users/alice/clients/app1"
    assert z.ConfigEntityZNode.user_client_path("<default>") == "/config/users/<default>/clients"
    assert z.DeleteTopicZNode.path("t") == "/admin/delete_topics/t"
    assert z.ConsumerOffsetZNode.path("g", "t", 1) == "/consumers/g/offsets/t/1"
    assert z.ControllerZNode.path == "/controller" and z.ControllerEpochZNode.path == "/controller_epoch"
    assert z.ClusterIdZNode.path == "/cluster/id"
    # parents come before children so they can be created in order
    for i, path in enumerate(z.PERSISTENT_PATHS):
        parent = path.rsplit("/", 1)[0]
        assert parent == "" or parent not in z.PERSISTENT_PATHS[i:]


def test_kafka_json_quirks() -> None:
    controller = orjson.loads(z.ControllerZNode.encode(4))
    assert controller["brokerid"] == 4 and controller["version"] == 1 and isinstance(controller["timestamp"], str)
    assert z.ControllerEpochZNode.encode(12) == b"12"
    assert z.ControllerEpochZNode.decode(b"12") == 12
    cluster = orjson.loads(z.ClusterIdZNode.encode("abc"))
    assert cluster == {"version": "1", "id": "abc"}


def test_broker_registration_round_trip() -> None:
    info = z.BrokerInfo(7, "127.0.0.1", 9093, rack="r1", timestamp_ms=1600000000000)
    raw = orjson.loads(z.BrokerIdZNode.encode(info))
    assert raw["endpoints"] == ["HTTP://127.0.0.1:9093"] and raw["timestamp"] == "1600000000000"
    assert raw["rack"] == "r1" and raw["jmx_port"] == -1
    back = z.BrokerIdZNode.decode(7, z.BrokerIdZNode.encode(info), czxid=99)
    assert back == z.BrokerInfo(7, "127.0.0.1", 9093, "r1", 1600000000000, epoch=99)
    assert back.url == "http://127.0.0.1:9093"


def test_topic_assignment_and_state_round_trip() -> None:
    a = z.TopicAssignment({1: [2, 3], 0: [1, 2]}, topic_id="tid")
    raw = orjson.loads(z.TopicZNode.encode(a))
    assert raw["partitions"] == {"0": [1, 2], "1": [2, 3]} and raw["adding_replicas"] == {}
    assert z.TopicZNode.decode(z.TopicZNode.encode(a)) == a
    # older writers omit the optional fields
    assert z.TopicZNode.decode(b'{"version":1,"partitions":{"0":[1]}}') == z.TopicAssignment({0: [1]})
    state = z.LeaderAndIsr(leader=2, leader_epoch=13, isr=[2, 3], controller_epoch=7)
    assert orjson.loads(z.TopicPartitionStateZNode.encode(state)) == {
        "controller_epoch": 7, "leader": 2, "version": 1, "leader_epoch": 13, "isr": [2, 3]
    }
    assert z.TopicPartitionStateZNode.decode(z.TopicPartitionStateZNode.encode(state)) == state


def test_admin_and_config_round_trips() -> None:
    tp = z.TopicPartition("t", 1)
    assert z.ReassignPartitionsZNode.decode(z.ReassignPartitionsZNode.encode({tp: [4, 5]})) == {tp: [4, 5]}
    assert z.PreferredReplicaElectionZNode.decode(z.PreferredReplicaElectionZNode.encode([tp])) == [tp]
    assert z.ConfigEntityZNode.decode(z.ConfigEntityZNode.encode({"retention.ms": "1000"})) == {
        "retention.ms": "1000"
    }
    assert orjson.loads(z.ConfigChangesZNode.encode("topics", "t")) == {"version": 2, "entity_path": "topics/t"}
    assert z.ConsumerOffsetZNode.decode(z.ConsumerOffsetZNode.encode(42)) == 42


def test_both_coordinator_znodes_share_one_codec_and_keep_their_paths_and_bytes() -> None:
    assert z.ConsumerGroupCoordinatorZNode.path("g") == "/consumers/g/coordinator"
    assert z.TransactionCoordinatorZNode.path("a/b") == "/transactions/a%2Fb/coordinator"
    for kind in (z.ConsumerGroupCoordinatorZNode, z.TransactionCoordinatorZNode):
        assert kind.encode is z.CoordinatorZNode.encode and kind.decode is z.CoordinatorZNode.decode
    assert z.CoordinatorZNode.encode(3, 17) == b'{"version":1,"broker_id":3,"epoch":17}'
    # what either kind of coordinator wrote before still reads the same
    assert z.CoordinatorZNode.decode(b'{"version":1,"broker_id":3,"epoch":17}') == (3, 17)
    assert z.CoordinatorZNode.decode(b'{"broker_id":"2","epoch":"5","version":1}') == (2, 5)
    assert z.CoordinatorZNode.decode(b'{"version":1,"broker_id":2}') == (2, -1)
