"""A producer whose flush timed out still ends cleanly: on close(), and when the interpreter exits without one.

A fault run's producer logged "cannot schedule new futures after shutdown" in a loop: its daemon sender thread
outlived the I/O pool (the interpreter's exit hook shuts every pool down while daemon threads still run), and each
sender round failed on ``submit``, was logged and retried. A refused ``submit`` now fails what was not sent and
ends the sender. The "broker" is a small HTTP server whose produce answers come late (then 503, retriable).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import pytest

from odradek import Producer
from odradek.protocol.errors import RequestTimedOutError
from tests.harness.wait import SLOW_MACHINE_S

ROOT = Path(__file__).resolve().parents[3]
# close(timeout=0.3) returns after its 0.3 s plus at most the one request in flight (answered after 1 s, and cut at
# request_timeout_ms=3 s): about 3.3 s at worst; a sender that never ends makes close never return. 30 s is ~10x the
# worst case, so a loaded machine stays under it.
CLOSE_BOUND_S = 30.0


class _SlowBroker(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    delay = 1.0

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: dict) -> None:
        raw = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # /metadata: one topic "t", one partition led by this server
        url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._answer(200, {"cluster_id": "c", "controller_id": 1, "brokers": [{"id": 1, "url": url}],
                           "topics": [{"name": "t", "partitions": [
                               {"partition": 0, "leader": 1, "leader_epoch": 0, "replicas": [1], "isr": [1]}]}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/producer_ids"):
            self._answer(200, {"producer_id": 1, "producer_epoch": 0})
            return
        threading.Event().wait(self.delay)
        self._answer(503, {"error_code": 50302, "message": "busy", "error": "BROKER_NOT_AVAILABLE",
                           "retriable": True})


@pytest.fixture
def broker() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowBroker)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_close_after_a_timed_out_flush_fails_what_is_outstanding_and_ends(broker: str,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="odradek.client.producer")
    producer = Producer(broker, request_timeout_ms=3000, retry_backoff_ms=20, linger_ms=0)
    futures = [producer.send("t", b"v", partition=0) for _ in range(20)]
    with pytest.raises(TimeoutError):
        producer.flush(timeout=0.3)
    started = time.monotonic()
    closer = threading.Thread(target=producer.close, kwargs={"timeout": 0.3}, daemon=True)
    closer.start()
    closer.join(CLOSE_BOUND_S)  # a close that never returns fails here instead of hanging the run
    assert not closer.is_alive() and time.monotonic() - started < CLOSE_BOUND_S
    assert not producer._sender.is_alive()
    assert all(f.done() and f.exception() is not None for f in futures)
    assert not [r for r in caplog.records if "sender round failed" in r.getMessage()]


def test_a_pool_shut_down_under_the_sender_fails_the_records_and_ends_the_sender(
        broker: str, caplog: pytest.LogCaptureFixture) -> None:
    """What the interpreter's exit hook does to a producer nobody closed (its sender is a daemon thread)."""
    caplog.set_level(logging.ERROR, logger="odradek.client.producer")
    producer = Producer(broker, request_timeout_ms=3000, retry_backoff_ms=20, linger_ms=0)
    try:
        producer.partitions_for("t")  # metadata first, so the send below goes straight to the sender
        producer._io.shutdown(wait=False)
        future = producer.send("t", b"v", partition=0)
        with pytest.raises(RequestTimedOutError, match="producer stopped"):
            future.result(timeout=SLOW_MACHINE_S)
        producer._sender.join(SLOW_MACHINE_S)
        assert not producer._sender.is_alive()
        assert not [r for r in caplog.records if "sender round failed" in r.getMessage()]
    finally:
        producer.close(timeout=1)


def test_an_interpreter_exiting_after_a_timed_out_flush_does_not_loop(broker: str) -> None:
    """The child's atexit hook (cleanup work, as the verify driver has) runs after the pools were shut down, while
    the daemon sender still runs and the in-flight request's retriable answer asks for a resend. The hook lasts
    until the sender has ended (at most SLOW_MACHINE_S), so the answer comes while the interpreter still runs
    however slow the machine: a sender that loops instead keeps logging until the hook gives up."""
    script = (
        "import atexit, logging, sys, time\n"
        "from odradek import Producer\n"
        "logging.basicConfig(level=logging.ERROR)\n"
        "atexit.register(lambda: p._sender.join(float(sys.argv[1])))\n"
        f"p = Producer({broker!r}, request_timeout_ms=3000, retry_backoff_ms=20, linger_ms=0)\n"
        "fs = [p.send('t', b'v', partition=0) for _ in range(10)]\n"
        "try:\n"
        "    p.flush(timeout=0.3)\n"
        "except TimeoutError:\n"
        "    print('flush timed out', flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", script, str(SLOW_MACHINE_S)], cwd=ROOT, capture_output=True,
                          text=True, timeout=3 * SLOW_MACHINE_S)
    assert "flush timed out" in done.stdout
    assert "cannot schedule new futures" not in done.stderr and "sender round failed" not in done.stderr, done.stderr
