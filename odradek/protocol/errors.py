"""The one table of errors Odradek raises on purpose, shared by the log, the broker, the coordinators and the
clients.

One table, because an error's identity is part of the wire contract of every door at once: the HTTP API, the
Kafka protocol, the inter-broker hop and the Python clients must agree on what each error is, so each error is
declared exactly once, here, and nowhere else (a class declared elsewhere would be unknown to ``error_for`` until
its module happened to be imported). It lives in the protocol package, which imports nothing of the client, the
broker or zk, so every layer can import it (Kafka keeps ``Errors.java`` in ``clients`` for the same reason).

Every error carries five facts, declared once on its class:

* ``name``: Kafka's error name where Kafka has one (``NOT_LEADER_OR_FOLLOWER``), so Kafka users recognise it;
  names are unique (declaring one twice is a ``TypeError`` at import);
* ``kafka_code``: Kafka's numeric protocol code (``-1`` when Kafka has none);
* ``error_code`` and ``http_status``: what the HTTP boundary answers, in Confluent REST Proxy's
  ``{"error_code": 40401, "message": ...}`` envelope, so REST-proxy clients keep working;
* ``retriable``: whether a client may retry the same request unchanged.

Invariants: codes are stable, never reused or renumbered. Where two errors share an HTTP envelope code (as
Confluent's do) the one declared first here is what a bare code maps back to, so their order is part of the
contract too. Each front door maps an error exactly once: broker/api/errors.py to an HTTP response,
broker/kafka/errors.py to a Kafka error code, ``broker.interbroker.decode_error`` and the clients back to a class
with ``error_for``. Handlers and services raise these classes and leave the answer to their door.
"""

from __future__ import annotations

from typing import Any, ClassVar


class OdradekError(Exception):
    """Root of every error Odradek raises on purpose."""

    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    kafka_code: ClassVar[int] = -1
    error_code: ClassVar[int] = 50001
    http_status: ClassVar[int] = 500
    retriable: ClassVar[bool] = False

    _by_name: ClassVar[dict[str, type[OdradekError]]] = {}
    _by_error_code: ClassVar[dict[int, type[OdradekError]]] = {}

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.name)
        self.message = message or self.name
        self.details = details

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name in OdradekError._by_name:
            raise TypeError(f"error name {cls.name} is declared twice")
        OdradekError._by_name[cls.name] = cls
        # Several errors may share an HTTP envelope code (Confluent does this too); the first declared wins
        # when a client maps a bare code back to a class, and the name disambiguates when present.
        OdradekError._by_error_code.setdefault(cls.error_code, cls)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "error_code": self.error_code,
            "message": self.message,
            "error": self.name,
            "retriable": self.retriable,
        }
        body.update(self.details)
        return body


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


# --------------------------------------------------------------------------------------------------- requests


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


class FetchSessionTopicIdError(OdradekError):
    """An incremental fetch names its topics otherwise than its session does (by name where the session keys
    them by id, from Fetch v13, or the reverse): the client starts a new session with a full fetch."""

    name = "FETCH_SESSION_TOPIC_ID_ERROR"
    kafka_code = 106
    error_code = 40032
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


# --------------------------------------------------------------------------------------------- request limits


class PolicyViolationError(OdradekError):
    """A request over one of the broker's limits (records per request, partitions, config sizes): Kafka's
    POLICY_VIOLATION. The message names the limit and its broker config."""

    name = "POLICY_VIOLATION"
    kafka_code = 44
    error_code = 40010
    http_status = 400


class RequestReadTimeoutError(OdradekError):
    """The request's body did not arrive within the broker's read timeout (HTTP 408)."""

    name = "REQUEST_READ_TIMEOUT"
    error_code = 40801
    http_status = 408
    retriable = True


class BrokerBusyError(OdradekError):
    """Too many request bytes are being read at once (queued.max.request.bytes): retry shortly."""

    name = "BROKER_BUSY"
    error_code = 50301
    http_status = 503
    retriable = True


