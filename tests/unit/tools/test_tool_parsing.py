"""Pure parsing and formatting of the admin tools: no cluster needed."""

from __future__ import annotations

import re

import pytest

from odradek.client.types import ConsumerRecord
from odradek.protocol.errors import InvalidConfigError, InvalidRequestError
from odradek_tools import common, configs, console_consumer, console_producer, consumer_groups, leader_election, topics
from odradek_tools.common import ToolError
from zk.configs import sanitize, validate_alter, validate_entity


def test_config_list_with_brackets_and_key_list() -> None:
    assert common.parse_config_list("a=1,b=[x,y,z],c=") == {"a": "1", "b": "x,y,z", "c": ""}
    with pytest.raises(ToolError, match="key=val"):
        common.parse_config_list("novalue")
    with pytest.raises(ToolError, match="Unbalanced"):
        common.parse_config_list("b=[x,y")
    assert common.parse_key_list(" a, b ,") == ["a", "b"]
    assert common.parse_properties(["k=v=w"], "--property") == {"k": "v=w"}
    with pytest.raises(ToolError):
        common.parse_properties(["k"], "--property")


def test_table_pads_like_kafka() -> None:
    lines = common.format_table(["GROUP", "LAG"], [["g", None], ["longer-group", 5]], [15, 0])
    assert lines == ["GROUP           LAG", "g               -", "longer-group    5"]


def test_election_json_file_shape() -> None:
    assert common.topic_partitions_from_json({"partitions": [{"topic": "t", "partition": 1}]}, "f") == [("t", 1)]
    for bad in ({}, {"partitions": [{"topic": "t"}]}, {"partitions": [{"topic": "t", "partition": True}]}):
        with pytest.raises(ToolError):
            common.topic_partitions_from_json(bad, "f")


def test_replica_assignment_rules() -> None:
    assert topics.parse_replica_assignment("1:2:3,2:3:1") == {0: [1, 2, 3], 1: [2, 3, 1]}
    with pytest.raises(ToolError, match="different replication factor"):
        topics.parse_replica_assignment("1:2,3")
    with pytest.raises(ToolError, match="duplicate"):
        topics.parse_replica_assignment("1:1")
    with pytest.raises(ToolError, match="integers"):
        topics.parse_replica_assignment("a:b")


def test_describe_lines_and_filters() -> None:
    p0 = topics.PartitionView(0, 1, (1, 2, 3), (1, 2, 3))
    p1 = topics.PartitionView(1, -1, (2, 3, 1), (2,))
    t = topics.TopicView("t", "abc", (p0, p1), 3, {"min.insync.replicas": "2"}, 2)
    assert topics.describe_lines([t], {1, 2, 3}, None) == [
        "Topic: t\tTopicId: abc\tPartitionCount: 2\tReplicationFactor: 3\tConfigs: min.insync.replicas=2",
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3",
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 2,3,1\tIsr: 2",
    ]
    only_p1 = ["\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 2,3,1\tIsr: 2"]
    assert topics.describe_lines([t], {1, 2, 3}, "under_replicated_partitions") == only_p1
    assert topics.describe_lines([t], {1, 2, 3}, "unavailable_partitions") == only_p1
    assert topics.describe_lines([t], {1, 2, 3}, "under_min_isr_partitions") == only_p1
    assert topics.describe_lines([t], {2, 3}, "unavailable_partitions") == [
        "\tTopic: t\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3", *only_p1]


def test_topics_option_rules() -> None:
    parser = topics.build_parser()
    for argv, needle in ((["--list", "--describe"], "exactly one action"),
                         (["--create"], "--topic is required"),
                         (["--create", "--topic", "t", "--partitions", "0"], "greater than 0"),
                         (["--alter", "--topic", "t"], "--partitions"),
                         (["--list", "--if-not-exists"], "--create")):
        with pytest.raises(ToolError, match=needle):
            topics.validate(parser.parse_args(["--bootstrap-server", "b:1", *argv]))


def test_election_classify() -> None:
    parts = {("t", 0): {"leader": 2, "replicas": [1, 2], "isr": [1, 2]},
             ("t", 1): {"leader": 1, "replicas": [1, 2], "isr": [1, 2]},
             ("t", 2): {"leader": 2, "replicas": [3, 2], "isr": [2]},
             ("t", 3): {"leader": -1, "replicas": [3, 1], "isr": [3]}}
    todo, fine, errors = leader_election.classify("PREFERRED", [*sorted(parts), ("x", 0)], parts, {1, 2})
    assert todo == [("t", 0)] and fine == [("t", 1)]
    assert errors[("t", 2)].startswith("PREFERRED_LEADER_NOT_AVAILABLE")
    assert errors[("x", 0)].startswith("UNKNOWN_TOPIC_OR_PARTITION")
    todo, fine, errors = leader_election.classify("UNCLEAN", sorted(parts), parts, {1, 2})
    assert todo == [("t", 3)] and fine == [("t", 0), ("t", 1), ("t", 2)] and not errors


