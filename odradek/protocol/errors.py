"""The one error hierarchy shared by the log, the broker, the HTTP API and the clients.

Why here: the error table is part of the wire contract, so it lives in the lowest package (the client), and
``broker`` imports it, never the other way round (Kafka keeps ``Errors.java`` in ``clients`` for the same
reason). Every error carries four stable facts, declared once on its class:

* ``name``: Kafka's error name where Kafka has one (``NOT_LEADER_OR_FOLLOWER``), so Kafka users recognise it;
* ``kafka_code``: Kafka's numeric protocol code (``-1`` when Kafka has none);
* ``error_code`` and ``http_status``: what the HTTP boundary answers, in Confluent REST Proxy's
  ``{"error_code": 40401, "message": ...}`` envelope, so REST-proxy clients keep working;
* ``retriable``: whether a client may retry the same request unchanged.

Codes are never reused or renumbered. The HTTP layer maps an error to a response in exactly one place
(``error_for_code`` goes the other way, for clients).
"""

from __future__ import annotations

from typing import Any

from odradek.protocol.error_base import OdradekError


def error_for(name: str | None, error_code: int | None, message: str = "", **details: Any) -> OdradekError:
    """Rebuild a typed error from an HTTP error body (the client side of the boundary)."""
    cls: type[OdradekError] | None = None
    if name:
        cls = OdradekError._by_name.get(name)
    if cls is None and error_code is not None:
        cls = OdradekError._by_error_code.get(error_code)
    return (cls or UnknownServerError)(message, **details)


class UnknownServerError(OdradekError):
    name = "UNKNOWN_SERVER_ERROR"
    kafka_code = -1
    error_code = 50001
    http_status = 500


# ----------------------------------------------------------------------------------------------- requests


class InvalidRequestError(OdradekError):
    """The request is malformed: bad JSON, a missing field, a value of the wrong type."""

    name = "INVALID_REQUEST"
    kafka_code = 42
    error_code = 40001
    http_status = 400


class UnsupportedVersionError(OdradekError):
    """A Kafka request at an API version this broker does not serve (the HTTP API has no versions to refuse)."""

    name = "UNSUPPORTED_VERSION"
    kafka_code = 35
    error_code = 40011
    http_status = 400


class InvalidRequiredAcksError(OdradekError):
    """A Kafka produce request whose ``acks`` is not 0, 1 or -1 (HTTP's ``acks`` is refused as INVALID_REQUEST)."""

    name = "INVALID_REQUIRED_ACKS"
    kafka_code = 21
    error_code = 40012
    http_status = 400


class FetchSessionIdNotFoundError(OdradekError):
    """An incremental fetch names a fetch session this broker does not hold (never created, evicted, or closed):
    the client starts a new one with a full fetch (KIP-227)."""

    name = "FETCH_SESSION_ID_NOT_FOUND"
    kafka_code = 70
    error_code = 40030
    http_status = 400
    retriable = True


class InvalidFetchSessionEpochError(OdradekError):
    """An incremental fetch whose session epoch is not the one the session expects next (a duplicate or lost
    request): the client starts a new session with a full fetch (KIP-227)."""

    name = "INVALID_FETCH_SESSION_EPOCH"
    kafka_code = 71
    error_code = 40031
    http_status = 400
    retriable = True


class UnsupportedMediaTypeError(OdradekError):
    name = "UNSUPPORTED_MEDIA_TYPE"
    error_code = 41501
    http_status = 415


class NotAcceptableError(OdradekError):
    """No media type in the Accept header is one the endpoint can answer with (Jersey's generic 406, whose
    REST-proxy envelope code is the status itself; 40601 is Confluent's consumer-format mismatch)."""

    name = "NOT_ACCEPTABLE"
    error_code = 406
    http_status = 406


class MalformedJsonError(OdradekError):
    """The body is not JSON at all (Confluent: rest-utils' JsonParseExceptionMapper, 400 with code 400)."""

    name = "MALFORMED_JSON"
    error_code = 400
    http_status = 400


class ConstraintViolationError(OdradekError):
    """JSON that parses but is not a valid request: a missing or empty field, an unknown field, a wrong type
    (Confluent: rest-utils' ConstraintViolationExceptionMapper, 422 with code 422)."""

    name = "CONSTRAINT_VIOLATION"
    error_code = 422
    http_status = 422