# ------------------------------------------------------------------------------------------- topics, metadata


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


class BrokerNotFoundError(OdradekError):
    """A v3 broker resource names a broker id that is not registered (Confluent's NotFoundException)."""

    name = "BROKER_NOT_FOUND"
    error_code = 404
    http_status = 404


class BrokerNotAvailableError(OdradekError):
    name = "BROKER_NOT_AVAILABLE"
    kafka_code = 8
    error_code = 50302
    http_status = 503
    retriable = True


# ------------------------------------------------------------------------------------- cluster administration
# Errors that Kafka's admin APIs name (topics, configs, ACLs, quotas).


class InvalidReplicaAssignmentError(OdradekError):
    """A replica assignment Kafka refuses: partitions not 0..N-1, a broker twice in a partition, an unknown
    broker, partitions of different sizes, or (adding partitions) as many assignments as new partitions."""

    name = "INVALID_REPLICA_ASSIGNMENT"
    kafka_code = 39
    error_code = 40013
    http_status = 400


class SecurityDisabledError(OdradekError):
    """An ACL request to a broker that runs no authorizer: its ACLs would not be enforced (Kafka's answer too)."""

    name = "SECURITY_DISABLED"
    kafka_code = 54
    error_code = 40014
    http_status = 400


class UnknownTopicIdError(OdradekError):
    """A request naming a topic by an id no topic has."""

    name = "UNKNOWN_TOPIC_ID"
    kafka_code = 100
    error_code = 40408
    http_status = 404


class ReassignmentInProgressError(OdradekError):
    """A topic whose partitions are being reassigned cannot grow meanwhile (Kafka's race guard: the controller
    would otherwise apply the move to a stale assignment)."""

    name = "REASSIGNMENT_IN_PROGRESS"
    kafka_code = 60
    error_code = 40925
    http_status = 409
    retriable = True


class MismatchedEndpointTypeError(OdradekError):
    """DescribeCluster asking a broker for the controllers' endpoints (KIP-919): ZooKeeper-era brokers have no
    controller listeners to name."""

    name = "MISMATCHED_ENDPOINT_TYPE"
    kafka_code = 114
    error_code = 40015
    http_status = 400


# ---------------------------------------------------------------------------------------------------- records


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


class OffsetNotAvailableError(OdradekError):
    """A new leader asked for its latest offset before its high watermark reached the start of its epoch: the
    watermark it carried over from its follower days may be below what the previous leader acknowledged, so the
    answer waits until the followers have fetched from it (Kafka's OFFSET_NOT_AVAILABLE, code 78, ListOffsets v5+;
    Confluent's REST Proxy answers retriable Kafka errors 50003)."""

    name = "OFFSET_NOT_AVAILABLE"
    kafka_code = 78
    error_code = 50003
    http_status = 503
    retriable = True


class UnsupportedCompressionTypeError(OdradekError):
    """A batch uses a compression codec this installation cannot read or write (snappy without a library)."""

    name = "UNSUPPORTED_COMPRESSION_TYPE"
    kafka_code = 76
    error_code = 41502
    http_status = 415


class UnsupportedForMessageFormatError(OdradekError):
    """A client batch the broker does not take yet (control or transactional batches): Kafka's
    UNSUPPORTED_FOR_MESSAGE_FORMAT, code 43."""

    name = "UNSUPPORTED_FOR_MESSAGE_FORMAT"
    kafka_code = 43
    error_code = 42210
    http_status = 422


class InvalidTimestampError(OdradekError):
    """A record timestamp outside message.timestamp.difference.max.ms of the broker's clock (Kafka code 32)."""

    name = "INVALID_TIMESTAMP"
    kafka_code = 32
    error_code = 42211
    http_status = 422


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


