"""Kafka request and response framing above the size prefix: headers, bodies, and the versions served.

Every message schema is kio's (generated from Kafka's published JSON message definitions); nothing here is a
hand-written schema. Bodies are read by kio's native readers and written by writers compiled from kio's schemas
(broker/kafka/writers.py: kio's bytes, without its per-field overhead). What this module adds is Kafka's header
rules:

* a request header is v1 (api key, api version, correlation id, nullable client id) for a non-flexible
  request version and v2 (the same plus tagged fields) for a flexible one; the first four fields have the same
  layout in both, so the correlation id can always be read, even of a request we cannot parse;
* a response header is v0 (correlation id) or v1 (plus tagged fields), as the response schema says; ApiVersions
  always answers with v0, so a client that does not know the broker's versions yet can read the answer;
* ``SUPPORTED`` is what ``KafkaApis`` implements intersected with the versions kio has schemas for, request and
  response alike; it is what ApiVersions advertises, and nothing outside it is decoded.

The client side of the same rules (``encode_request``, ``response_correlation_id``, ``decode_response``) is for a
broker calling another broker's Kafka listener (broker/kafka/channel.py).
"""

from __future__ import annotations

import functools
import struct
import sys
from dataclasses import dataclass, fields
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader
from kio.serial.readers import read_unsigned_varint
from kio.static.constants import EntityType

from broker.kafka.writers import entity_writer
from odradek.protocol.errors import InvalidRequestError, UnsupportedVersionError

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_FOR_LEADER_EPOCH = 23
API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
# Idempotence and transactions (broker/kafka/transactions.py)
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66

# What KafkaApis implements, by API key: (lowest, highest) version. Bounds chosen on purpose:
# Produce from v3 (the v2 record batch format), up to v11 (v12 asks the broker to add partitions to
# transactions implicitly, KIP-890); Fetch from v4 (aborted transactions and the last stable offset) up to v15
# (v13 names topics by id, v15 carries a replica's broker epoch, KIP-903; v16's node endpoints and v17's directory
# ids are not served); ListOffsets up to v7 (v7's max-timestamp query reads each segment's largest
# timestamp, kept in memory, then one batch; v8 and v9 are tiered storage's); Metadata up to v12; ApiVersions
# v0-v4; OffsetForLeaderEpoch from v2 (kio has no v0-v1: librdkafka asks v2, the Java client v3-v4).
IMPLEMENTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 11),
    FETCH: (4, 15),
    LIST_OFFSETS: (1, 7),
    OFFSET_FOR_LEADER_EPOCH: (0, 4),
    METADATA: (0, 12),
    API_VERSIONS: (0, 4),
    SASL_HANDSHAKE: (0, 1),  # v0: raw SASL tokens follow; v1: SaslAuthenticate requests (broker/kafka/sasl.py)
    SASL_AUTHENTICATE: (0, 2),  # v1+ carries the session lifetime (KIP-368; always 0: no re-authentication)
    # Transactions up to the versions before KIP-890's second half (transaction version 2: implicit
    # AddPartitionsToTxn, an epoch bump per transaction): InitProducerId v5 (v6 is KIP-939's two-phase commit),
    # AddPartitionsToTxn v4 (v0-v3 clients, v4 brokers), AddOffsetsToTxn v3, EndTxn v4, TxnOffsetCommit v4;
    # ListTransactions v1 (v2's id pattern is a Java regular expression).
    INIT_PRODUCER_ID: (0, 5),
    ADD_PARTITIONS_TO_TXN: (0, 4),
    ADD_OFFSETS_TO_TXN: (0, 3),
    END_TXN: (0, 4),
    TXN_OFFSET_COMMIT: (0, 4),
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    # Administration (broker/kafka/admin.py), every version kio has (its oldest are newer than some here).
    19: (0, 7),  # CreateTopics (v5+: the created topic's configs; v7: its id)
    20: (0, 6),  # DeleteTopics (v6: by topic id)
    21: (0, 2),  # DeleteRecords
    37: (0, 3),  # CreatePartitions
    32: (0, 4),  # DescribeConfigs (v1+: synonyms; v3+: types and documentation)
    33: (0, 2),  # AlterConfigs
    44: (0, 1),  # IncrementalAlterConfigs
    60: (0, 2),  # DescribeCluster (v1: endpoint type; v2: fenced brokers, never any here)
    35: (0, 5),  # DescribeLogDirs (v4: total/usable bytes, -1 here; v5: cordoned, never here)
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    # Consumer groups (broker/kafka/groups.py, group_offsets.py, coordinators.py): every version kio has, but
    # OffsetCommit v10 and OffsetFetch v10 (topics named by id only).
    10: (0, 6),  # FindCoordinator (v4+: a batch of keys; v6's share-group key type is INVALID_REQUEST)
    11: (0, 9),  # JoinGroup (v4+: MEMBER_ID_REQUIRED; v5+: static members)
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup (v3+: a batch of members)
    14: (0, 5),  # SyncGroup (v5: protocol type and name)
    15: (0, 6),  # DescribeGroups (v6: GROUP_ID_NOT_FOUND for an unknown group)
    16: (0, 5),  # ListGroups (v4: states filter; v5: types filter)
    42: (0, 2),  # DeleteGroups
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch (v8+: several groups)
    47: (0, 0),  # OffsetDelete
}