def test_reset_offset_parsing() -> None:
    assert consumer_groups.parse_topic_scope(["a", "b:0,2"]) == [("a", None), ("b", [0, 2])]
    assert consumer_groups.parse_duration_ms("P1DT2H3M4.5S") == ((24 + 2) * 60 + 3) * 60_000 + 4500
    with pytest.raises(ToolError):
        consumer_groups.parse_duration_ms("1h")
    assert consumer_groups.parse_datetime("1970-01-01T00:00:01.000Z") == 1000
    assert consumer_groups.parse_datetime("1970-01-01T01:00:01.000+01:00") == 1000
    with pytest.raises(ToolError, match="Error parsing timestamp"):
        consumer_groups.parse_datetime("yesterday")
    assert consumer_groups.parse_offsets_csv("t,0,5\ng,t,1,6\nother,t,1,9\n", "g", "f") == {("t", 0): 5, ("t", 1): 6}
    with pytest.raises(ToolError, match="line 1"):
        consumer_groups.parse_offsets_csv("t,x,5", "g", "f")
    assert consumer_groups.clamp(99, 3, 10) == 10 and consumer_groups.clamp(1, 3, 10) == 3


def test_offsets_view_rows() -> None:
    desc = {"members": [{"member_id": "m1", "host": "/127.0.0.1", "client_id": "c", "assignment": [["t", 1]]}]}
    committed = {("t", 0): {"offset": 3, "log_end_offset": 10}}
    rows = consumer_groups.offsets_rows("g", desc, committed, {("t", 1): 7})
    assert rows == [["g", "t", 0, 3, 10, 7, None, None, None], ["g", "t", 1, None, 7, None, "m1", "/127.0.0.1", "c"]]


def test_console_line_reader_and_formatter() -> None:
    reader = console_producer.LineReader({"parse.key": "true", "key.separator": ":"})
    assert reader.parse("k:v:w") == (b"k", b"v:w")
    with pytest.raises(ToolError, match="No key found on line 2"):
        reader.parse("novalue")
    assert console_producer.LineReader({"parse.key": "true", "ignore.error": "true"}).parse("x") == (None, b"x")
    fmt = console_consumer.Formatter({"print.key": "true", "print.offset": "true", "print.partition": "true",
                                      "print.timestamp": "true", "print.headers": "true"})
    rec = ConsumerRecord("t", 1, 5, 1700000000000, None, b"v", (("h", b"x"), ("n", None)))
    assert fmt.format(rec) == b"CreateTime:1700000000000\tPartition:1\tOffset:5\th:x,n:null\tnull\tv\n"
    with pytest.raises(ToolError, match="Unknown --property"):
        console_consumer.Formatter({"print.colour": "true"})


def test_producer_properties() -> None:
    args = console_producer.build_parser().parse_args(["--bootstrap-server", "b:1", "--topic", "t",
                                                       "--producer-property", "acks=all", "--compression-codec"])
    kwargs = console_producer.producer_kwargs(args)
    assert kwargs["acks"] == "all" and kwargs["compression"] == "gzip"
    args = console_producer.build_parser().parse_args(["--bootstrap-server", "b:1", "--topic", "t",
                                                       "--compression-codec", "snappy"])
    with pytest.raises(ToolError, match="snappy"):
        console_producer.producer_kwargs(args)


def test_configs_entities_and_rendering() -> None:
    parser = configs.build_parser()
    entity = configs.resolve_entity(parser.parse_args(["--entity-type", "clients", "--entity-default"]))
    assert entity == (("clients", "<default>"),)
    assert configs.resolve_entity(parser.parse_args(["--broker", "2"])) == (("brokers", "2"),)
    assert configs.resolve_entity(parser.parse_args(["--entity-type", "users"])) == (("users", None),)
    with pytest.raises(configs.UsageError, match="Only 'users' and 'clients'"):
        configs.resolve_entity(parser.parse_args(["--broker", "2", "--client", "c"]))
    assert configs.entity_string("clients", "<default>") == "default client-id"
    assert configs.entity_string("topics", "t") == "topic 't'"


