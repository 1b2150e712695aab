"""A thousand long-polls sent to a broker that does not lead the partition must scale like a thousand sent to the
leader (issue 24, point 4): all of them wake with the record produced while they wait.

Before the forwarding broker coalesced its reads, every parked REST read held one of the inter-broker client's
``--inter-broker-max-connections`` (100) forward connections for its whole wait, the other 900 queued for one, and
so did the forwarded produce meant to wake them: in this test it was answered after 53 s, and 910 of the 1,000
reads answered empty (90 with the record, once connections came free after the first timeouts). Now identical
waiting reads share one upstream long-poll (broker/fetch/forwarded_reads.py): the 1,000 cost one connection to
the leader, and its answer is shared as bytes and rendered per request, whatever the embedded format asked for
(JSON or binary here).

Confluent's REST Proxy has no forwarding of its own: any proxy instance reads from the partition's leader through
a bounded pool of fetchers per broker (kafka-rest ``SimpleConsumerManager.consume`` / ``SimpleConsumerPool.get``),
and a request that finds no fetcher free within ``simple.consumer.pool.timeout.ms`` is refused with 50301 "No
SimpleConsumer is available at the time in the pool. The request can be retried" (``Errors.java``). Neither
parks a thousand requests behind a hundred connections: Confluent refuses the overflow, Odradek shares the
upstream wait (and bounds the upstream long-polls to half the forward connections, so the produce that wakes
them always finds one).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import time
import urllib.parse
from typing import Any

import aiohttp
import pytest

from tests.harness.http import JSON_V2, create_topic, metadata
from tests.harness.sockets import ESTABLISHED, socket_inodes, tcp_sockets
from tests.harness.wait import SLOW_MACHINE_S

pytestmark = pytest.mark.cluster

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
WAITERS = 1000
# The reads' wait, and the brokers' cap on it (--fetch-max-wait-ms, 30 s by default): the record is produced once
# the broker has read every request, which on a loaded machine may take up to SLOW_MACHINE_S, so the first reads
# must still be waiting then; with the 30 s default they could time out empty before the produce.
LONG_POLL_MS = 2 * int(SLOW_MACHINE_S * 1000)
TOPIC = "fanout"
PRODUCE_AFTER_S = 8.0  # the report's scenario: the record comes while the reads are well into their wait


def _port(url: str) -> int:
    port = urllib.parse.urlsplit(url).port
    assert port is not None, url
    return port


def _read_by_server(server_port: int) -> tuple[int, int]:
    """(connections of this process to ``server_port``, those whose request the server has read in full)."""
    mine = socket_inodes(os.getpid())
    sockets = tcp_sockets()
    client_ports = {s.local_port for s in sockets
                    if s.inode in mine and s.remote_port == server_port and s.state == ESTABLISHED}
    read = {s.remote_port for s in sockets if s.local_port == server_port and s.remote_port in client_ports
            and s.state == ESTABLISHED and s.rx_queue == 0}
    return len(client_ports), len(read)


def _connections_between(pid: int | None, server_port: int) -> int:
    """Open TCP connections process ``pid`` holds to ``server_port`` (the forwarding broker's to the leader)."""
    if pid is None:
        return -1
    held = socket_inodes(pid)
    return sum(1 for s in tcp_sockets() if s.inode in held and s.remote_port == server_port and s.state == ESTABLISHED)


async def _long_polls(url: str, leader_url: str, forwarder_pid: int | None) -> dict[str, Any]:
    """Send WAITERS long-polls at the log end to ``url``, produce one record through ``url`` too PRODUCE_AFTER_S
    into their wait, and collect every answer until SLOW_MACHINE_S after the produce."""
    loop = asyncio.get_running_loop()
    path = f"{url}/topics/{TOPIC}/partitions/0/records"
    params = {"offset": "0", "timeout": str(LONG_POLL_MS)}
    connector = aiohttp.TCPConnector(limit=WAITERS + 10, limit_per_host=WAITERS + 10)
    session_timeout = aiohttp.ClientTimeout(total=LONG_POLL_MS / 1000 + 2 * SLOW_MACHINE_S)
    async with aiohttp.ClientSession(connector=connector, timeout=session_timeout) as session:

        async def one(i: int) -> tuple[int, Any, float]:
            accept = JSON_V2 if i % 2 == 0 else BINARY_V2  # the embedded formats share one upstream read
            async with session.get(path, params=params, headers={"Accept": accept}) as resp:
                body = await resp.json(content_type=None)
                return resp.status, body, loop.time()

        started = loop.time()
        tasks = [asyncio.create_task(one(i)) for i in range(WAITERS)]
        # Produce once the broker has read every request (so they are parked there, or queued behind its
        # connections to the leader), not after a fixed sleep.
        parked_by, connected, read = started + SLOW_MACHINE_S, 0, 0
        while loop.time() < parked_by:
            connected, read = await asyncio.to_thread(_read_by_server, _port(url))
            if read >= WAITERS or any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.2)
        parked_after = loop.time() - started
        # The scenario, not a wait for a condition: the record comes PRODUCE_AFTER_S into the reads' wait.
        await asyncio.sleep(max(0.0, started + PRODUCE_AFTER_S - loop.time()))
        upstream = await asyncio.to_thread(_connections_between, forwarder_pid, _port(leader_url))
        # Through the same broker, as a client behind a load balancer would: the produce is forwarded too, so it
        # needs one of the forward connections the waiting reads must not all hold.
        produced = loop.time()
        try:
            async with session.post(f"{url}/topics/{TOPIC}/partitions/0", headers={"Content-Type": JSON_V2},
                                    data=json.dumps({"records": [{"value": "wake"}]}),
                                    timeout=aiohttp.ClientTimeout(total=SLOW_MACHINE_S)) as resp:
                produce_answer: Any = (resp.status, await resp.json(content_type=None), loop.time() - produced)
        except (aiohttp.ClientError, TimeoutError) as e:
            produce_answer = (None, repr(e), loop.time() - produced)
        done, pending = await asyncio.wait(tasks, timeout=SLOW_MACHINE_S)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    answers, failures = [], []
    for t in done:
        if t.exception() is not None:
            failures.append(repr(t.exception()))
        else:
            answers.append(t.result())
    return {"parked_after_s": parked_after, "connected_read": (connected, read), "upstream_connections": upstream,
            "produced": produced, "produce": produce_answer, "answers": answers, "failures": failures,
            "unanswered": len(pending)}


