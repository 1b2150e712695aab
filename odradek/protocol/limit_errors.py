"""Errors of the broker's request limits and of replica-fetch checks, kept apart from errors.py by concept.

errors.py imports this module at its end, so every class here is registered (``error_for`` finds it by name)
and importable from ``odradek.protocol.errors`` too.
"""

from __future__ import annotations

from odradek.protocol.error_base import OdradekError


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


class UnknownLeaderEpochError(OdradekError):
    """A fetch names a leader epoch newer than the leader knows: the leader's metadata may be stale, or the
    request is wrong. Kafka answers it without giving up leadership (code 76); the leader re-reads its state."""

    name = "UNKNOWN_LEADER_EPOCH"
    kafka_code = 76
    error_code = 40920
    http_status = 409
    retriable = True