class InvalidPayloadError(OdradekError):
    """A payload the broker cannot serialize, e.g. a schema-registry format (Confluent's Errors.invalidPayload,
    42206, which is what its REST Proxy answers for avro/jsonschema/protobuf without a Schema Registry)."""

    name = "INVALID_PAYLOAD"
    error_code = 42206
    http_status = 422


class RouteNotFoundError(OdradekError):
    """No route has this path, or a path parameter does not convert (Jersey's 404, code 404)."""

    name = "NOT_FOUND"
    error_code = 404
    http_status = 404


class MethodNotAllowedError(OdradekError):
    name = "METHOD_NOT_ALLOWED"
    error_code = 405
    http_status = 405


class RequestTooLargeError(OdradekError):
    name = "REQUEST_TOO_LARGE"
    kafka_code = 10
    error_code = 41301
    http_status = 413


class InvalidConfigError(OdradekError):
    name = "INVALID_CONFIG"
    kafka_code = 40
    error_code = 40002
    http_status = 400


# ------------------------------------------------------------------------------------------ topics, metadata


class InvalidTopicError(OdradekError):
    name = "INVALID_TOPIC_EXCEPTION"
    kafka_code = 17
    error_code = 40003
    http_status = 400


class TopicAlreadyExistsError(OdradekError):
    """Confluent's REST Proxy maps Kafka's TopicExistsException to 400 with code 40002 (rest-utils'
    KafkaExceptionMapper; the v3 openapi.yaml's create_topic_already_exists example)."""

    name = "TOPIC_ALREADY_EXISTS"
    kafka_code = 36
    error_code = 40002
    http_status = 400


class InvalidPartitionsError(OdradekError):
    name = "INVALID_PARTITIONS"
    kafka_code = 37
    error_code = 40004
    http_status = 400


class InvalidReplicationFactorError(OdradekError):
    name = "INVALID_REPLICATION_FACTOR"
    kafka_code = 38
    error_code = 40005
    http_status = 400


class UnknownTopicError(OdradekError):
    name = "UNKNOWN_TOPIC"
    kafka_code = 3
    error_code = 40401
    http_status = 404


class UnknownPartitionError(OdradekError):
    name = "UNKNOWN_TOPIC_OR_PARTITION"
    kafka_code = 3
    error_code = 40402
    http_status = 404
    retriable = True


class LeaderNotAvailableError(OdradekError):
    name = "LEADER_NOT_AVAILABLE"
    kafka_code = 5
    error_code = 40404
    http_status = 404
    retriable = True


class ClusterNotFoundError(OdradekError):
    name = "CLUSTER_NOT_FOUND"
    error_code = 40406
    http_status = 404


class BrokerNotAvailableError(OdradekError):
    name = "BROKER_NOT_AVAILABLE"
    kafka_code = 8
    error_code = 50302
    http_status = 503
    retriable = True


# ------------------------------------------------------------------------------------------------- records


class CorruptRecordError(OdradekError):
    """A batch failed its CRC or its framing (length, magic) check."""

    name = "CORRUPT_MESSAGE"
    kafka_code = 2
    error_code = 42201
    http_status = 422


class InvalidRecordError(OdradekError):
    """A batch is well framed but not acceptable (an absurd record count, a bad offset delta, ...)."""

    name = "INVALID_RECORD"
    kafka_code = 87
    error_code = 42202
    http_status = 422


class RecordTooLargeError(OdradekError):
    name = "MESSAGE_TOO_LARGE"
    kafka_code = 10
    error_code = 41302
    http_status = 413


class OffsetOutOfRangeError(OdradekError):
    name = "OFFSET_OUT_OF_RANGE"
    kafka_code = 1
    error_code = 41601
    http_status = 416


class KafkaStorageError(OdradekError):
    name = "KAFKA_STORAGE_ERROR"
    kafka_code = 56
    error_code = 50003
    http_status = 503
    retriable = True


# ------------------------------------------------------------------------------------ leadership, replication


class NotLeaderOrFollowerError(OdradekError):
    name = "NOT_LEADER_OR_FOLLOWER"
    kafka_code = 6
    error_code = 40903
    http_status = 409
    retriable = True


