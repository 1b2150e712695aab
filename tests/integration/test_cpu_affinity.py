"""A broker started with ``--cpu-affinity`` runs every thread on those CPUs, the storage threads started after
the flag was applied included, and serves as any broker does."""

from __future__ import annotations

import os
from pathlib import Path

from broker.log.executor import DEFAULT_THREADS
from odradek.protocol.records import encode_batch
from tests.conftest import MakeCluster
from tests.harness.http import create_topic, request

BATCHES = "application/vnd.odradek.batches.v2"


def _threads_cpus(pid: int) -> dict[str, str]:
    """Each thread's name and id, and its ``Cpus_allowed_list``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        out[f"{fields['Name'].strip()}/{tid}"] = fields["Cpus_allowed_list"].strip()
    return out


def test_every_thread_of_a_pinned_broker_runs_on_its_cpus(make_cluster: MakeCluster) -> None:
    cpu = max(os.sched_getaffinity(0))
    cluster = make_cluster(brokers=1, broker_args=["--cpu-affinity", str(cpu)])
    url = cluster.broker_url(1)
    create_topic(url, "pinned", 2, 1, seen_by=[url])
    for p in (0, 1):  # appends and reads: the storage threads start and run
        status, body, _ = request("POST", f"{url}/topics/pinned/partitions/{p}/batches?acks=1",
                                  raw=encode_batch([(b"k", b"v%d" % i, 1_700_000_000_000, []) for i in range(10)]),
                                  content_type=BATCHES)
        assert status == 200, body
        status, body, _ = request("GET", f"{url}/topics/pinned/partitions/{p}/records?offset=0")
        assert status == 200 and len(body["records"]) == 10, body
    pid = cluster.broker_pid(1)
    assert pid is not None
    threads = _threads_cpus(pid)
    assert len(threads) > DEFAULT_THREADS, threads  # the storage threads (started at first use) are among them
    assert set(threads.values()) == {str(cpu)}, threads