def test_configs_nested_user_client_entities() -> None:
    """Kafka's syntax for /config/users/<user>/clients/<client id>: two type/name pairs in either order (names
    pair with types as given), --entity-default for either part, or the shorthands; users always come first."""
    parser = configs.build_parser()

    def entity(*argv: str) -> configs.Entity:
        return configs.resolve_entity(parser.parse_args(list(argv)))

    both = (("users", "alice"), ("clients", "app1"))
    assert entity("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-name", "app1") == both
    assert entity("--entity-type", "clients", "--entity-name", "app1", "--entity-type", "users",
                  "--entity-name", "alice") == both
    assert entity("--entity-type", "users", "--entity-type", "clients", "--entity-name", "alice",
                  "--entity-name", "app1") == both
    assert entity("--user", "alice", "--client", "app1") == both
    assert entity("--entity-type", "users", "--entity-default", "--entity-type", "clients",
                  "--entity-name", "app1") == (("users", "<default>"), ("clients", "app1"))
    assert entity("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                  "--entity-default") == (("users", "alice"), ("clients", "<default>"))
    assert entity("--user-defaults", "--client-defaults") == (("users", "<default>"), ("clients", "<default>"))
    # --describe may leave names out: every client of alice, every nested entity
    assert entity("--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients") == (
        ("users", "alice"), ("clients", None))
    assert entity("--entity-type", "clients", "--entity-type", "users") == (("users", None), ("clients", None))
    for argv, message in (
        (["--entity-type", "users", "--entity-name", "a", "--entity-type", "topics", "--entity-name", "t"],
         "Only 'users' and 'clients'"),
        (["--entity-type", "brokers", "--entity-name", "1", "--entity-type", "clients"], "Only 'users' and"),
        (["--user", "a", "--client", "c", "--topic", "t"], "Only 'users' and 'clients'"),
        (["--entity-type", "users", "--entity-name", "a", "--entity-type", "users"], "Duplicate entity type"),
        (["--user", "a", "--entity-type", "users"], "Duplicate entity type(s) specified: users"),
        (["--entity-type", "users", "--entity-name", "a", "--entity-default"], "at most one --entity-name"),
        (["--entity-name", "a"], "need --entity-type"),
        (["--entity-type", "ips"], "not supported"),
    ):
        with pytest.raises(configs.UsageError, match=re.escape(message)):
            entity(*argv)

    def checked(*argv: str) -> tuple[configs.Entity, dict[str, str], list[str]]:
        return configs.validate(parser.parse_args(["--zookeeper", "zk:2181", *argv]))

    assert checked("--alter", "--user", "alice", "--client", "app1", "--add-config", "producer_byte_rate=1024") == (
        both, {"producer_byte_rate": "1024"}, [])
    with pytest.raises(configs.UsageError, match="with each --entity-type for --alter"):
        checked("--alter", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                "--add-config", "producer_byte_rate=1")
    with pytest.raises(configs.UsageError, match="--all"):
        checked("--describe", "--all", "--user", "alice", "--client", "app1")
    assert configs.user_client_string("alice", "app1") == "user-principal 'alice', client-id 'app1'"
    assert configs.user_client_string("<default>", "<default>", quota=True) == (
        "the default user-principal, the default client-id")


def test_configs_bad_entity_combinations_exit_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--describe", "--entity-type", "topics", "--entity-name", "t", "--entity-type", "users"],
                 ["--alter", "--user", "alice", "--entity-type", "clients", "--add-config", "producer_byte_rate=1"]):
        assert configs.main(["--zookeeper", "127.0.0.1:1", *argv]) == 2  # refused before any connection
        err = capsys.readouterr().err
        assert err.startswith("Error: ") and err.count("\n") == 1, err
    # a bad value (not a combination) keeps the tools' usual exit code 1
    assert configs.main(["--zookeeper", "127.0.0.1:1", "--describe", "--user", "alice", "--client", "a\nb"]) == 1
    assert capsys.readouterr().err.count("\n") == 1


def test_zk_entity_validation() -> None:
    assert sanitize("a b*c/d") == "a%20b%2Ac%2Fd" and sanitize("<default>") == "<default>"
    validate_entity("brokers", "<default>")
    for t, name in (("brokers", "x"), ("ips", "1"), ("clients", ""), ("clients", "a\nb")):
        with pytest.raises(InvalidRequestError):
            validate_entity(t, name)
    assert validate_alter("clients", {"producer_byte_rate": " 100 "}, []) == ({"producer_byte_rate": "100"}, [])
    for set_ in ({"producer_byte_rate": "0"}, {"request_percentage": "-1"}, {"bogus": "1"}):
        with pytest.raises(InvalidConfigError):
            validate_alter("clients", set_, [])
    with pytest.raises(InvalidConfigError, match="both"):
        validate_alter("brokers", {"log.retention.ms": "1"}, ["log.retention.ms"])
