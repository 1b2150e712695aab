"""Client quotas (producer_byte_rate, consumer_byte_rate per client id), set with scripts/odradek-configs.sh and
enforced by a running broker without a restart: a producing and a consuming client are held within 20% of the
quota (measured on the receiving side over the middle of the transfer), and responses carry the throttle time
(KIP-219: the answer goes out at once, the client's next request waits)."""

from __future__ import annotations

import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from odradek import Producer
from odradek.protocol import media
from odradek.protocol.records import iter_batch_headers
from tests.conftest import MakeCluster
from tests.harness.cluster import LocalProcessBackend
from tests.harness.http import request
from tests.harness.wait import wait_until

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
QUOTA = 256 * 1024
TOTAL = 2_500_000
VALUE = bytes(range(256)) * 20  # 5 KB


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "scripts" / script), *args], capture_output=True, text=True, timeout=60,
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

    wait_until(throttled_probe, 20, "the broker to apply the quota (without a restart)", interval=0.2)
    return cluster


def probe(url: str, topic: str) -> tuple[int, object, dict[str, str]]:
    import urllib.request

    values = [{"value": "x" * 1000} for _ in range(600)]  # ~600 KB: more than two seconds of the quota
    req = urllib.request.Request(f"{url}/topics/{topic}/partitions/0?acks=1", method="POST",
                                 data=__import__("json").dumps({"records": values}).encode(),
                                 headers={"Content-Type": "application/vnd.kafka.json.v2+json",
                                          "Odradek-Client-Id": "probe"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status, __import__("json").loads(resp.read()), dict(resp.headers)


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
            samples.append((time.monotonic(), log_size() - base))
            time.sleep(0.2)
        for f in futures:
            f.result()
    rate = window_rate(samples, TOTAL)
    print(f"producer held at {rate / 1024:.0f} KiB/s under a {QUOTA / 1024:.0f} KiB/s quota")
    assert abs(rate - QUOTA) <= 0.2 * QUOTA, rate


def test_a_fetch_quota_holds_the_consumer(make_cluster: MakeCluster) -> None:
    """A consumer that ignores the throttle hint (fetching back to back) is still held to its quota: the broker
    mutes it (KIP-219). Measured as the bytes it receives, which is what the broker counts."""
    cluster = setup(make_cluster, "qf")
    url = cluster.broker_url(1)
    with Producer(url, acks="1", batch_size=64 * 1024, client_id="loader") as p:
        for _ in range(TOTAL // len(VALUE)):
            p.send("qf", VALUE, partition=0)
    offset, got, samples, throttles = 0, 0, [], []
    deadline = time.monotonic() + 60
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
    assert abs(rate - QUOTA) <= 0.2 * QUOTA, rate
