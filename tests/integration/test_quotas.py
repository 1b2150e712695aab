"""Client quotas (producer_byte_rate, consumer_byte_rate per client id), set with scripts/odradek-configs.sh and
enforced by a running broker without a restart: a producing and a consuming client are held to the quota (measured
on the receiving side over the middle of the transfer: at most 20% over it, and not far under it), and responses
carry the throttle time
(KIP-219: the answer goes out at once, the client's next request waits). User quotas (KIP-55) on a TLS cluster:
a SCRAM user's quota, set with the configs tool, holds that user whatever its client ids (one shared budget),
before the <default> client quota, except for the client id of a nested user+client quota (Kafka's
/config/users/<user>/clients/<client id>, also set with the tool), which has its own; a super user (a broker's
peer) is not throttled."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from odradek import Producer
from odradek.protocol import media
from odradek.protocol.records import iter_batch_headers
from odradek_local.cluster import LocalCluster
from odradek_local.security import admin_files
from odradek_local.zookeeper import ZkEnsemble
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import request
from tests.harness.ports import free_port_block
from tests.harness.wait import SLOW_MACHINE_S, wait_until

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
QUOTA = 256 * 1024
TOTAL = 2_500_000
VALUE = bytes(range(256)) * 20  # 5 KB
RATE_CEILING = 1.2
"""A held client's measured rate is at most this times its quota: the property, whatever the machine's load."""
RATE_FLOOR = 0.6
"""...and at least this times its quota. Looser than the ceiling because a loaded machine can only make a client
slower; it still excludes a broker that counts a request's bytes twice or throttles by the wrong quota."""
PROBE_BYTES = 600 * 1000
"""A probe's record bytes (its JSON envelope adds a little more): at the quota, a debt of PROBE_DEBT_MS."""
PROBE_DEBT_MS = 1000 * PROBE_BYTES / QUOTA
DEBT_SLACK_MS = 500
"""How much earlier than its answer's arrival the broker may have recorded a probe's debt (the time from its
accounting to the client reading the answer), so how much longer the debt may have decayed between two probes."""


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "scripts" / script), *args], capture_output=True, text=True,
                          timeout=2 * SLOW_MACHINE_S,
                          check=False)


def setup(make_cluster: MakeCluster, topic: str) -> LocalProcessBackend:
    cluster = make_cluster(brokers=1)
    url = cluster.broker_url(1)
    for name in (topic, "probes"):  # the probes' big batches go elsewhere: they would skew a reader's samples
        done = run("odradek-topics.sh", "--bootstrap-server", url, "--create", "--topic", name, "--partitions", "1",
                   "--replication-factor", "1")
        assert done.returncode == 0, done.stderr
    for client, key in (("qp", "producer_byte_rate"), ("qc", "consumer_byte_rate"), ("probe", "producer_byte_rate")):
        done = run("odradek-configs.sh", "--bootstrap-server", url, "--alter", "--entity-type", "clients",
                   "--entity-name", client, "--add-config", f"{key}={QUOTA}")
        assert done.returncode == 0, done.stderr

    def throttled_probe() -> bool:  # the last entity written is applied: so are the others (one re-read)
        status, _body, headers = probe(url, "probes")
        return status == 200 and int(headers.get("Odradek-Throttle-Time-Ms", "0")) > 0

    wait_until(throttled_probe, SLOW_MACHINE_S, "the broker to apply the quota (without a restart)", interval=0.2)
    return cluster