_SIZE = struct.Struct(">i")


def _kio_versions(api_key: int) -> set[int]:
    """Versions kio has both a request and a response schema for."""
    entry = schema_name_map.get(api_key_map.get(api_key, ""), {})
    return {v for v, kinds in entry.items() if EntityType.request in kinds and EntityType.response in kinds}


def _supported() -> dict[int, tuple[int, int]]:
    table: dict[int, tuple[int, int]] = {}
    for key, (low, high) in IMPLEMENTED.items():
        both = sorted(v for v in _kio_versions(key) if low <= v <= high)
        if both:
            # Kafka advertises a range: keep the contiguous run from the lowest version both sides have.
            end = both[0]
            while end + 1 in both:
                end += 1
            table[key] = (both[0], end)
    return table


SUPPORTED: dict[int, tuple[int, int]] = _supported()


def is_supported(api_key: int, version: int) -> bool:
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class Request:
    header: RequestHeader
    body: Any  # the kio request entity of (api_key, api_version)


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    return load_request_schema(api_key, version)


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    return load_response_schema(api_key, version)


@functools.cache
def _reader(cls: type[Any]) -> Any:
    return entity_reader(cls)


_read_header_v1 = entity_reader(RequestHeaderV1)  # kio readers answer (value, bytes consumed)
_CLIENT_ID_AT = 8  # after api_key (int16), api_version (int16) and correlation_id (int32)
_CLIENT_ID_LENGTH = struct.Struct(">h")  # a nullable string's length: -1 for null


def read_header(frame: bytes | memoryview) -> RequestHeader:
    """The header's fixed part (v1 layout), whatever the API and version: enough to answer or to refuse.

    Raises InvalidRequestError when even that cannot be read."""
    try:
        h, _ = _read_header_v1(frame, 0)
    except Exception as e:
        raise InvalidRequestError(f"unreadable request header: {e}") from None
    return RequestHeader(int(h.request_api_key), int(h.request_api_version), int(h.correlation_id), h.client_id)


def decode_request(frame: bytes | memoryview, header: RequestHeader | None = None) -> Request:
    """Header and body of a request at a supported version. ``header``: ``read_header(frame)``, when the caller
    has read it already (it is not read twice).

    Raises:
        UnsupportedVersionError: the API key or version is not served (the caller decides how to answer).
        InvalidRequestError: the bytes do not parse as that request.
    """
    if header is None:
        header = read_header(frame)
    if not is_supported(header.api_key, header.api_version):
        raise UnsupportedVersionError(f"API {header.api_key} version {header.api_version} is not supported",
                                      api_key=header.api_key, api_version=header.api_version)
    cls = request_class(header.api_key, header.api_version)
    try:
        pos = _header_end(frame, cls.__flexible__)
        body, _ = _reader(cls)(frame, pos)
    except Exception as e:
        raise InvalidRequestError(f"malformed {api_key_map.get(header.api_key, header.api_key)} "
                                  f"v{header.api_version} request: {e}") from None
    return Request(header, body)


def _header_end(frame: bytes | memoryview, flexible: bool) -> int:
    """Where the body starts: after the v1 fields and, in a v2 header, its tagged fields, skipped whatever their
    tags (Kafka's rule for tags a reader does not know; the header defines none). The v1 fields' end is found
    from the client id's length alone (``read_header`` has checked them)."""
    (client_id_length,) = _CLIENT_ID_LENGTH.unpack_from(frame, _CLIENT_ID_AT)
    pos = _CLIENT_ID_AT + _CLIENT_ID_LENGTH.size + max(0, client_id_length)
    if flexible:
        count, n = read_unsigned_varint(frame, pos)
        pos += n
        for _ in range(count):
            _tag, n = read_unsigned_varint(frame, pos)
            pos += n
            size, n = read_unsigned_varint(frame, pos)
            pos += n + size
        if pos > len(frame):
            raise ValueError("the header's tagged fields run past the request")
    return pos


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """The whole frame: size, the response header the schema names (v0 or v1), the body."""
    cls = type(body)
    header_cls = cls.__header_schema__
    out: list[Any] = [b""]  # the size, once known; pieces joined once (record batches are not copied twice)
    entity_writer(header_cls)(out, header_cls(correlation_id=correlation_id))
    entity_writer(cls)(out, body)
    out[0] = _SIZE.pack(sum(map(len, out)))
    return b"".join(out)


