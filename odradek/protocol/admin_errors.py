"""Errors of cluster administration (topics, configs, ACLs, quotas) that Kafka's admin APIs name, kept apart
from errors.py by concept.

errors.py imports this module at its end, so every class here is registered (``error_for`` finds it by name)
and importable from ``odradek.protocol.errors``. Each carries Kafka's name and code, which the Kafka front door
answers with; the HTTP envelope codes are this module's own.
"""

from __future__ import annotations

from odradek.protocol.error_base import OdradekError


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
