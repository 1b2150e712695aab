"""broker/kafka/writers.py writes what kio writes, for every schema kio has (requests, responses, headers and every
nested entity), on entities hypothesis builds from the schemas' own types."""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import inspect
import io
import pkgutil
import struct
import uuid
from typing import Any

import kio.schema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_writer as kio_writer
from kio.serial.errors import OutOfBoundValue
from kio.static.primitive import Records

from broker.kafka.codec import FETCH, PRODUCE, SUPPORTED, encode_request, make, nested, request_class, response_class
from broker.kafka.writers import entity_writer, uvarint

st.register_type_strategy(Records, st.binary(max_size=48))


def _schema_classes() -> list[type[Any]]:
    out = []
    for info in pkgutil.walk_packages(kio.schema.__path__, "kio.schema."):
        if info.ispkg:
            continue
        module = importlib.import_module(info.name)
        out += [c for c in vars(module).values()
                if inspect.isclass(c) and dataclasses.is_dataclass(c) and c.__module__ == module.__name__
                and hasattr(c, "__flexible__")]
    return out


CLASSES = _schema_classes()
# What the broker speaks, both ways, and the headers: drawing a message draws its nested entities too (their writers
# are the ones the message's writer calls).
SERVED = sorted({cls for key, (low, high) in SUPPORTED.items() for version in range(low, high + 1)
                 for cls in (request_class(key, version), response_class(key, version))}
                | {c for c in CLASSES if c.__name__.endswith("Header")}, key=lambda c: (c.__module__, c.__name__))


def _kio_bytes(cls: type[Any], entity: Any) -> bytes:
    buffer = io.BytesIO()
    kio_writer(cls)(buffer, entity)
    return buffer.getvalue()


def _ours(cls: type[Any], entity: Any) -> bytes:
    out: list[Any] = []
    entity_writer(cls)(out, entity)
    return b"".join(out)


def test_every_kio_schema_has_a_writer_here_exactly_when_kio_has_one() -> None:
    assert len(CLASSES) > 1000 and len(SERVED) > 200
    for cls in CLASSES:
        try:
            kio_writer(cls)
        except NotImplementedError:
            with pytest.raises(NotImplementedError):
                entity_writer(cls)
        else:
            entity_writer(cls)


@pytest.mark.parametrize("cls", SERVED, ids=lambda c: f"{c.__module__.removeprefix('kio.schema.')}.{c.__name__}")
def test_the_bytes_are_kios(cls: type[Any]) -> None:
    @settings(max_examples=3, suppress_health_check=list(HealthCheck), deadline=None, database=None)
    @given(st.from_type(cls))
    def same(entity: Any) -> None:
        assert _ours(cls, entity) == _kio_bytes(cls, entity)

    same()


def test_a_fetch_request_and_its_frame_as_kio_writes_them() -> None:
    """A follower's Fetch v15 (flexible, a uuid, a duration, a nested entity, tagged replica state absent) and a
    Produce v3 (legacy strings and bytes, a null transactional id)."""
    cls = request_class(FETCH, 15)
    body = make(cls, replica_state=make(nested(cls, "ReplicaState"), replica_id=2, replica_epoch=7),
                max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=9, session_epoch=3, rack_id="", topics=(make(
                    nested(cls, "FetchTopic"), topic_id=uuid.UUID(int=5), partitions=tuple(make(
                        nested(cls, "FetchPartition"), partition=i, current_leader_epoch=4, fetch_offset=1000 + i,
                        last_fetched_epoch=4, log_start_offset=0, partition_max_bytes=1 << 20) for i in range(6))),),
                forgotten_topics_data=())
    assert _ours(cls, body) == _kio_bytes(cls, body)
    produce = load_request_schema(PRODUCE, 3)
    body = make(produce, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(make(
        nested(produce, "TopicProduceData"), name="orders", partition_data=(make(
            nested(produce, "PartitionProduceData"), index=0, records=Records(b"\x01" * 300)),)),))
    frame = encode_request(PRODUCE, 3, 41, "client", body)
    header = produce.__header_schema__(request_api_key=0, request_api_version=3, correlation_id=41,
                                       client_id="client")
    expected = _kio_bytes(produce.__header_schema__, header) + _kio_bytes(produce, body)
    assert frame == struct.pack(">i", len(expected)) + expected


def test_lengths_past_their_prefix_are_refused_as_kio_refuses_them() -> None:
    produce = load_request_schema(PRODUCE, 3)
    topic = make(nested(produce, "TopicProduceData"), name="x" * (2**15), partition_data=())
    with pytest.raises(OutOfBoundValue):
        entity_writer(nested(produce, "TopicProduceData"))([], topic)
    with pytest.raises(OutOfBoundValue):
        kio_writer(nested(produce, "TopicProduceData"))(io.BytesIO(), topic)


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2**31 - 1, 2**35])
def test_uvarint(n: int) -> None:
    from kio.serial.writers import write_unsigned_varlong

    buffer = io.BytesIO()
    write_unsigned_varlong(buffer, n)
    assert uvarint(n) == buffer.getvalue()


def test_a_negative_uvarint_is_refused() -> None:
    with pytest.raises(ValueError):
        uvarint(-1)