class UnknownLeaderEpochError(OdradekError):
    """A fetch names a leader epoch newer than the leader knows: the leader's metadata may be stale, or the
    request is wrong. Kafka answers it without giving up leadership (code 75); the leader re-reads its state."""

    name = "UNKNOWN_LEADER_EPOCH"
    kafka_code = 75
    error_code = 40920
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


# ----------------------------------------------------------------------------------------------- coordination


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


# -------------------------------------------------------------------------------------------- consumer groups


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


# ----------------------------------------------------------------------------- Kafka's classic group protocol
# What the server-side groups of docs/consumer-groups.md never meet: protocol negotiation, the member id
# round trip of KIP-394, static membership (KIP-345) and offset metadata bounds.


class OffsetMetadataTooLargeError(OdradekError):
    """A committed offset's metadata is longer than offset.metadata.max.bytes (4096): nothing is written for it."""

    name = "OFFSET_METADATA_TOO_LARGE"
    kafka_code = 12
    error_code = 40016
    http_status = 400


class InconsistentGroupProtocolError(OdradekError):
    """The member's protocol type, or every protocol it offers, is foreign to the group's current members; also a
    client of one kind of group (server-side assignment over HTTP, or Kafka's classic protocol) joining a group
    whose members are of the other kind."""

    name = "INCONSISTENT_GROUP_PROTOCOL"
    kafka_code = 23
    error_code = 40909
    http_status = 409


class MemberIdRequiredError(OdradekError):
    """KIP-394: a new dynamic member (JoinGroup v4+) is handed its member id and must join again with it, so a
    client that retries a timed-out join never leaves a ghost member behind."""

    name = "MEMBER_ID_REQUIRED"
    kafka_code = 79
    error_code = 40910
    http_status = 409


class FencedInstanceIdError(OdradekError):
    """KIP-345: another member now holds this group.instance.id (a newer instance of the same static member)."""

    name = "FENCED_INSTANCE_ID"
    kafka_code = 82
    error_code = 40911
    http_status = 409


class CommitFailedError(OdradekError):
    """A client-side verdict (Kafka's CommitFailedException): the group refused a commit because this member is
    no longer in the generation that owns the partitions. Declared after GroupSubscribedToTopicError, which keeps
    code 40908 in the by-code table."""

    name = "COMMIT_FAILED"
    error_code = 40908
    http_status = 409


# ------------------------------------------------------------------------------ REST Proxy consumer instances
# Confluent REST Proxy v2's codes (broker/rest_consumers.py). Two share a code with an error above, which
# stays what the bare code maps back to: 40403 with UNKNOWN_MEMBER_ID, 40903 with NOT_LEADER_OR_FOLLOWER.


class ConsumerInstanceNotFoundError(OdradekError):
    name = "CONSUMER_INSTANCE_NOT_FOUND"
    error_code = 40403
    http_status = 404


class ConsumerAlreadyExistsError(OdradekError):
    name = "CONSUMER_ALREADY_EXISTS"
    error_code = 40902
    http_status = 409


class IllegalStateError(OdradekError):
    """Confluent's 40903: e.g. subscribing an instance that has a manual assignment, or the reverse."""

    name = "ILLEGAL_STATE"
    error_code = 40903
    http_status = 409


class ConsumerFormatMismatchError(OdradekError):
    name = "CONSUMER_FORMAT_MISMATCH"
    error_code = 40601
    http_status = 406


# --------------------------------------------------------------------------------------- idempotence (KIP-98)


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


# -------------------------------------------------------------------------------------- transactions (KIP-98)


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


class TransactionCoordinatorFencedError(OdradekError):
    """A transaction marker older than the last one this partition wrote for the producer: it comes from a
    coordinator deposed since, or it ends a transaction that ended here before. Not written."""

    name = "TRANSACTION_COORDINATOR_FENCED"
    kafka_code = 52
    error_code = 40926
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


class TransactionalIdNotFoundError(OdradekError):
    """DescribeTransactions of a transactional id no producer ever initialized."""

    name = "TRANSACTIONAL_ID_NOT_FOUND"
    kafka_code = 105
    error_code = 40450
    http_status = 404