class FencedLeaderEpochError(OdradekError):
    name = "FENCED_LEADER_EPOCH"
    kafka_code = 74
    error_code = 40904
    http_status = 409
    retriable = True


class NotEnoughReplicasError(OdradekError):
    name = "NOT_ENOUGH_REPLICAS"
    kafka_code = 19
    error_code = 50304
    http_status = 503
    retriable = True


class NotEnoughReplicasAfterAppendError(OdradekError):
    name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    kafka_code = 20
    error_code = 50305
    http_status = 503
    retriable = True


class RequestTimedOutError(OdradekError):
    name = "REQUEST_TIMED_OUT"
    kafka_code = 7
    error_code = 50801
    http_status = 504
    retriable = True


# ------------------------------------------------------------------------------------------- coordination


class NotControllerError(OdradekError):
    """A controller-only write was attempted by a broker that is not (or no longer) the controller."""

    name = "NOT_CONTROLLER"
    kafka_code = 41
    error_code = 50306
    http_status = 503
    retriable = True


class ControllerMovedError(NotControllerError):
    """A fenced controller write failed its /controller_epoch version check: a newer controller exists."""

    name = "CONTROLLER_MOVED"
    kafka_code = 41
    error_code = 50307


class StaleBrokerEpochError(OdradekError):
    name = "STALE_BROKER_EPOCH"
    kafka_code = 77
    error_code = 50901
    http_status = 409


class BrokerIdInUseError(OdradekError):
    """Another live ZooKeeper session already holds /brokers/ids/<id>."""

    name = "BROKER_ID_IN_USE"
    error_code = 50902
    http_status = 409


class CoordinationUnavailableError(OdradekError):
    """ZooKeeper cannot be reached (no quorum, connection lost)."""

    name = "COORDINATION_UNAVAILABLE"
    error_code = 50308
    http_status = 503
    retriable = True


# ------------------------------------------------------------------------------------------ added by the log


class UnsupportedCompressionTypeError(OdradekError):
    """A batch uses a compression codec this installation cannot read or write (snappy without a library)."""

    name = "UNSUPPORTED_COMPRESSION_TYPE"
    kafka_code = 76
    error_code = 41502
    http_status = 415


# --------------------------------------------------------------------------------------- consumer groups


class CoordinatorNotAvailableError(OdradekError):
    """No broker coordinates the group right now (the last one died; its session has not expired yet)."""

    name = "COORDINATOR_NOT_AVAILABLE"
    kafka_code = 15
    error_code = 50309
    http_status = 503
    retriable = True


class NotCoordinatorError(OdradekError):
    """A forwarded group request reached a broker that no longer coordinates the group: ask again."""

    name = "NOT_COORDINATOR"
    kafka_code = 16
    error_code = 50310
    http_status = 503
    retriable = True


class IllegalGenerationError(OdradekError):
    """A heartbeat or commit from a generation the group has left behind: rejoin."""

    name = "ILLEGAL_GENERATION"
    kafka_code = 22
    error_code = 40905
    http_status = 409


class InvalidGroupIdError(OdradekError):
    name = "INVALID_GROUP_ID"
    kafka_code = 24
    error_code = 40006
    http_status = 400


class UnknownMemberIdError(OdradekError):
    """The coordinator does not know the member (it timed out, left, or the coordinator moved): join again."""

    name = "UNKNOWN_MEMBER_ID"
    kafka_code = 25
    error_code = 40403
    http_status = 404


class InvalidSessionTimeoutError(OdradekError):
    name = "INVALID_SESSION_TIMEOUT"
    kafka_code = 26
    error_code = 40007
    http_status = 400


class RebalanceInProgressError(OdradekError):
    """The group is rebalancing: the member must join again (it keeps its partitions until told to revoke)."""

    name = "REBALANCE_IN_PROGRESS"
    kafka_code = 27
    error_code = 40906
    http_status = 409
    retriable = True


class NonEmptyGroupError(OdradekError):
    name = "NON_EMPTY_GROUP"
    kafka_code = 68
    error_code = 40907
    http_status = 409


class GroupIdNotFoundError(OdradekError):
    name = "GROUP_ID_NOT_FOUND"
    kafka_code = 69
    error_code = 40407
    http_status = 404


