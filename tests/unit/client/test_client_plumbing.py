"""Transport, metadata and fetch decoding: the parts of the client that need no broker to be checked."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from odradek.client.consumer import _decode
from odradek.client.metadata import Metadata, parse_metadata
from odradek.client.transport import Transport, _error_from, normalize_url, parse_bootstrap, quote_path
from odradek.client.types import TopicPartition
from odradek.protocol.errors import (
    BrokerNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicError,
)
from odradek.protocol.records import decode_batch, encode_batch, parse_header, rebuild_batch, set_base_offset

# ------------------------------------------------------------------------------------------------ addresses


def test_bootstrap_servers_accept_strings_lists_and_schemes() -> None:
    assert parse_bootstrap("127.0.0.1:9092, http://127.0.0.1:9093/,127.0.0.1:9092") == [
        "http://127.0.0.1:9092",
        "http://127.0.0.1:9093",
    ]
    assert parse_bootstrap(["localhost:1"]) == ["http://localhost:1"]
    assert normalize_url("https://b:443") == "https://b:443"
    with pytest.raises(ValueError):
        parse_bootstrap(" , ")


def test_path_segments_are_quoted() -> None:
    assert quote_path("topics", "a.b_c-1", "partitions", 3) == "/topics/a.b_c-1/partitions/3"
    assert quote_path("topics", "we/ird") == "/topics/we%2Fird"


# --------------------------------------------------------------------------------------------------- errors


def test_error_envelopes_become_typed_errors_with_details() -> None:
    body = {"error_code": 40903, "message": "not the leader", "error": "NOT_LEADER_OR_FOLLOWER",
            "retriable": True, "leader": 2, "leader_url": "http://127.0.0.1:9093"}
    err = _error_from(409, orjson.dumps(body), "http://x")
    assert isinstance(err, NotLeaderOrFollowerError) and err.retriable
    assert err.details == {"leader": 2, "leader_url": "http://127.0.0.1:9093"} and err.message == "not the leader"
    oor = _error_from(416, orjson.dumps({"error_code": 41601, "message": "m", "log_start_offset": 3,
                                         "high_watermark": 9}), "http://x")
    assert isinstance(oor, OffsetOutOfRangeError) and oor.details["high_watermark"] == 9


def test_bodies_without_an_envelope_still_map_to_errors() -> None:
    assert isinstance(_error_from(503, b"<html>busy</html>", "http://x"), BrokerNotAvailableError)
    err = _error_from(500, b"oops", "http://x")
    assert type(err) is UnknownServerError and "oops" in err.message
    assert type(_error_from(404, orjson.dumps({"error_code": 40401, "message": "m"}), "u")) is UnknownTopicError


# -------------------------------------------------------------------------------------- transport over TCP


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    connections: set[int] = set()

    def do_GET(self) -> None:
        _Handler.connections.add(id(self.connection))
        if self.path.startswith("/slow"):
            threading.Event().wait(1.0)
        if self.path.startswith("/missing"):
            body = orjson.dumps({"error_code": 40401, "message": "no topic", "error": "UNKNOWN_TOPIC"})
            self.send_response(404)
        else:
            body = orjson.dumps({"path": self.path})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # the client hanging up on /slow is the point of that request


@pytest.fixture
def server() -> Iterator[str]:
    httpd = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_transport_reuses_connections_and_raises_typed_errors(server: str) -> None:
    transport = Transport(request_timeout_ms=300)
    url = normalize_url(server)
    _Handler.connections.clear()
    for i in range(5):
        assert transport.get_json(url, "/a", query={"i": i}) == {"path": f"/a?i={i}"}
    with pytest.raises(UnknownTopicError, match="no topic"):
        transport.get_json(url, "/missing")
    assert len(_Handler.connections) == 1  # keep-alive, errors included
    with pytest.raises(RequestTimedOutError):
        transport.get_json(url, "/slow")
    assert transport.get_json(url, "/b") == {"path": "/b"}  # a fresh connection after the timeout
    transport.close()
    with pytest.raises(BrokerNotAvailableError):
        transport.get_json(url, "/c")


def test_a_refused_connection_is_broker_not_available() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(BrokerNotAvailableError) as info:
            Transport().get_json(f"http://127.0.0.1:{port}", "/metadata")
    assert info.value.retriable


# ------------------------------------------------------------------------------------------------- metadata

METADATA = {
    "cluster_id": "c1",
    "controller_id": 1,
    "brokers": [{"id": 1, "url": "http://127.0.0.1:9092", "rack": None},
                {"id": 2, "url": "127.0.0.1:9093", "rack": None}],
    "topics": [
        {"name": "t", "error": None, "partitions": [
            {"partition": 1, "leader": -1, "leader_epoch": 3, "replicas": [1, 2], "isr": []},
            {"partition": 0, "leader": 2, "leader_epoch": 5, "replicas": [2, 1], "isr": [2, 1]},
        ]},
        {"name": "gone", "error": "UNKNOWN_TOPIC", "partitions": []},
    ],
}


def test_metadata_answer_is_parsed_into_leaders() -> None:
    view = parse_metadata(METADATA)
    assert view.brokers == {1: "http://127.0.0.1:9092", 2: "http://127.0.0.1:9093"}
    t = view.topics["t"]
    assert [p.partition for p in t.partitions] == [0, 1] and t.available == (0,)
    assert view.topics["gone"].error == "UNKNOWN_TOPIC"


def test_leader_hint_applies_before_the_refresh() -> None:
    md = Metadata(Transport(), ["http://127.0.0.1:1"])
    md._view = parse_metadata(METADATA)
    assert md.leader_url("t", 0) == "http://127.0.0.1:9093" and md.leader_url("t", 1) is None
    md.hint_leader("t", 1, 1, "http://127.0.0.1:9092")
    assert md.leader_url("t", 1) == "http://127.0.0.1:9092" and md.topic("t").available == (0, 1)
    assert md.leader_url("nope", 0) is None and md.leader_url("t", 7) is None


def test_metadata_backoff_limits_refreshes() -> None:
    now = [100.0]
    md = Metadata(Transport(), ["http://127.0.0.1:1"], retry_backoff_ms=100, clock=lambda: now[0])
    assert not md.needs_refresh()  # no topic of interest yet: nothing to ask for
    md.add_topics(["t"])
    assert md.needs_refresh()  # never fetched
    md._last_attempt = md._last_success = 100.0
    assert not md.needs_refresh()
    md.request_update()
    assert not md.needs_refresh()  # within the backoff
    now[0] = 100.2
    assert md.needs_refresh()


# ---------------------------------------------------------------------------------------------- fetch decode


def _stamped(batch: bytes, base: int) -> bytes:
    buf = bytearray(batch)
    set_base_offset(buf, 0, base, 0)
    return bytes(buf)


def test_fetch_decoding_skips_records_below_the_position_and_ends_at_the_batch_end() -> None:
    tp = TopicPartition("t", 0)
    first = _stamped(encode_batch([(b"k", str(i).encode(), 1000 + i, ()) for i in range(5)]), 10)  # 10..14
    second = _stamped(encode_batch([(None, b"x", 2000, (("h", b"v"),))]), 15)
    records, next_offset = _decode(tp, first + second, 12)
    assert [(r.offset, r.value) for r in records] == [(12, b"2"), (13, b"3"), (14, b"4"), (15, b"x")]
    assert records[-1].headers == (("h", b"v"),) and records[0].timestamp == 1002
    assert next_offset == 16
    assert _decode(tp, b"", 7) == ([], 7)


def test_fetch_decoding_steps_over_compaction_gaps_and_control_batches() -> None:
    tp = TopicPartition("t", 0)
    full = _stamped(encode_batch([(b"k", str(i).encode(), 0, ()) for i in range(4)]), 0)  # 0..3
    compacted = rebuild_batch(parse_header(full), decode_batch(full)[:2])  # keeps 0, 1; still ends at 3
    control = _stamped(encode_batch([(b"\x00\x00\x00\x00", b"", 0, ())], is_control=True), 4)
    records, next_offset = _decode(tp, compacted + control, 0)
    assert [r.offset for r in records] == [0, 1] and next_offset == 5