class OperationNotAttemptedError(OdradekError):
    """A part of a request left undone because another part of it failed (AddPartitionsToTxn and TxnOffsetCommit
    are all or nothing: the partitions that were fine carry this code beside the ones that were refused)."""

    name = "OPERATION_NOT_ATTEMPTED"
    kafka_code = 55
    error_code = 40050
    http_status = 400


# --------------------------------------------------------------------------------------------------- security
# docs/security.md: 401 when a request carries no valid identity, 403 when the identity may not do what
# it asked (Kafka's SASL_AUTHENTICATION_FAILED and *_AUTHORIZATION_FAILED codes).


class AuthenticationFailedError(OdradekError):
    """No identity, a wrong password, an expired or forged token, or credentials over plaintext."""

    name = "SASL_AUTHENTICATION_FAILED"
    kafka_code = 58
    error_code = 40101
    http_status = 401


class IllegalSaslStateError(OdradekError):
    """A Kafka SASL request out of turn: SaslHandshake or SaslAuthenticate after authentication, or on a listener
    that authenticates no one (SASL exchanges happen only on the Kafka listeners)."""

    name = "ILLEGAL_SASL_STATE"
    kafka_code = 34
    error_code = 40102
    http_status = 401


class UnsupportedSaslMechanismError(OdradekError):
    """A Kafka SaslHandshake naming a mechanism the listener does not enable."""

    name = "UNSUPPORTED_SASL_MECHANISM"
    kafka_code = 33
    error_code = 40103
    http_status = 401


class TopicAuthorizationFailedError(OdradekError):
    name = "TOPIC_AUTHORIZATION_FAILED"
    kafka_code = 29
    error_code = 40301
    http_status = 403


class GroupAuthorizationFailedError(OdradekError):
    name = "GROUP_AUTHORIZATION_FAILED"
    kafka_code = 30
    error_code = 40302
    http_status = 403


class ClusterAuthorizationFailedError(OdradekError):
    name = "CLUSTER_AUTHORIZATION_FAILED"
    kafka_code = 31
    error_code = 40303
    http_status = 403


class TransactionalIdAuthorizationFailedError(OdradekError):
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    kafka_code = 53
    error_code = 40304
    http_status = 403


# ------------------------------------------------------------------------------------- Schema Registry (issue 26)
# Confluent Schema Registry's codes, as its rest/exceptions/Errors.java declares them: the registry served on
# every broker (broker/schema_registry/) answers them in its {"error_code", "message"} envelope.


class SubjectNotFoundError(OdradekError):
    name = "SUBJECT_NOT_FOUND"
    error_code = 40401
    http_status = 404


class SchemaVersionNotFoundError(OdradekError):
    name = "VERSION_NOT_FOUND"
    error_code = 40402
    http_status = 404


class SchemaNotFoundError(OdradekError):
    name = "SCHEMA_NOT_FOUND"
    error_code = 40403
    http_status = 404


class SubjectSoftDeletedError(OdradekError):
    """A soft delete of a subject already soft-deleted (``permanent=true`` deletes it for good)."""

    name = "SUBJECT_SOFT_DELETED"
    error_code = 40404
    http_status = 404


class SubjectNotSoftDeletedError(OdradekError):
    """A permanent delete of a subject not soft-deleted first (Confluent's rule: hard only after soft)."""

    name = "SUBJECT_NOT_SOFT_DELETED"
    error_code = 40405
    http_status = 404


class SchemaVersionSoftDeletedError(OdradekError):
    name = "SCHEMAVERSION_SOFT_DELETED"
    error_code = 40406
    http_status = 404


class SchemaVersionNotSoftDeletedError(OdradekError):
    name = "SCHEMAVERSION_NOT_SOFT_DELETED"
    error_code = 40407
    http_status = 404


