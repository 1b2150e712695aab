"""The Kafka-style admin scripts end to end, through their shell wrappers, against a live cluster.

Each test runs ``scripts/odradek-*.sh`` as a subprocess (as an operator would), checks Kafka's output layout,
and checks that failures exit non-zero with exactly one line on stderr.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client.admin import AdminClient
from odradek.client.group_consumer import GroupConsumer
from odradek_local.processes import read_proc_stat
from tests.harness.cluster import LocalProcessBackend
from tests.harness.ports import free_port_block
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
# Waits whose every probe runs a script (a Python start-up each): twice the usual deadline.
SCRIPTS_S = 2 * SLOW_MACHINE_S
# --timeout-ms of a console consumer that stops at --max-messages: an idle cap that only a hang reaches.
UNTIL_MAX_MS = str(int(SLOW_MACHINE_S * 1000))


def script(name: str, *args: str, stdin: str | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPTS / f"odradek-{name}.sh"), *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ})


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"rc={result.returncode} stderr={result.stderr!r} stdout={result.stdout!r}"
    return result.stdout


def one_line_failure(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert result.returncode != 0, result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def cluster(zk_ensemble: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessBackend]:
    """One 3-broker cluster for the module (the tests use distinct topics and groups). The controller's automatic
    preferred-leader rebalance is off: its first check runs 5 s after a controller failover, and whether it finds
    a restarted broker back in the ISR by then depends on the machine's speed; here only the leader-election
    script may move leadership back."""
    import uuid

    from odradek_local.cluster import LocalCluster
    from tests.conftest import SESSION_TIMEOUT_MS

    backend = LocalProcessBackend(LocalCluster(
        tmp_path_factory.mktemp("admin-scripts"), brokers=3, base_port=free_port_block(3),
        session_timeout_ms=SESSION_TIMEOUT_MS, chroot=f"/odradek-test-{uuid.uuid4().hex[:10]}",
        ensemble=zk_ensemble,  # type: ignore[arg-type]
        broker_args=["--auto-leader-rebalance-enable", "false"],
    ))
    try:
        backend.up()
        yield backend
    finally:
        backend.close()


@pytest.fixture
def bs(cluster: LocalProcessBackend) -> str:
    return cluster.broker_url(2).removeprefix("http://")


# ---------------------------------------------------------------------------------------------------- topics


def test_topics_create_list_describe_alter_delete(bs: str) -> None:
    assert ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "orders", "--partitions", "3",
                     "--replication-factor", "3", "--config", "min.insync.replicas=2")) == "Created topic orders.\n"
    created = ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "pinned",
                        "--replica-assignment", "1:2,2:3,3:1"))
    assert created.endswith("Created topic pinned.\n")
    assert ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "orders", "--partitions", "1",
                     "--if-not-exists")) == ""
    assert {"orders", "pinned"} <= set(ok(script("topics", "--bootstrap-server", bs, "--list")).split())

    out = ok(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "orders")).splitlines()
    assert re.fullmatch(r"Topic: orders\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 3\tReplicationFactor: 3\t"
                        r"Configs: min.insync.replicas=2", out[0]), out[0]
    assert len(out) == 4
    for p, line in enumerate(out[1:]):
        m = re.fullmatch(rf"\tTopic: orders\tPartition: {p}\tLeader: (\d)\tReplicas: (\d,\d,\d)\tIsr: ([\d,]+)", line)
        assert m, line
        assert sorted(m.group(2).split(",")) == ["1", "2", "3"] and m.group(1) in m.group(3).split(",")
    pinned = ok(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "pin.*")).splitlines()
    assert [ln.split("\t")[4] for ln in pinned[1:]] == ["Replicas: 1,2", "Replicas: 2,3", "Replicas: 3,1"]
    # no partition is under-replicated or unavailable on a healthy cluster: filters print nothing
    assert ok(script("topics", "--bootstrap-server", bs, "--describe", "--unavailable-partitions")) == ""
    assert ok(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "orders",
                     "--under-replicated-partitions")) == ""
    assert ok(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "orders",
                     "--at-min-isr-partitions")) == ""

    altered = ok(script("topics", "--bootstrap-server", bs, "--alter", "--topic", "orders", "--partitions", "5"))
    assert altered.splitlines()[-1] == "Adding partitions succeeded!"
    assert "PartitionCount: 5" in ok(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "orders"))

    assert ok(script("topics", "--bootstrap-server", bs, "--delete", "--topic", "pinned")) == \
        "Topic pinned is marked for deletion.\n"
    wait_until(lambda: "pinned" not in ok(script("topics", "--bootstrap-server", bs, "--list")).split(), SCRIPTS_S,
               "topic pinned deleted", interval=0.5)
    assert ok(script("topics", "--bootstrap-server", bs, "--delete", "--topic", "pinned", "--if-exists")) == ""


def test_topics_failures_are_one_line(bs: str) -> None:
    one_line_failure(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "missing"),
                     "Topic 'missing' does not exist as expected")
    one_line_failure(script("topics", "--bootstrap-server", bs, "--list", "--describe"), "exactly one action")
    one_line_failure(script("topics", "--bootstrap-server", bs, "--create", "--topic", "x", "--partitions", "2",
                            "--replica-assignment", "1:2"), "--replica-assignment")
    one_line_failure(script("topics", "--bootstrap-server", bs, "--create", "--topic", "x",
                            "--replica-assignment", "1:2,3"), "different replication factor")
    one_line_failure(script("topics", "--bootstrap-server", bs, "--create", "--topic", "x",
                            "--replication-factor", "5"), "Error while executing topic command")
    one_line_failure(script("topics", "--bootstrap-server", bs, "--create", "--topic", "bad/name"), "illegal")
    one_line_failure(script("topics", "--list"), "bootstrap-server")
    one_line_failure(script("topics", "--bootstrap-server", bs, "--list", "--bogus"), "unrecognized arguments")
    assert script("topics", "--help").returncode == 0


# ------------------------------------------------------------------------------------------ leader election


def test_preferred_leader_election_moves_leadership_back(cluster: LocalProcessBackend, bs: str) -> None:
    ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "elect", "--replica-assignment", "1:2:3"))
    cluster.stop_broker(1)
    describe = ["--bootstrap-server", bs, "--describe", "--topic", "elect"]
    wait_until(lambda: "Leader: 1\t" not in ok(script("topics", *describe)), SCRIPTS_S, "leadership moved off broker 1",
               interval=0.5)
    under = ok(script("topics", "--bootstrap-server", bs, "--describe", "--topic", "elect",
                      "--under-replicated-partitions"))
    assert under.startswith("\tTopic: elect\tPartition: 0\t"), under
    cluster.start_broker(1)
    wait_until(lambda: ok(script("topics", *describe)).rstrip().split("\t")[-1].startswith("Isr: ") and len(
        ok(script("topics", *describe)).rstrip().split("\t")[-1].split(",")) == 3, SCRIPTS_S,
        "broker 1 back in the ISR", interval=0.5)
    out = ok(script("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                    "--topic", "elect", "--partition", "0"))
    assert out == "Successfully completed leader election (PREFERRED) for partitions elect-0\n"
    # The election is committed when the script returns; the broker answering describe may learn of it a little
    # later.
    wait_until(lambda: "Leader: 1\t" in ok(script("topics", *describe)), SCRIPTS_S, "broker 1 to lead again",
               interval=0.5)
    again = ok(script("leader-election", "--bootstrap-server", bs, "--election-type", "PREFERRED",
                      "--all-topic-partitions"))
    assert "Valid replica already elected for partitions" in again and "elect-0" in again
    # unclean acts only where no leader is left: nothing to do here
    assert ok(script("leader-election", "--bootstrap-server", bs, "--election-type", "unclean", "--topic", "elect",
                     "--partition", "0")) == "Valid replica already elected for partitions elect-0\n"


def test_leader_election_bad_input(bs: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions": [')
    one_line_failure(script("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                            "--path-to-json-file", str(bad)), "not valid JSON", str(bad))
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps({"partitions": [{"topic": "a", "partition": 0}, {"topic": "a", "partition": 0}]}))
    one_line_failure(script("leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
                            "--path-to-json-file", str(dup)), "duplicate partitions: a-0")
    one_line_failure(script("leader-election", "--bootstrap-server", bs, "--all-topic-partitions"), "election-type")
    one_line_failure(script("leader-election", "--bootstrap-server", bs, "--election-type", "preferred"),
                     "One and only one")
    r = script("leader-election", "--bootstrap-server", bs, "--election-type", "preferred", "--topic", "nope",
               "--partition", "0")
    one_line_failure(r, "could not be elected")
    assert "Error completing leader election (PREFERRED) for partition: nope-0: UNKNOWN_TOPIC_OR_PARTITION" in r.stdout


# --------------------------------------------------------------------------------------------------- configs


def test_configs_topics_brokers_clients_users(cluster: LocalProcessBackend, bs: str) -> None:
    ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "conf", "--partitions", "1"))
    assert ok(script("configs", "--bootstrap-server", bs, "--entity-type", "topics", "--entity-name", "conf",
                     "--alter", "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]")) == \
        "Completed updating config for topic conf.\n"
    described = ok(script("configs", "--bootstrap-server", bs, "--topic", "conf", "--describe")).splitlines()
    assert described[0] == "Dynamic configs for topic conf are:"
    assert "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=" \
           "compact,delete}" in described
    ok(script("configs", "--bootstrap-server", bs, "--topic", "conf", "--alter", "--delete-config", "retention.ms"))
    assert "retention.ms" not in ok(script("configs", "--bootstrap-server", bs, "--topic", "conf", "--describe"))

    assert ok(script("configs", "--bootstrap-server", bs, "--entity-type", "clients", "--entity-name", "c1",
                     "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")) == \
        "Completed updating config for client c1.\n"
    assert ok(script("configs", "--bootstrap-server", bs, "--client-defaults", "--alter", "--add-config",
                     "producer_byte_rate=4096")) == "Completed updating default config for clients in the cluster.\n"
    assert ok(script("configs", "--bootstrap-server", bs, "--entity-type", "clients", "--describe")).splitlines() == [
        "Quota configs for the default client-id are producer_byte_rate=4096",
        "Quota configs for client-id 'c1' are consumer_byte_rate=2048,producer_byte_rate=1024",
    ]
    ok(script("configs", "--bootstrap-server", bs, "--broker", "1", "--alter", "--add-config",
              "follower.replication.throttled.rate=1000000"))
    brokers = ok(script("configs", "--bootstrap-server", bs, "--entity-type", "brokers", "--describe"))
    assert "Dynamic configs for broker 1 are:\n  follower.replication.throttled.rate=1000000 sensitive=false " \
           "synonyms={DYNAMIC_BROKER_CONFIG:follower.replication.throttled.rate=1000000}\n" in brokers
    assert "All configs for broker 3 are:" in ok(script("configs", "--bootstrap-server", bs, "--broker", "3",
                                                        "--describe", "--all"))

    # --zookeeper writes the znodes directly, with Kafka's ZooKeeper-mode output and a change notification
    zk = cluster.zk_connect
    assert ok(script("configs", "--zookeeper", zk, "--entity-type", "users", "--entity-name", "alice", "--alter",
                     "--add-config", "consumer_byte_rate=8192")) == \
        "Completed updating config for entity: user-principal 'alice'.\n"
    assert ok(script("configs", "--zookeeper", zk, "--user", "alice", "--describe")) == \
        "Configs for user-principal 'alice' are consumer_byte_rate=8192\n"
    assert ok(script("configs", "--bootstrap-server", bs, "--user", "alice", "--describe")) == \
        "Quota configs for user-principal 'alice' are consumer_byte_rate=8192\n"
    client = cluster.zk_client()
    changes = sorted(client.get_config_changes())
    last = client.retrying(client.kazoo.get, f"/config/changes/{changes[-1]}")[0]
    assert json.loads(last) == {"version": 2, "entity_path": "users/alice"}
    assert json.loads(client.retrying(client.kazoo.get, "/config/clients/<default>")[0]) == \
        {"version": 1, "config": {"producer_byte_rate": "4096"}}


def test_configs_nested_user_client_quotas(cluster: LocalProcessBackend, bs: str) -> None:
    """Kafka's user+client entity: written over HTTP and directly, to /config/users/<user>/clients/<client id>
    with a users/<user>/clients/<client id> notification, and shown in both modes; bad combinations exit 2."""
    zk = cluster.zk_connect
    assert ok(script("configs", "--bootstrap-server", bs, "--alter", "--entity-type", "users", "--entity-name",
                     "carol", "--entity-type", "clients", "--entity-name", "app 1", "--add-config",
                     "producer_byte_rate=1024,consumer_byte_rate=2048")) == \
        "Completed updating config for user carol, client app 1.\n"
    assert ok(script("configs", "--zookeeper", zk, "--alter", "--entity-type", "clients", "--entity-default",
                     "--entity-type", "users", "--entity-name", "carol", "--add-config", "request_percentage=50")) == \
        "Completed updating config for entity: user-principal 'carol', default client-id.\n"
    ok(script("configs", "--bootstrap-server", bs, "--alter", "--user", "carol", "--client", "app 1",
              "--delete-config", "consumer_byte_rate"))
    client = cluster.zk_client()
    assert json.loads(client.retrying(client.kazoo.get, "/config/users/carol/clients/app%201")[0]) == \
        {"version": 1, "config": {"producer_byte_rate": "1024"}}
    last = sorted(client.get_config_changes())[-1]
    assert json.loads(client.retrying(client.kazoo.get, f"/config/changes/{last}")[0]) == \
        {"version": 2, "entity_path": "users/carol/clients/app%201"}
    assert ok(script("configs", "--zookeeper", zk, "--describe", "--entity-type", "users", "--entity-name", "carol",
                     "--entity-type", "clients")).splitlines() == [
        "Configs for user-principal 'carol', default client-id are request_percentage=50",
        "Configs for user-principal 'carol', client-id 'app 1' are producer_byte_rate=1024",
    ]
    assert ok(script("configs", "--bootstrap-server", bs, "--describe", "--user", "carol", "--client-defaults")) == \
        "Quota configs for user-principal 'carol', the default client-id are request_percentage=50\n"
    assert "Quota configs for user-principal 'carol', client-id 'app 1' are producer_byte_rate=1024" in ok(script(
        "configs", "--bootstrap-server", bs, "--describe", "--entity-type", "users", "--entity-type", "clients"))
    # the user entity itself is untouched (its parent node carries no config)
    assert ok(script("configs", "--bootstrap-server", bs, "--user", "carol", "--describe")) == \
        "Quota configs for user-principal 'carol' are \n"
    for argv in (["--entity-type", "users", "--entity-name", "carol", "--entity-type", "topics", "--entity-name", "t"],
                 ["--entity-type", "clients", "--entity-name", "a", "--entity-type", "clients", "--entity-name", "b"]):
        r = script("configs", "--bootstrap-server", bs, "--alter", *argv, "--add-config", "producer_byte_rate=1")
        assert r.returncode == 2, r
        one_line_failure(r, "entity type")
    with AdminClient(bs) as admin, pytest.raises(Exception) as info:  # only a user narrows to a client id
        admin.request_json("GET", "/v3/clusters/{cluster_id}/clients/c9/configs", query={"client_id": "x"})
    assert getattr(info.value, "http_status", 500) == 400, info.value


def test_configs_bad_input_is_one_line(cluster: LocalProcessBackend, bs: str) -> None:
    one_line_failure(script("configs", "--bootstrap-server", bs, "--client", "c9", "--alter", "--add-config",
                            "producer_byte_rate=fast"), "producer_byte_rate")
    one_line_failure(script("configs", "--bootstrap-server", bs, "--client", "c9", "--alter", "--add-config",
                            "bogus=1"), "Invalid config(s): bogus")
    one_line_failure(script("configs", "--bootstrap-server", bs, "--client", "c9", "--alter", "--delete-config",
                            "producer_byte_rate"), "Invalid config(s): producer_byte_rate")
    one_line_failure(script("configs", "--bootstrap-server", bs, "--broker", "x", "--describe"), "broker id")
    one_line_failure(script("configs", "--bootstrap-server", bs, "--topic", "absent", "--describe"), "absent")
    one_line_failure(script("configs", "--bootstrap-server", bs, "--entity-type", "ips", "--describe"),
                     "not supported")
    one_line_failure(script("configs", "--bootstrap-server", bs, "--client", "c9", "--alter"),
                     "--add-config or --delete-config")
    one_line_failure(script("configs", "--zookeeper", cluster.zk_connect + "-typo", "--user", "u", "--describe"),
                     "no Odradek cluster")
    # the endpoint itself answers 4xx to bad bodies, never 500
    with AdminClient(bs) as admin:
        for body in ({"data": "x"}, {"data": [{"name": "producer_byte_rate", "value": 5}]},
                     {"data": [{"name": "producer_byte_rate", "operation": "NOPE"}]}):
            with pytest.raises(Exception) as info:
                admin.request_json("POST", "/v3/clusters/{cluster_id}/clients/c9/configs:alter", body)
            assert getattr(info.value, "http_status", 500) < 500, info.value


# -------------------------------------------------------------------------------------- console round trip


def test_console_producer_to_console_consumer_round_trip(bs: str) -> None:
    ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "lines", "--partitions", "2",
              "--replication-factor", "2"))
    lines = "".join(f"k{i}\tvalue {i}\n" for i in range(10))
    assert ok(script("console-producer", "--bootstrap-server", bs, "--topic", "lines", "--property",
                     "parse.key=true", "--producer-property", "acks=all", "--compression-codec", "gzip",
                     stdin=lines)) == ""
    ok(script("console-producer", "--bootstrap-server", bs, "--topic", "lines", "--property", "parse.key=true",
              "--property", "key.separator=:", stdin="k10:value 10\n"))
    r = script("console-consumer", "--bootstrap-server", bs, "--topic", "lines", "--from-beginning",
               "--max-messages", "11", "--timeout-ms", UNTIL_MAX_MS, "--property", "print.key=true", "--property",
               "print.partition=true", "--property", "print.offset=true", "--property", "print.timestamp=true",
               "--property", "print.headers=true")
    out = ok(r).splitlines()
    assert r.stderr.strip() == "Processed a total of 11 messages"
    got = {}
    in_partition_0 = []
    for line in out:
        ts, part, off, headers, key, value = line.split("\t")
        assert re.fullmatch(r"CreateTime:\d{13}", ts) and part.startswith("Partition:") and off.startswith("Offset:")
        assert headers == "NO_HEADERS"
        got[key] = value
        if part == "Partition:0":
            in_partition_0.append(value)
    assert got == {f"k{i}": f"value {i}" for i in range(11)}
    assert in_partition_0, out  # the keys spread over both partitions
    # One partition from an offset, up to its end offset (the count read above): it stops at --max-messages, not
    # when idle, however slow its first fetch.
    r = script("console-consumer", "--bootstrap-server", bs, "--topic", "lines", "--partition", "0", "--offset",
               "earliest", "--max-messages", str(len(in_partition_0)), "--timeout-ms", UNTIL_MAX_MS)
    assert sorted(ok(r).splitlines()) == sorted(in_partition_0)
    assert r.stderr.strip() == f"Processed a total of {len(in_partition_0)} messages"


def test_console_failures_are_one_line(bs: str) -> None:
    one_line_failure(script("console-producer", "--bootstrap-server", bs, "--topic", "no-such-topic", stdin="x\n"),
                     "no-such-topic")
    ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "keyed"))
    one_line_failure(script("console-producer", "--bootstrap-server", bs, "--topic", "keyed", "--property",
                            "parse.key=true", stdin="no separator here\n"), "No key found on line 1")
    one_line_failure(script("console-consumer", "--bootstrap-server", bs, "--topic", "keyed", "--group", "g",
                            "--partition", "0"), "group and partition")
    one_line_failure(script("console-consumer", "--bootstrap-server", bs, "--topic", "no-such-topic",
                            "--timeout-ms", "100"), "does not exist")


# ----------------------------------------------------------------------------------------- consumer groups


def test_consumer_groups_describe_reset_delete(bs: str, tmp_path: Path) -> None:
    ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "grp", "--partitions", "2",
              "--replication-factor", "2"))
    ok(script("console-producer", "--bootstrap-server", bs, "--topic", "grp", "--property", "parse.key=true",
              stdin="".join(f"key{i}\tv{i}\n" for i in range(20))))
    read = script("console-consumer", "--bootstrap-server", bs, "--topic", "grp", "--group", "tools-g",
                  "--from-beginning", "--max-messages", "5", "--timeout-ms", UNTIL_MAX_MS)
    assert len(ok(read).splitlines()) == 5

    assert "tools-g" in ok(script("consumer-groups", "--bootstrap-server", bs, "--list")).split()
    r = script("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tools-g")
    table = ok(r).splitlines()
    assert table[0] == ""
    assert table[1].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                "CONSUMER-ID", "HOST", "CLIENT-ID"]
    assert table[1].startswith("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG ")
    rows = [ln.split() for ln in table[2:]]
    assert sum(int(row[3]) for row in rows) == 5  # only partitions with a commit (or an owner) are listed
    assert all(int(row[5]) == int(row[4]) - int(row[3]) and row[6:] == ["-", "-", "-"] for row in rows)
    assert r.stderr.strip() == "Consumer group 'tools-g' has no active members."

    def reset(*spec: str) -> dict[int, int]:
        out = ok(script("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", "tools-g",
                        *spec)).splitlines()
        assert out[1].split() == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        return {int(row.split()[2]): int(row.split()[3]) for row in out[2:]}

    ends = reset("--topic", "grp", "--to-latest", "--dry-run")
    assert sum(ends.values()) == 20
    assert reset("--topic", "grp", "--to-earliest", "--dry-run") == {0: 0, 1: 0}
    assert reset("--topic", "grp", "--to-latest", "--execute") == ends
    assert reset("--all-topics", "--shift-by", "-2", "--execute") == {p: e - 2 for p, e in ends.items()}
    assert reset("--topic", "grp:0", "--to-offset", "1", "--execute") == {0: 1}
    assert reset("--topic", "grp:1", "--to-offset", "999999", "--dry-run") == {1: ends[1]}  # clamped
    assert reset("--topic", "grp", "--to-datetime", "2000-01-01T00:00:00.000", "--dry-run") == {0: 0, 1: 0}
    assert reset("--topic", "grp", "--by-duration", "PT0S", "--dry-run") == ends  # nothing is newer than now
    assert reset("--topic", "grp", "--by-duration", "P1D", "--dry-run") == {0: 0, 1: 0}
    csv = tmp_path / "offsets.csv"
    csv.write_text("grp,0,2\ngrp,1,3\n")
    assert reset("--from-file", str(csv), "--execute") == {0: 2, 1: 3}
    committed = ok(script("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tools-g"))
    assert {int(r.split()[2]): int(r.split()[3]) for r in committed.splitlines()[2:]} == {0: 2, 1: 3}

    csv.write_text("grp,zero,2\n")
    one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", "tools-g",
                            "--from-file", str(csv), "--execute"), "line 1")
    one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", "tools-g",
                            "--topic", "grp"), "exactly one of these options")
    one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", "tools-g",
                            "--topic", "grp", "--to-earliest", "--dry-run", "--execute"), "--execute and --dry-run")
    one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "nobody"),
                     "Consumer group 'nobody' does not exist.")

    out = ok(script("consumer-groups", "--bootstrap-server", bs, "--delete-offsets", "--group", "tools-g",
                    "--topic", "grp:0"))
    assert out.splitlines()[0] == "Request succeed for deleting offsets with topic grp group tools-g"
    committed = ok(script("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "tools-g"))
    assert {int(r.split()[2]): int(r.split()[3]) for r in committed.splitlines()[2:]} == {1: 3}

    assert ok(script("consumer-groups", "--bootstrap-server", bs, "--delete", "--group", "tools-g")) == \
        "Deletion of requested consumer groups ('tools-g') was successful.\n"
    assert "tools-g" not in ok(script("consumer-groups", "--bootstrap-server", bs, "--list")).split()


def test_reset_is_refused_while_the_group_has_members(bs: str) -> None:
    ok(script("topics", "--bootstrap-server", bs, "--create", "--topic", "busy"))
    member = GroupConsumer(bs, group_id="busy-g", session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        member.subscribe(["busy"])
        wait_until(lambda: bool(member.poll(100) is not None and member.assignment()), SLOW_MACHINE_S,
                   "the member joined")
        members = ok(script("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "busy-g",
                            "--members", "--verbose")).splitlines()
        assert members[1].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert members[2].split()[-2:] == ["1", "busy(0)"]
        state = ok(script("consumer-groups", "--bootstrap-server", bs, "--describe", "--group", "busy-g", "--state"))
        assert state.splitlines()[2].split()[-2:] == ["Stable", "1"]
        one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--reset-offsets", "--group", "busy-g",
                                "--topic", "busy", "--to-earliest", "--execute"),
                         "Assignments can only be reset if the group 'busy-g' is inactive, but the current state "
                         "is Stable.")
        one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--delete", "--group", "busy-g"),
                         "NON_EMPTY_GROUP")
        one_line_failure(script("consumer-groups", "--bootstrap-server", bs, "--delete-offsets", "--group", "busy-g",
                                "--topic", "busy"), "GROUP_SUBSCRIBED_TO_TOPIC")
    finally:
        member.close()


# ------------------------------------------------------------------------------------------ cluster scripts


def test_cluster_start_status_stop_scripts(tmp_path: Path) -> None:
    data = str(tmp_path / "c")
    zk_base, base = free_port_block(1, span=102), free_port_block(1)
    up = script("cluster-start", "--data-dir", data, "--zookeepers", "1", "--brokers", "1", "--base-port", str(base),
                "--zk-base-port", str(zk_base), "--tick-ms", "500", "--session-timeout-ms", "3000", timeout=120)
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stderr
        status = json.loads(ok(script("cluster-status", "--data-dir", data, "--json")))
        pids = [z["pid"] for z in status["zookeepers"]] + [b["pid"] for b in status["brokers"]]
        assert status["brokers"][0]["url"] == f"http://127.0.0.1:{base}" and status["controller"] == 1
    finally:
        down = script("cluster-stop", "--data-dir", data, timeout=120)
    assert down.returncode == 0, down.stderr
    assert pids and all(read_proc_stat(p) is None or read_proc_stat(p).state == "Z" for p in pids)  # type: ignore[union-attr]
    one_line_failure(script("cluster-status", "--data-dir", data + "-none"), "no cluster")