def probe(url: str, topic: str, headers: dict[str, str] | None = None,
          ctx: ssl.SSLContext | None = None) -> tuple[int, object, dict[str, str]]:
    values = [{"value": "x" * 1000} for _ in range(PROBE_BYTES // 1000)]  # more than two seconds of the quota
    req = urllib.request.Request(f"{url}/topics/{topic}/partitions/0?acks=1", method="POST",
                                 data=json.dumps({"records": values}).encode(),
                                 headers={"Content-Type": "application/vnd.kafka.json.v2+json",
                                          **({"Odradek-Client-Id": "probe"} if headers is None else headers)})
    with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
        return resp.status, json.loads(resp.read()), dict(resp.headers)


def window_rate(samples: list[tuple[float, int]], total: int) -> float:
    window = [s for s in samples if total * 0.1 <= s[1] <= total * 0.9]
    assert len(window) >= 4, samples[-10:]
    (t0, b0), (t1, b1) = window[0], window[-1]
    return (b1 - b0) / (t1 - t0)


def test_a_produce_quota_holds_the_client_and_reports_the_throttle_time(make_cluster: MakeCluster) -> None:
    cluster = setup(make_cluster, "qt")
    url = cluster.broker_url(1)
    status, body, headers = probe(url, "probes")
    assert status == 200 and int(headers["Odradek-Throttle-Time-Ms"]) > 0
    assert isinstance(body, dict) and body["throttle_time_ms"] == int(headers["Odradek-Throttle-Time-Ms"])

    def log_size() -> int:
        _, got, _ = request("GET", f"{url}/admin/log_dirs")
        return sum(r["size"] for d in got["log_dirs"] for r in d["replicas"] if r["topic"] == "qt")

    base = log_size()
    samples: list[tuple[float, int]] = []
    with Producer(url, acks="1", batch_size=32 * 1024, linger_ms=5, max_request_size=64 * 1024,
                  client_id="qp") as p:
        futures = [p.send("qt", VALUE, partition=0) for _ in range(TOTAL // len(VALUE))]
        while not all(f.done() for f in futures):
            size = log_size() - base
            samples.append((time.monotonic(), size))  # timed once the size is known: its request may be slow
            time.sleep(0.2)
        for f in futures:
            f.result()
    rate = window_rate(samples, TOTAL)
    print(f"producer held at {rate / 1024:.0f} KiB/s under a {QUOTA / 1024:.0f} KiB/s quota")
    assert RATE_FLOOR * QUOTA <= rate <= RATE_CEILING * QUOTA, rate


def test_a_fetch_quota_holds_the_consumer(make_cluster: MakeCluster) -> None:
    """A consumer that ignores the throttle hint (fetching back to back) is still held to its quota: the broker
    mutes it (KIP-219). Measured as the bytes it receives, which is what the broker counts."""
    cluster = setup(make_cluster, "qf")
    url = cluster.broker_url(1)
    with Producer(url, acks="1", batch_size=64 * 1024, client_id="loader") as p:
        for _ in range(TOTAL // len(VALUE)):
            p.send("qf", VALUE, partition=0)
    offset, got, samples, throttles = 0, 0, [], []
    deadline = time.monotonic() + 2 * SLOW_MACHINE_S  # ~10 s at the quota; the rate is the property
    while got < TOTAL and time.monotonic() < deadline:
        req = urllib.request.Request(f"{url}/topics/qf/partitions/0/batches?offset={offset}&max_bytes=65536",
                                     headers={"Accept": media.BATCHES, "Odradek-Client-Id": "qc"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
            throttles.append(int(resp.headers["Odradek-Throttle-Time-Ms"]))
        got += len(data)
        offset = max([offset, *(h.next_offset for _, h in iter_batch_headers(data))])
        samples.append((time.monotonic(), got))
    rate = window_rate(samples, TOTAL)
    print(f"consumer held at {rate / 1024:.0f} KiB/s under a {QUOTA / 1024:.0f} KiB/s quota")
    assert max(throttles) > 0
    assert RATE_FLOOR * QUOTA <= rate <= RATE_CEILING * QUOTA, rate


def test_a_user_quota_holds_an_authenticated_user_across_its_client_ids(zk_ensemble: ZkEnsemble,
                                                                        tmp_path: Path) -> None:
    """alice (SCRAM) has producer_byte_rate=256 KiB/s, set with the configs tool; the <default> client quota is
    1 B/s. alice's requests, with no client id and then another one, spend one budget at her rate (her quota wins
    over the client default, KIP-55); her claim to be a broker is ignored; with client id app1 she has the nested
    alice+app1 quota (4 MiB/s, written by the tool in Kafka's two --entity-type syntax while the broker runs), a
    budget of its own; the admin (a super user) is exempt."""
    cluster = LocalCluster(tmp_path / "tls", brokers=1, base_port=free_port_block(1), session_timeout_ms=6000,
                           chroot=f"/odradek-quota-{uuid.uuid4().hex[:8]}", ensemble=zk_ensemble, tls=True,
                           broker_args=["--allow-everyone-if-no-acl-found", "true"])
    try:
        cluster.up(timeout=60)
        url, files = cluster.broker_url(1), admin_files(cluster)
        admin = ssl.create_default_context(cafile=files["ssl_cafile"])
        admin.load_cert_chain(files["ssl_certfile"], files["ssl_keyfile"])
        user_ctx = ssl.create_default_context(cafile=files["ssl_cafile"])
        # the nested entity first: once the broker applies alice's (written after it), it has applied this too
        for entity in (["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                        "--entity-name", "app1", "--add-config", f"producer_byte_rate={16 * QUOTA}"],
                       ["--entity-type", "users", "--entity-name", "alice", "--add-config",
                        f"SCRAM-SHA-256=[iterations=4096,password=alice-pw],producer_byte_rate={QUOTA}"]):
            done = subprocess.run([sys.executable, "-m", "odradek_tools", "configs", "--zookeeper", cluster.zk_connect,
                                   "--alter", *entity], capture_output=True, text=True, timeout=60, check=False,
                                  cwd=ROOT)
            assert done.returncode == 0, done.stderr
        with urllib.request.urlopen(urllib.request.Request(f"{url}/v3/clusters"), context=admin) as resp:
            v3 = f"{url}/v3/clusters/{json.loads(resp.read())['data'][0]['cluster_id']}"
        for path, body in ((f"{v3}/topics", {"topic_name": "qu", "partitions_count": 1, "replication_factor": 1}),
                           (f"{v3}/clients/%3Cdefault%3E/configs:alter",  # after alice's: both apply together
                            {"data": [{"name": "producer_byte_rate", "value": "1", "operation": "SET"}]})):
            req = urllib.request.Request(path, method="POST", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, context=admin) as resp:
                assert resp.status < 300
        alice = {"Authorization": "Basic " + base64.b64encode(b"alice:alice-pw").decode()}

        def throttled() -> int:
            status, _body, headers = probe(url, "qu", alice, user_ctx)
            return status == 200 and int(headers.get("Odradek-Throttle-Time-Ms", "0"))

        first = wait_until(throttled, SLOW_MACHINE_S, "the broker to apply alice's quota", interval=0.2)
        first_at = time.monotonic()
        # ~600 KB at 256 KiB/s is ~2.3 s; the <default> client's 1 B/s would be the 30 s cap
        assert 1000 <= first <= 4000, first
        status, body, headers = probe(url, "qu", {**alice, "Odradek-Client-Id": "other",
                                                  "Odradek-Inter-Broker": "1"}, user_ctx)
        elapsed_ms = 1000 * (time.monotonic() - first_at)
        second = int(headers["Odradek-Throttle-Time-Ms"])
        assert status == 200 and isinstance(body, dict) and body["throttle_time_ms"] == second
        print(f"alice's throttle: {first} ms, then {second} ms {elapsed_ms:.0f} ms later")
        # The same budget, still in debt: the first probe's debt, less what the quota paid off in real time
        # between the two answers, plus the second probe's. Not the <default> client's 30 s cap, nor nothing.
        assert first + PROBE_DEBT_MS - elapsed_ms - DEBT_SLACK_MS <= second <= first + 4000, (
            first, second, elapsed_ms)
        # ~600 KB at 4 MiB/s is ~150 ms: the nested quota's own budget, not alice's (in debt by seconds)
        status, body, headers = probe(url, "qu", {**alice, "Odradek-Client-Id": "app1"}, user_ctx)
        nested = int(headers["Odradek-Throttle-Time-Ms"])
        assert status == 200 and 0 < nested < 1000, (nested, second)
        status, body, headers = probe(url, "qu", {}, admin)
        assert status == 200 and "Odradek-Throttle-Time-Ms" not in headers and "throttle_time_ms" not in body
    finally:
        cluster.down()
