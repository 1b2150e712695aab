"""The Kafka codec: header versions, flexible versions, the version table, and refusals."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v1.request import MetadataRequest as MetadataRequestV1
from kio.schema.metadata.v1.request import MetadataRequestTopic as MetadataRequestTopicV1
from kio.schema.metadata.v9.request import MetadataRequest as MetadataRequestV9
from kio.schema.metadata.v9.response import MetadataResponse as MetadataResponseV9
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer

from broker.kafka import codec
from odradek.protocol.errors import InvalidRequestError, UnsupportedVersionError


def write(entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def test_the_table_is_what_is_implemented_and_kio_has() -> None:
    assert codec.SUPPORTED == {0: (3, 11), 1: (4, 15), 2: (1, 7), 3: (0, 12), 18: (0, 4), 17: (0, 1), 36: (0, 2),
                               23: (2, 4),
                               # administration (issue 23)
                               19: (2, 7), 20: (1, 6), 21: (0, 2), 37: (0, 3), 32: (1, 4), 33: (0, 2), 44: (0, 1),
                               60: (0, 2), 35: (1, 5), 29: (1, 3), 30: (1, 3), 31: (1, 3), 48: (0, 1), 49: (0, 1),
                               # consumer groups (issue 23)
                               10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6), 16: (0, 5),
                               42: (0, 2), 8: (2, 9), 9: (1, 9), 47: (0, 0),
                               # idempotence and transactions (issue 23)
                               22: (0, 5), 24: (0, 4), 25: (0, 3), 26: (0, 4), 28: (0, 4), 61: (0, 0), 65: (0, 0),
                               66: (0, 1)}
    for key, (low, high) in codec.SUPPORTED.items():
        for v in range(low, high + 1):
            assert codec.request_class(key, v).__api_key__ == key
            assert codec.response_class(key, v).__version__ == v
    assert codec.is_supported(18, 4) and not codec.is_supported(18, 5) and not codec.is_supported(57, 0)


def test_a_non_flexible_request_has_a_v1_header() -> None:
    frame = write(RequestHeaderV1(request_api_key=3, request_api_version=1, correlation_id=77, client_id="c")) + \
        write(MetadataRequestV1(topics=(MetadataRequestTopicV1(name="t"),)))
    request = codec.decode_request(frame)
    assert request.header == codec.RequestHeader(3, 1, 77, "c")
    assert [t.name for t in request.body.topics] == ["t"]


def test_a_flexible_request_header_skips_its_tagged_fields() -> None:
    # v2 header by hand: the fixed part, then one tagged field (tag 5, 2 bytes) a newer client might send
    header = struct.pack(">hhih", 3, 9, 5, 3) + b"cli" + bytes([1, 5, 2]) + b"xy"
    body = write(MetadataRequestV9(topics=None, allow_auto_topic_creation=False,
                                   include_cluster_authorized_operations=False,
                                   include_topic_authorized_operations=False))
    request = codec.decode_request(header + body)
    assert request.header == codec.RequestHeader(3, 9, 5, "cli")
    assert request.body.topics is None and request.body.allow_auto_topic_creation is False


def test_a_null_client_id_is_read() -> None:
    frame = struct.pack(">hhih", 18, 0, 1, -1)
    assert codec.decode_request(frame).header.client_id is None


def test_unsupported_versions_and_malformed_bytes_are_typed_errors() -> None:
    with pytest.raises(UnsupportedVersionError) as e:
        codec.decode_request(struct.pack(">hhih", 18, 99, 1, -1) + b"whatever")
    assert e.value.kafka_code == 35 and e.value.details["api_version"] == 99
    with pytest.raises(UnsupportedVersionError):
        codec.decode_request(struct.pack(">hhih", 57, 0, 1, -1))  # an API not served at all
    with pytest.raises(InvalidRequestError):
        codec.decode_request(struct.pack(">hhih", 3, 1, 1, -1) + b"\x00\x00\x00\x05")  # 5 topics promised, none
    with pytest.raises(InvalidRequestError):
        codec.read_header(b"\x00\x03")  # not even a header
    assert codec.read_header(struct.pack(">hhih", 18, 99, 12345, -1)).correlation_id == 12345


def test_flexible_responses_carry_header_v1_and_api_versions_always_v0() -> None:
    body = codec.make(MetadataResponseV9, throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c",
                      controller_id=1, topics=(), cluster_authorized_operations=-2147483648, not_a_field=1)
    frame = codec.encode_response(3, 9, 42, body)
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    header, size = entity_reader(ResponseHeaderV1)(frame, 4)  # kio readers answer (value, bytes consumed)
    back, rest = entity_reader(MetadataResponseV9)(frame, 4 + size)
    assert header.correlation_id == 42 and size == 5 and back == body and 4 + size + rest == len(frame)

    versions = codec.make(ApiVersionsResponseV3, error_code=ErrorCode(0), api_keys=(),
                          throttle_time=datetime.timedelta(0))
    frame = codec.encode_response(18, 3, 43, versions)
    header0, size = entity_reader(ResponseHeaderV0)(frame, 4)
    assert header0.correlation_id == 43 and size == 4  # no tagged-field byte after the correlation id
    assert entity_reader(ApiVersionsResponseV3)(frame, 8)[0] == versions


def test_every_typed_error_named_as_a_kafka_error_carries_that_errors_code() -> None:
    """A name Kafka has (kio's ErrorCode, generated from Kafka's Errors) and the code sent for it agree: a wrong
    code tells a Kafka client something else (UNKNOWN_LEADER_EPOCH once went out as 76, which is
    UNSUPPORTED_COMPRESSION_TYPE)."""
    from kio.schema.errors import ErrorCode

    from odradek.protocol import errors

    def subclasses(cls: type) -> list[type]:
        return [c for s in cls.__subclasses__() for c in (s, *subclasses(s))]

    checked = {}
    for cls in subclasses(errors.OdradekError):
        kafka_name = getattr(cls, "name", "").lower()
        if kafka_name in ErrorCode.__members__ and getattr(cls, "kafka_code", None) is not None:
            checked[cls.__name__] = (cls.kafka_code, ErrorCode[kafka_name].value)
    assert len(checked) > 40
    assert {k: v for k, v in checked.items() if v[0] != v[1]} == {}