class GroupSubscribedToTopicError(OdradekError):
    """Kafka's OffsetDelete refusal (KIP-496): a live member subscribes to the topic, so its offsets stay."""

    name = "GROUP_SUBSCRIBED_TO_TOPIC"
    kafka_code = 86
    error_code = 40908
    http_status = 409


# ------------------------------------------------------------------------------ idempotence (KIP-98)


class OutOfOrderSequenceNumberError(OdradekError):
    """A producer batch whose first sequence is not the one after the last the leader holds for its producer
    id and epoch (a gap: an earlier batch is missing), or a new epoch not starting at 0. Not retriable as is:
    retrying the same batch can only fail again until the missing one is written."""

    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    kafka_code = 45
    error_code = 42212
    http_status = 422


class DuplicateSequenceNumberError(OdradekError):
    """A batch that repeats sequences the leader wrote, but not as one of the batches it still remembers
    (Kafka's code 46; a remembered duplicate gets its original offsets instead)."""

    name = "DUPLICATE_SEQUENCE_NUMBER"
    kafka_code = 46
    error_code = 42213
    http_status = 422


class InvalidProducerEpochError(OdradekError):
    """A batch from an older epoch of a producer id than the leader has seen: the sender is a fenced zombie."""

    name = "INVALID_PRODUCER_EPOCH"
    kafka_code = 47
    error_code = 40921
    http_status = 409


class UnknownProducerIdError(OdradekError):
    """A batch with a non-zero sequence from a producer id the leader holds no state for (it expired, or the
    log that carried it is gone): the producer must take a new id to go on."""

    name = "UNKNOWN_PRODUCER_ID"
    kafka_code = 59
    error_code = 42214
    http_status = 422


# ------------------------------------------------------------------------------ transactions (KIP-98)


class ProducerFencedError(OdradekError):
    """A transactional producer whose epoch is older than its transactional id's: another instance called
    init_transactions since (or the coordinator aborted its transaction on timeout). It must stop."""

    name = "PRODUCER_FENCED"
    kafka_code = 90
    error_code = 40922
    http_status = 409


class InvalidTxnStateError(OdradekError):
    """A transactional request that does not fit the transaction's state (commit after abort, a transactional
    batch from a producer outside a transaction...)."""

    name = "INVALID_TXN_STATE"
    kafka_code = 48
    error_code = 40923
    http_status = 409


class InvalidProducerIdMappingError(OdradekError):
    """The producer id given is not the one the transactional id holds."""

    name = "INVALID_PRODUCER_ID_MAPPING"
    kafka_code = 49
    error_code = 40924
    http_status = 409


class InvalidTransactionTimeoutError(OdradekError):
    """transaction.timeout.ms out of range (above transaction.max.timeout.ms)."""

    name = "INVALID_TRANSACTION_TIMEOUT"
    kafka_code = 50
    error_code = 42215
    http_status = 422


class ConcurrentTransactionsError(OdradekError):
    """The previous transaction of this transactional id is still being completed: retry shortly."""

    name = "CONCURRENT_TRANSACTIONS"
    kafka_code = 51
    error_code = 50311
    http_status = 503
    retriable = True


# Kept apart by concept (this module's line limit): request-limit and replica-fetch errors live there and register
# here on import, so ``from odradek.protocol.errors import PolicyViolationError`` and error_for both work.
from odradek.protocol.admin_errors import (  # noqa: E402, F401  (Kafka's admin APIs)
    InvalidReplicaAssignmentError,
    MismatchedEndpointTypeError,
    ReassignmentInProgressError,
    SecurityDisabledError,
    UnknownTopicIdError,
)
from odradek.protocol.group_errors import (  # noqa: E402, F401  (Kafka's classic group protocol)
    FencedInstanceIdError,
    InconsistentGroupProtocolError,
    MemberIdRequiredError,
    OffsetMetadataTooLargeError,
)
from odradek.protocol.limit_errors import (  # noqa: E402, F401
    BrokerBusyError,
    InvalidTimestampError,
    PolicyViolationError,
    RequestReadTimeoutError,
    UnknownLeaderEpochError,
    UnsupportedForMessageFormatError,
)
from odradek.protocol.security_errors import (  # noqa: E402, F401  (401/403: docs/security.md)
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)
from odradek.protocol.txn_errors import (  # noqa: E402, F401  (Kafka's transaction APIs)
    OperationNotAttemptedError,
    TransactionalIdNotFoundError,
)