def make(cls: type[Any], **values: Any) -> Any:
    """An instance of a kio entity from the values its version has fields for; others are dropped.

    Why: the handlers build one answer for every version of an API, and each version's schema is its own class
    with its own fields (``log_start_offset`` from Produce v5, ``leader_epoch`` from Metadata v7, ...)."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


@functools.cache
def _field_names(cls: type[Any]) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def nested(cls: type[Any], name: str) -> type[Any]:
    """A nested entity class of a kio message (``PartitionData`` of ``FetchResponse`` v12): they live in the
    same generated module."""
    return getattr(sys.modules[cls.__module__], name)


def has_field(cls: type[Any], name: str) -> bool:
    return name in _field_names(cls)


# ------------------------------------------------------------------------------------------------ client side
# The other end of the same rules, for a broker that calls another broker's Kafka listener (broker/kafka/channel.py):
# a request goes out with the header its schema names (v1, or v2 when flexible; kio knows), an answer is read with
# the response header its schema names (v0 or v1; ApiVersions' always v0).

_CORRELATION = struct.Struct(">i")
_ERROR_CODE = struct.Struct(">h")
_UNSUPPORTED_VERSION = 35


class WrittenRequest:
    """A request that writes its own frame (a hot path's, without kio entities: broker/kafka/fetch_request.py):
    what ``KafkaChannel.send`` sends instead of a kio entity. Its answer is read as any other."""

    __slots__ = ()
    api_key: int
    version: int

    def frame(self, correlation_id: int, client_id: str | None) -> bytes:
        """The whole request frame, size prefix included."""
        raise NotImplementedError


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """The whole request frame: size, the request header the schema names (v1 or v2), ``body``.

    Raises:
        UnsupportedVersionError: kio has no request schema for ``(api_key, version)``.
        InvalidRequestError: ``body`` is not an instance of that schema (a caller's mistake, never sent).
    """
    try:
        cls = request_class(api_key, version)
    except Exception:
        raise UnsupportedVersionError(f"no request schema for API {api_key} version {version}",
                                      api_key=api_key, api_version=version) from None
    if type(body) is not cls:
        raise InvalidRequestError(f"a {type(body).__module__}.{type(body).__name__} is not a "
                                  f"{api_key_map.get(api_key, api_key)} v{version} request")
    header_cls = cls.__header_schema__
    header = make(header_cls, request_api_key=api_key, request_api_version=version, correlation_id=correlation_id,
                  client_id=client_id)
    out: list[Any] = [b""]
    entity_writer(header_cls)(out, header)
    entity_writer(cls)(out, body)
    out[0] = _SIZE.pack(sum(map(len, out)))
    return b"".join(out)


def response_correlation_id(frame: bytes | memoryview) -> int:
    """The correlation id a response frame (its bytes after the size) answers: its first four bytes, in every
    response header version. InvalidRequestError when the frame is shorter than that."""
    if len(frame) < _CORRELATION.size:
        raise InvalidRequestError(f"a response frame of {len(frame)} bytes has no correlation id")
    return int(_CORRELATION.unpack_from(frame, 0)[0])


def decode_response(api_key: int, version: int, frame: bytes | memoryview) -> Any:
    """The body of a response frame (its bytes after the size) to a request of ``(api_key, version)``, read past
    the response header its schema names. Checks nothing else (the correlation id is the caller's to match).

    ApiVersions: a broker that does not serve the version asked for answers UNSUPPORTED_VERSION in a v0 body (its
    own version ranges in it), so the client can retry at a version both have; such an answer is read as v0, as
    Kafka's ``ApiVersionsResponse.parse`` does (the error code is the first field of every version's body).

    Raises:
        UnsupportedVersionError: kio has no response schema for ``(api_key, version)``.
        InvalidRequestError: the bytes do not parse as that response (the peer is out of step or hostile).
    """
    try:
        cls = response_class(api_key, version)
    except Exception:
        raise UnsupportedVersionError(f"no response schema for API {api_key} version {version}",
                                      api_key=api_key, api_version=version) from None
    try:
        _, pos = _reader(cls.__header_schema__)(frame, 0)
        if (api_key == API_VERSIONS and version > 0 and len(frame) >= pos + _ERROR_CODE.size
                and _ERROR_CODE.unpack_from(frame, pos)[0] == _UNSUPPORTED_VERSION):
            cls = response_class(API_VERSIONS, 0)
        body, _ = _reader(cls)(frame, pos)
    except Exception as e:
        raise InvalidRequestError(f"malformed {api_key_map.get(api_key, api_key)} v{version} response: "
                                  f"{e}") from None
    return body