def test_a_thousand_forwarded_long_polls_all_wake_with_the_record(make_cluster: Any) -> None:
    """1,000 concurrent reads at the log end (timeout LONG_POLL_MS) to a broker that does not lead the partition; one
    record produced PRODUCE_AFTER_S in, through that same broker (so the produce is forwarded too). Every read
    answers 200 with that record, and within SLOW_MACHINE_S of the produce (a generous liveness bound, not a timing
    property: a read that sat out its timeout would answer without the record). Before coalescing, the reads held
    every forward connection until their timeout, so the produce queued behind them and most reads answered empty.
    Half ask for embedded JSON, half for binary: the formats do not split the upstream wait, so the forwarding
    broker holds a handful of connections to the leader, not one per waiting read."""
    cluster = make_cluster(brokers=3, broker_args=["--fetch-max-wait-ms", str(LONG_POLL_MS)])
    urls = [cluster.broker_url(b) for b in cluster.broker_ids()]
    create_topic(urls[0], TOPIC, partitions=1, replication_factor=3, seen_by=urls)
    leader = metadata(urls[0], TOPIC)["partitions"][0]["leader"]
    forwarder = next(b for b in cluster.broker_ids() if b != leader)

    t0 = time.monotonic()
    result = asyncio.run(_long_polls(cluster.broker_url(forwarder), cluster.broker_url(leader),
                                     cluster.broker_pid(forwarder)))
    elapsed = time.monotonic() - t0

    answers = result["answers"]
    def has_record(answer: tuple[int, Any, float]) -> bool:  # JSON "wake", or base64 of the JSON bytes '"wake"'
        status, body, _ = answer
        return status == 200 and [r["value"] for r in body.get("records", [])] in (["wake"], ["Indha2Ui"])

    with_record = [a for a in answers if has_record(a)]
    others = [a for a in answers if not has_record(a)]
    delays = sorted(at - result["produced"] for _, _, at in with_record)
    status, body, took = result["produce"]
    figures = (f"produce through the forwarder: {status} in {took:.2f} s; "
               f"{len(with_record)}/{WAITERS} answered with the record; {len(others)} other answers, "
               f"{len(result['failures'])} failures, {result['unanswered']} unanswered after {SLOW_MACHINE_S:.0f} s; "
               f"parked after {result['parked_after_s']:.1f} s (connected, read by the broker: "
               f"{result['connected_read']}); forwarder's connections to the leader while parked: "
               f"{result['upstream_connections']}; answered after the produce: "
               + (f"min {delays[0]:.2f} s, median {statistics.median(delays):.2f} s, max {delays[-1]:.2f} s"
                  if delays else "none") + f"; whole run {elapsed:.1f} s")
    print(figures)
    assert status == 200 and body["offsets"][0]["offset"] == 0, figures
    assert len(with_record) == WAITERS, (figures, others[:3], result["failures"][:3])
    assert delays[-1] < SLOW_MACHINE_S, figures
    # One upstream read per key (plus the follower's fetch connection and idle keep-alive ones), not one per read.
    assert 0 <= result["upstream_connections"] <= 10, figures
