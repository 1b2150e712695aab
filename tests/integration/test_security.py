"""A secured cluster, for real: TLS + SASL_SSL listeners, SCRAM users in ZooKeeper, ACLs in ZooKeeper, ZooKeeper ACLs.

One cluster (2 brokers, a throwaway CA made by ``LocalCluster(tls=True)``) serves every test of the module. Users
and ACLs are set with the operator's tools (``odradek configs`` and ``odradek acls`` over ZooKeeper, with the
brokers' ZooKeeper identity from the environment), then:

* an authorization matrix (principals x operations x resources, generated) is checked against an independent
  model of Kafka's rules: 0 wrong decisions;
* no credentials, a wrong password, an expired or forged token: 401;
* a client that claims to be a follower gets 403, no bytes, and the high watermark does not move;
* plaintext HTTP on a TLS listener gets no HTTP answer at all;
* a ZooKeeper client without the brokers' credentials cannot write (or read the secrets of) cluster znodes;
* the Python client produces and consumes over TLS with a SCRAM user; an ACL added with the tool applies in < 1 s;
* listings (``/metadata``, ``/topics``, v3 topics, ``/groups``) show each principal only what the model says it may
  Describe, and a named topic it may not Describe is refused (TOPIC_AUTHORIZATION_FAILED) whether it exists or not.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

from broker.security.tls import issue_certificate
from odradek_local.cluster import LocalCluster
from odradek_local.security import admin_files, tls_dir
from odradek_local.zookeeper import ZkEnsemble
from tests.harness.ports import free_port_block
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.timeout(300)

ZK_DIGEST = "odradek-brokers:" + uuid.uuid4().hex
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "dave": "dave-pw"}
ROOT = Path(__file__).resolve().parents[2]
# An ACL change reaches every broker through a ZooKeeper watch, within a round trip (docs/security.md: "within a
# second" on an idle machine). The only other way it could get there is the authorizer's fallback re-load every
# 30 s (AclCache.run): half that period still tells the watch from the fallback, and leaves a loaded machine
# many seconds for the round trip.
ACL_WATCH_S = 15.0
# A bearer token issued with a 200 ms lifetime is refused within this: fifty times its lifetime, room for a loaded
# machine's requests, and still a small fraction of the 15 min default lifetime, so it excludes a broker that
# ignores the requested lifetime or the expiry.
TOKEN_EXPIRY_S = 10.0


@dataclass
class Secured:
    cluster: LocalCluster
    cafile: str
    cluster_id: str
    tokens: dict[str, str]

    def url(self, broker: int = 1) -> str:
        return self.cluster.broker_url(broker)

    def context(self, cert: str | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=self.cafile)
        if cert is not None:
            d = tls_dir(self.cluster)
            ctx.load_cert_chain(str(d / f"{cert}.pem"), str(d / f"{cert}.key"))
        return ctx


def tool(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    env = dict(os.environ, ODRADEK_ZK_DIGEST=ZK_DIGEST, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "odradek_tools", *args], env=env, capture_output=True, text=True,
                          timeout=60, input=stdin)
    assert proc.returncode == 0, f"odradek {' '.join(args)} failed: {proc.stderr}{proc.stdout}"
    return proc.stdout


def request(url: str, method: str = "GET", body: Any = None, *, ctx: ssl.SSLContext | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """One request on a fresh connection that the client closes after reading the whole answer (as a pooled
    client would), so no answer is cut by a server-side close."""
    parts = urlsplit(url)
    conn = (http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=30, context=ctx)
            if parts.scheme == "https" else http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30))
    data = json.dumps(body).encode() if body is not None else None
    hdrs = dict(headers or {})
    if data is not None and not any(k.lower() == "content-type" for k in hdrs):
        hdrs["Content-Type"] = "application/json"
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.headers)
    finally:
        conn.close()


def basic(user: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()}


# The ACLs the module sets (with the tool), and the model that predicts every decision from them.
ACLS: list[tuple[str, str, str, str, str, str]] = [  # principal, Allow|Deny, operation, type, pattern, name
    ("User:alice", "Allow", "Read", "Topic", "LITERAL", "orders"),
    ("User:alice", "Allow", "Write", "Topic", "LITERAL", "orders"),
    ("User:alice", "Allow", "Read", "Group", "LITERAL", "billing"),
    ("User:alice", "Allow", "Read", "Group", "LITERAL", "locked"),
    ("User:alice", "Allow", "IdempotentWrite", "Cluster", "LITERAL", "kafka-cluster"),
    ("User:*", "Deny", "Read", "Group", "LITERAL", "locked"),
    ("User:bob", "Allow", "All", "Topic", "PREFIXED", "logs-"),
    ("User:bob", "Deny", "Write", "Topic", "LITERAL", "logs-secret"),
    ("User:bob", "Allow", "Describe", "Cluster", "LITERAL", "kafka-cluster"),
    ("User:bob", "Allow", "Read", "Group", "LITERAL", "billing"),
    ("User:CN=carol", "Allow", "DescribeConfigs", "Topic", "LITERAL", "*"),
    ("User:CN=carol", "Allow", "AlterConfigs", "Topic", "LITERAL", "orders"),
    ("User:CN=carol", "Allow", "Create", "Cluster", "LITERAL", "kafka-cluster"),
]
SUPER = {"User:CN=admin"}
IMPLIED = {"Describe": {"Describe", "Read", "Write", "Delete", "Alter"}, "DescribeConfigs": {"DescribeConfigs",
                                                                                            "AlterConfigs"}}


def expected(principal: str, op: str, rtype: str, name: str) -> bool:
    if principal in SUPER:
        return True
    if rtype == "Topic" and op == "Create" and expected(principal, "Create", "Cluster", "kafka-cluster"):
        return True
    hits = [a for a in ACLS if a[3] == rtype and ((a[4] == "LITERAL" and a[5] in (name, "*"))
                                                   or (a[4] == "PREFIXED" and name.startswith(a[5])))]
    mine = [a for a in hits if a[0] in (principal, "User:*")]
    if any(a[1] == "Deny" and a[2] in (op, "All") for a in mine):
        return False
    return any(a[1] == "Allow" and a[2] in IMPLIED.get(op, {op}) | {"All"} for a in mine)


@pytest.fixture(scope="module")
def secured(zk_ensemble: ZkEnsemble, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    cluster = LocalCluster(tmp_path_factory.mktemp("secured"), brokers=2, base_port=free_port_block(2),
                           session_timeout_ms=6000, chroot=f"/odradek-sec-{uuid.uuid4().hex[:8]}",
                           ensemble=zk_ensemble, tls=True, zk_digest=ZK_DIGEST)
    try:
        cluster.up(timeout=60)
        issue_certificate(tls_dir(cluster), "carol")
        for user, mech in (("alice", "SCRAM-SHA-256"), ("bob", "SCRAM-SHA-512"), ("dave", "SCRAM-SHA-256")):
            out = tool(cluster, "configs", "--zookeeper", cluster.zk_connect, "--alter", "--entity-type", "users",
                       "--entity-name", user, "--add-config", f"{mech}=[iterations=4096,password={PASSWORDS[user]}]")
            assert "Completed updating config" in out
        for principal, perm, op, rtype, pattern, name in ACLS:
            target = {"Topic": ["--topic", name], "Group": ["--group", name], "Cluster": ["--cluster"]}[rtype]
            flag = "--allow-principal" if perm == "Allow" else "--deny-principal"
            out = tool(cluster, "acls", "--authorizer-properties", f"zookeeper.connect={cluster.zk_connect}",
                       "--add", flag, principal, "--operation", op, *target,
                       "--resource-pattern-type", pattern.lower())
            assert "Adding ACLs for resource `ResourcePattern(" in out
        admin = ssl.create_default_context(cafile=admin_files(cluster)["ssl_cafile"])
        admin.load_cert_chain(admin_files(cluster)["ssl_certfile"], admin_files(cluster)["ssl_keyfile"])
        status, body, _ = request(f"{cluster.broker_url(1)}/v3/clusters", ctx=admin)
        assert status == 200, body
        cluster_id = json.loads(body)["data"][0]["cluster_id"]
        for topic in ("orders", "logs-app", "logs-secret", "other"):
            status, body, _ = request(f"{cluster.broker_url(1)}/v3/clusters/{cluster_id}/topics", "POST",
                                      {"topic_name": topic, "partitions_count": 1, "replication_factor": 2},
                                      ctx=admin)
            assert status in (200, 201), body
        sec = Secured(cluster, admin_files(cluster)["ssl_cafile"], cluster_id, {})
        status, body, _ = request(f"{sec.url()}/auth/token", "POST", {}, ctx=sec.context(), headers=basic("bob"))
        assert status == 200, body
        sec.tokens["bob"] = json.loads(body)["access_token"]
        yield sec
    finally:
        cluster.down()


def credentials(sec: Secured, who: str) -> tuple[ssl.SSLContext, dict[str, str]]:
    if who in ("admin", "carol"):
        return sec.context(who), {}
    if who == "bob":
        return sec.context(), {"Authorization": f"Bearer {sec.tokens['bob']}"}
    return sec.context(), basic(who)


PRINCIPALS = {"alice": "User:alice", "bob": "User:bob", "carol": "User:CN=carol", "dave": "User:dave",
              "admin": "User:CN=admin"}


def actions(cid: str) -> list[tuple[str, str, str, str, str, Any, dict[str, str]]]:
    """(operation, resource type, name, method, path, body, headers): one request per decision. Requests an
    allowed caller may make change nothing that matters (ghost names, refused bodies) or are idempotent."""
    out: list[tuple[str, str, str, str, str, Any, dict[str, str]]] = []
    v3 = f"/v3/clusters/{cid}"
    batches = {"Accept": "application/vnd.odradek.batches.v2"}
    produce = {"Content-Type": "application/vnd.kafka.json.v2+json"}
    for t in ("orders", "logs-app", "logs-secret", "other"):
        out += [
            ("Describe", "Topic", t, "GET", f"/topics/{t}", None, {}),
            ("Write", "Topic", t, "POST", f"/topics/{t}/partitions/0", {"records": [{"value": {"n": 1}}]}, produce),
            ("Read", "Topic", t, "GET", f"/topics/{t}/partitions/0/batches?offset=0&isolation_level="
             "read_uncommitted", None, batches),
            ("DescribeConfigs", "Topic", t, "GET", f"{v3}/topics/{t}/configs", None, {}),
            ("AlterConfigs", "Topic", t, "POST", f"{v3}/topics/{t}/configs:alter",
             {"data": [{"name": "retention.ms", "value": "604800000"}]}, {}),
        ]
    for t in ("logs-ghost", "ghost", "orders-ghost"):
        out += [
            ("Delete", "Topic", t, "DELETE", f"{v3}/topics/{t}", None, {}),
            ("Create", "Topic", t, "POST", f"{v3}/topics",
             {"topic_name": t, "partitions_count": 1, "replication_factor": 99}, {}),
        ]
    for g in ("billing", "locked", "other-group"):
        out += [
            ("Describe", "Group", g, "GET", f"/groups/{g}/offsets", None, {}),
            ("Read", "Group", g, "POST", f"/groups/{g}/offsets", {"member_id": "nobody", "generation": 7,
                                                                  "offsets": []}, {}),
        ]
    out += [
        ("Describe", "Cluster", "kafka-cluster", "GET", "/admin/log_dirs", None, {}),
        ("ClusterAction", "Cluster", "kafka-cluster", "POST", "/controller/controlled_shutdown",
         {"broker_id": 999, "broker_epoch": 1}, {}),
        ("IdempotentWrite", "Cluster", "kafka-cluster", "POST", "/producer_ids", {}, {}),
        ("AlterConfigs", "Cluster", "kafka-cluster", "POST", f"{v3}/broker-configs:alter",
         {"data": [{"name": "no.such.config", "value": "1"}]}, {}),
    ]
    return out


def test_authorization_matrix_has_no_wrong_decision(secured: Secured) -> None:
    wrong: list[str] = []
    size = 0
    for who, principal in PRINCIPALS.items():
        ctx, auth = credentials(secured, who)
        for op, rtype, name, method, path, body, headers in actions(secured.cluster_id):
            status, raw, _ = request(f"{secured.url(1 + size % 2)}{path}", method, body, ctx=ctx,
                                     headers={**auth, **headers})
            size += 1
            assert status != 401, f"{who} was not authenticated: {raw[:200]!r}"
            assert status < 500, f"{who} {method} {path}: {status} {raw[:200]!r}"
            allowed, want = status != 403, expected(principal, op, rtype, name)
            if allowed != want:
                wrong.append(f"{principal} {op} {rtype}:{name} ({method} {path}) -> {status}, expected "
                             f"{'allowed' if want else 'denied'}: {raw[:120]!r}")
    print(f"authorization matrix: {len(PRINCIPALS)} principals x {size // len(PRINCIPALS)} (operation, "
          f"resource) = {size} decisions, {len(wrong)} wrong")
    assert not wrong, "\n".join(wrong)


def test_unauthenticated_wrong_password_and_expired_tokens_get_401(secured: Secured) -> None:
    url, ctx = f"{secured.url()}/topics/orders", secured.context()
    assert request(url, ctx=ctx)[0] == 401
    assert request(url, ctx=ctx, headers={"Authorization": "Basic " + "YWxpY2U6bm9wZQ=="})[0] == 401  # alice:nope
    assert request(url, ctx=ctx, headers={"Authorization": "Bearer odt1.e30.AAAA"})[0] == 401
    status, body, _ = request(f"{secured.url()}/auth/token?lifetime_ms=200", "POST", {}, ctx=ctx,
                              headers=basic("alice"))
    assert status == 200
    token = json.loads(body)["access_token"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert request(url, ctx=ctx, headers=bearer)[0] == 200
    deadline = time.monotonic() + TOKEN_EXPIRY_S
    while request(url, ctx=ctx, headers=bearer)[0] != 401:  # poll: the token expires 200 ms after issue
        assert time.monotonic() < deadline, "an expired token was still accepted"
        time.sleep(0.05)
    assert request(url, ctx=ctx, headers=bearer)[0] == 401


def test_impersonated_follower_gets_nothing_and_moves_nothing(secured: Secured) -> None:
    ctx, auth = credentials(secured, "alice")  # alice may read and write "orders": still no ClusterAction
    produce = {"Content-Type": "application/vnd.kafka.json.v2+json"}
    status, body, _ = request(f"{secured.url()}/topics/orders", "POST",
                              {"records": [{"value": {"n": i}} for i in range(5)]}, ctx=ctx,
                              headers={**auth, **produce})
    assert status == 200, body
    status, body, _headers = request(f"{secured.url()}/topics/orders/partitions/0/offsets", ctx=ctx, headers=auth)
    hw_before = json.loads(body)["end_offset"]
    health = json.loads(request(f"{secured.url()}/health", ctx=ctx)[1])  # /health publishes an epoch
    for broker in (1, 2):
        for replica in (1, 2):
            status, raw, _ = request(
                f"{secured.url(broker)}/topics/orders/partitions/0/batches?replica_id={replica}&offset={hw_before + 3}"
                f"&replica_epoch={health['broker_epoch']}&leader_epoch=0", ctx=ctx, headers=auth)
            assert status == 403 and b"CLUSTER_AUTHORIZATION_FAILED" in raw, (status, raw[:200])
    status, raw, _ = request(f"{secured.url()}/controller/controlled_shutdown", "POST",
                             {"broker_id": 2, "broker_epoch": health["broker_epoch"]}, ctx=ctx, headers=auth)
    assert status == 403
    after = json.loads(request(f"{secured.url()}/topics/orders/partitions/0/offsets", ctx=ctx, headers=auth)[1])
    assert after["end_offset"] == hw_before


def test_plaintext_is_refused_on_a_tls_listener(secured: Secured) -> None:
    port = int(secured.url().rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.request("GET", "/health")
        conn.getresponse()
    conn.close()
    with pytest.raises(ssl.SSLCertVerificationError):  # TLS with a CA that did not sign the broker: no
        request(f"{secured.url()}/health", ctx=ssl.create_default_context())


def test_zookeeper_without_credentials_cannot_change_cluster_state(secured: Secured) -> None:
    chroot = secured.cluster.chroot or ""
    kz = KazooClient(hosts=secured.cluster.ensemble.connect_string(None), timeout=10)
    kz.start(timeout=10)
    try:
        assert kz.exists(f"{chroot}/brokers/ids/1") is not None  # world READ stays (Kafka's default)
        attempts = [
            lambda: kz.create(f"{chroot}/brokers/ids/99", b"{}"),
            lambda: kz.set(f"{chroot}/brokers/topics/orders", b"{}"),
            lambda: kz.delete(f"{chroot}/controller"),
            lambda: kz.create(f"{chroot}/admin/delete_topics/orders"),
            lambda: kz.create(f"{chroot}/kafka-acl/Topic/orders2", b"{}"),
            lambda: kz.set(f"{chroot}/kafka-acl/Topic/orders", b'{"version":1,"acls":[]}'),
            lambda: kz.get(f"{chroot}/config/users/alice"),  # credentials: not even readable
            lambda: kz.get(f"{chroot}/delegation_token/secret"),
            lambda: kz.set_acls(f"{chroot}/brokers/ids", OPEN_ACL_UNSAFE),
        ]
        for i, attempt in enumerate(attempts):
            with pytest.raises(NoAuthError):
                attempt()
                pytest.fail(f"attempt {i} succeeded")
    finally:
        kz.stop()
        kz.close()


def test_client_round_trip_and_acl_change_applies_within_the_acl_watch_bound(secured: Secured) -> None:
    from odradek import Consumer, Producer, TopicPartition

    opts = {"ssl_cafile": secured.cafile, "sasl_username": "alice", "sasl_password": PASSWORDS["alice"]}
    bootstrap = secured.url(2).removeprefix("https://")  # no scheme: TLS comes from the options
    with Producer(bootstrap, acks="all", **opts) as p:
        sent = [p.send("orders", f"m{i}".encode(), key=b"k").result() for i in range(20)]
    consumer = Consumer(bootstrap, **opts)
    consumer.assign([TopicPartition("orders", 0)])
    consumer.seek(TopicPartition("orders", 0), sent[0].offset)
    got: list[bytes] = []
    deadline = time.monotonic() + SLOW_MACHINE_S
    while len(got) < 20 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [r.value for r in records]
    consumer.close()
    assert got[:20] == [f"m{i}".encode() for i in range(20)]

    url, (ctx, auth) = f"{secured.url()}/topics/other", credentials(secured, "dave")
    assert request(url, ctx=ctx, headers=auth)[0] == 403
    tool(secured.cluster, "acls", "--zookeeper", secured.cluster.zk_connect, "--add", "--allow-principal",
         "User:dave", "--operation", "Describe", "--topic", "other")
    changed = time.monotonic()
    while request(url, ctx=ctx, headers=auth)[0] == 403:
        assert time.monotonic() - changed < ACL_WATCH_S, "the new ACL did not apply by its watch"
        time.sleep(0.02)
    tool(secured.cluster, "acls", "--zookeeper", secured.cluster.zk_connect, "--remove", "--force",
         "--allow-principal", "User:dave", "--operation", "Describe", "--topic", "other")
    changed = time.monotonic()
    while request(url, ctx=ctx, headers=auth)[0] != 403:
        assert time.monotonic() - changed < ACL_WATCH_S, "the removed ACL still applied: its watch did not fire"
        time.sleep(0.02)
    listed = tool(secured.cluster, "acls", "--zookeeper", secured.cluster.zk_connect, "--list", "--topic", "orders")
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed


def test_rest_consumer_instances_belong_to_their_creator(secured: Secured) -> None:
    v2 = {"Content-Type": "application/vnd.kafka.v2+json", "Accept": "application/vnd.kafka.v2+json"}
    ctx_a, auth_a = credentials(secured, "alice")
    status, body, _ = request(f"{secured.url()}/consumers/billing", "POST", {"name": "alice-1",
                              "format": "json"}, ctx=ctx_a, headers={**auth_a, **v2})
    assert status == 200, body
    base = f"/consumers/billing/instances/{json.loads(body)['instance_id']}"
    ctx_b, auth_b = credentials(secured, "bob")  # bob may read the group, but this instance is alice's
    for broker in (1, 2):  # on the holder, and through the other broker (which forwards with bob's principal)
        status, raw, _ = request(f"{secured.url(broker)}{base}/subscription", ctx=ctx_b, headers={**auth_b, **v2})
        assert status == 403, (broker, status, raw[:200])
    status, raw, _ = request(f"{secured.url()}{base}/subscription", "POST", {"topics": ["logs-app"]}, ctx=ctx_a,
                             headers={**auth_a, **v2})
    assert status == 403 and b"TOPIC_AUTHORIZATION_FAILED" in raw  # alice may not read logs-app
    assert request(f"{secured.url()}{base}/subscription", "POST", {"topics": ["orders"]}, ctx=ctx_a,
                   headers={**auth_a, **v2})[0] == 204
    assert request(f"{secured.url()}{base}", "DELETE", None, ctx=ctx_a, headers={**auth_a, **v2})[0] == 204


def test_listings_show_only_what_each_principal_may_describe(secured: Secured) -> None:
    """Kafka's Metadata and ListGroups: topics need Topic Describe (implied by Read, Write, Delete, Alter), groups
    Group Describe unless the caller has Cluster Describe; super users see all. Predicted by the same model."""
    cid, admin = secured.cluster_id, secured.context("admin")
    for g in ("locked", "other-group"):  # standalone commits (no member, generation -1) make the groups exist
        status, raw, _ = request(f"{secured.url()}/groups/{g}/offsets", "POST",
                                 {"offsets": [{"topic": "orders", "partition": 0, "offset": 0},
                                              {"topic": "other", "partition": 0, "offset": 0}]}, ctx=admin)
        assert status in (200, 204), (g, status, raw[:200])

    def listed(who: str, broker: int) -> dict[str, set[str]]:
        ctx, auth = credentials(secured, who)

        def get(path: str, accept: str = "application/json") -> Any:
            status, raw, _ = request(f"{secured.url(broker)}{path}", ctx=ctx, headers={**auth, "Accept": accept})
            assert status == 200, (who, path, status, raw[:200])
            return json.loads(raw)

        return {"metadata": {t["name"] for t in get("/metadata")["topics"]},
                "v2": set(get("/topics", "application/vnd.kafka.v2+json")),
                "v3": {t["topic_name"] for t in get(f"/v3/clusters/{cid}/topics")["data"]},
                "groups": {g["group"] for g in get("/groups")["groups"]}}

    everything = listed("admin", 1)
    topics, all_groups = everything["v2"], everything["groups"]
    assert {"orders", "logs-app", "logs-secret", "other"} <= topics and {"locked", "other-group"} <= all_groups
    assert everything == {"metadata": topics, "v2": topics, "v3": topics, "groups": all_groups}
    for i, (who, principal) in enumerate(PRINCIPALS.items()):
        want = {t for t in topics if expected(principal, "Describe", "Topic", t)}
        groups = all_groups if expected(principal, "Describe", "Cluster", "kafka-cluster") else {
            g for g in all_groups if expected(principal, "Describe", "Group", g)}
        assert listed(who, 1 + i % 2) == {"metadata": want, "v2": want, "v3": want, "groups": groups}, who
    alice = listed("alice", 2)  # the model's answer, spelled out: Read on "orders", nothing on "other"
    assert "orders" in alice["v2"] and "other" not in alice["v2"]
    assert "locked" in alice["groups"] and "other-group" not in alice["groups"]  # Deny Read leaves Describe (Kafka)
    for who, want in (("alice", {"orders"}), ("admin", {"orders", "other"})):  # OffsetFetch: Topic Describe too
        ctx, auth = credentials(secured, who)
        status, raw, _ = request(f"{secured.url()}/groups/locked/offsets", ctx=ctx, headers=auth)
        assert status == 200 and {o["topic"] for o in json.loads(raw)["offsets"]} == want, (who, status, raw[:300])

    for who, want in (("alice", {"orders": None, "other": "TOPIC_AUTHORIZATION_FAILED",
                                 "no-such-topic": "TOPIC_AUTHORIZATION_FAILED"}),  # existence is not revealed
                      ("admin", {"orders": None, "other": None, "no-such-topic": "UNKNOWN_TOPIC"})):
        ctx, auth = credentials(secured, who)
        status, raw, _ = request(f"{secured.url()}/metadata?topics=orders,other,no-such-topic", ctx=ctx, headers=auth)
        assert status == 200, raw[:200]
        named = {t["name"]: t for t in json.loads(raw)["topics"]}
        assert {n: t["error"] for n, t in named.items()} == want, who
        assert {n for n, t in named.items() if t["partitions"]} == {n for n, e in want.items() if e is None}
    ctx, auth = credentials(secured, "alice")
    for path in ("/topics/other", f"/v3/clusters/{cid}/topics/other"):
        status, raw, _ = request(f"{secured.url()}{path}", ctx=ctx, headers=auth)
        assert status == 403 and b"TOPIC_AUTHORIZATION_FAILED" in raw, (path, status, raw[:200])

    # The clients read that answer as Kafka's do: an authorization error at once, not a wait for a topic to appear.
    from odradek import Consumer, Producer, TopicPartition
    from odradek.protocol.errors import TopicAuthorizationFailedError

    opts = {"ssl_cafile": secured.cafile, "sasl_username": "alice", "sasl_password": PASSWORDS["alice"]}
    bootstrap = secured.url(2).removeprefix("https://")
    # Waiting for the topic would take the producer's whole max_block_ms, far longer than a refusal on any machine.
    started = time.monotonic()
    with Producer(bootstrap, acks="all", max_block_ms=int(3 * SLOW_MACHINE_S * 1000), **opts) as p, \
            pytest.raises(TopicAuthorizationFailedError):
        p.send("other", b"v").result(timeout=4 * SLOW_MACHINE_S)
    consumer = Consumer(bootstrap, **opts)
    try:
        consumer.assign([TopicPartition("other", 0)])
        with pytest.raises(TopicAuthorizationFailedError):
            for _ in range(40):
                consumer.poll(timeout_ms=250)
    finally:
        consumer.close()
    assert time.monotonic() - started < SLOW_MACHINE_S, "an unauthorized topic was waited for instead of refused"


def test_zookeeper_security_migration_secures_and_unsecures_an_existing_tree(zk_ensemble: ZkEnsemble) -> None:
    chroot = f"/odradek-migrate-{uuid.uuid4().hex[:8]}"
    connect = zk_ensemble.connect_string(chroot)
    kz = KazooClient(hosts=zk_ensemble.connect_string(None), timeout=10)
    kz.start(timeout=10)
    try:
        for path in ("/cluster/id", "/brokers/topics/t", "/config/users/alice"):
            kz.create(chroot + path, b"{}", makepath=True)  # an old open cluster: world-writable znodes

        def migrate(mode: str) -> str:
            env = dict(os.environ, ODRADEK_ZK_DIGEST=ZK_DIGEST, PYTHONPATH=str(ROOT))
            proc = subprocess.run([sys.executable, "-m", "odradek_tools", "zookeeper-security-migration",
                                   "--zookeeper.acl", mode, "--zookeeper.connect", connect], env=env,
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, proc.stderr
            return proc.stdout

        assert "Set secure ACLs on" in migrate("secure")
        with pytest.raises(NoAuthError):
            kz.set(chroot + "/brokers/topics/t", b"x")
        with pytest.raises(NoAuthError):
            kz.create(chroot + "/brokers/topics/u", b"x")
        with pytest.raises(NoAuthError):
            kz.get(chroot + "/config/users/alice")
        assert kz.get(chroot + "/brokers/topics/t")[0] == b"{}"  # world READ stays
        migrate("unsecure")
        kz.set(chroot + "/brokers/topics/t", b"x")
    finally:
        kz.stop()
        kz.close()