class SubjectCompatibilityNotConfiguredError(OdradekError):
    name = "SUBJECT_LEVEL_COMPATIBILITY_NOT_CONFIGURED"
    error_code = 40408
    http_status = 404


class SubjectModeNotConfiguredError(OdradekError):
    name = "SUBJECT_LEVEL_MODE_NOT_CONFIGURED"
    error_code = 40409
    http_status = 404


class IncompatibleSchemaError(OdradekError):
    """The schema breaks the subject's compatibility level against an earlier version (Confluent: HTTP 409,
    error_code 40901 (INCOMPATIBLE_SCHEMA_ERROR_CODE; releases before 7.x answered 409), the reasons in the
    message)."""

    name = "INCOMPATIBLE_SCHEMA"
    error_code = 40901
    http_status = 409


class InvalidSchemaError(OdradekError):
    name = "INVALID_SCHEMA"
    error_code = 42201
    http_status = 422


class InvalidSchemaVersionError(OdradekError):
    name = "INVALID_SCHEMA_VERSION"
    error_code = 42202
    http_status = 422


class InvalidCompatibilityLevelError(OdradekError):
    name = "INVALID_COMPATIBILITY_LEVEL"
    error_code = 42203
    http_status = 422


class InvalidModeError(OdradekError):
    name = "INVALID_MODE"
    error_code = 42204
    http_status = 422


class SchemaOperationNotPermittedError(OdradekError):
    """Refused by the registry's mode (a write in READONLY, an id given outside IMPORT, ...)."""

    name = "OPERATION_NOT_PERMITTED"
    error_code = 42205
    http_status = 422


class SchemaReferenceExistsError(OdradekError):
    """A delete of a schema version that other schemas still reference."""

    name = "REFERENCE_EXISTS"
    error_code = 42206
    http_status = 422


class SchemaRegistryStoreError(OdradekError):
    """The registry's store (the ``_schemas`` topic) or its primary could not be reached in time; retriable."""

    name = "SCHEMA_REGISTRY_STORE_ERROR"
    error_code = 50001
    http_status = 500
    retriable = True


# ----------------------------------------------------------------- REST Proxy embedded schema formats (issue 26)
# kafka-rest's own codes for avro/jsonschema produce and reads (its Errors.java): distinct from the registry's
# codes above although some numbers coincide (42201 is the registry's invalid schema but the proxy's missing
# key schema), so each has its own name; declared after the registry's, which keep the bare codes.


class KeySchemaMissingError(OdradekError):
    """An embedded-format produce with a non-null key but neither ``key_schema`` nor ``key_schema_id``."""

    name = "KEY_SCHEMA_MISSING"
    error_code = 42201
    http_status = 422


class ValueSchemaMissingError(OdradekError):
    """An embedded-format produce with a non-null value but neither ``value_schema`` nor ``value_schema_id``."""

    name = "VALUE_SCHEMA_MISSING"
    error_code = 42202
    http_status = 422


class JsonConversionError(OdradekError):
    """A record's JSON key or value that does not fit its schema (kafka-rest: "Conversion of JSON to Avro
    failed: ...", also used there for JSON Schema)."""

    name = "JSON_CONVERSION_FAILED"
    error_code = 42203
    http_status = 422


class EmbeddedSchemaInvalidError(OdradekError):
    """A ``key_schema``/``value_schema`` that does not parse, or a schema id of another format
    (kafka-rest: "Invalid schema: ...")."""

    name = "INVALID_EMBEDDED_SCHEMA"
    error_code = 42205
    http_status = 422


class RecordDeserializationError(OdradekError):
    """A read in a schema format met a key or value that is not Confluent-framed (magic byte 0, a 4-byte id) or
    does not decode with its schema: the consumer's deserializer fails as Confluent's does ("Unknown magic
    byte!"), answered as kafka-rest answers a Kafka error."""

    name = "RECORD_DESERIALIZATION_FAILED"
    error_code = 50002
    http_status = 500
