"""The Kafka door's one mapping from Odradek's typed errors to what a Kafka client is answered with.

Every handler answers through these two: ``code`` turns a typed error into its Kafka error code (one Kafka has no
code for is UNKNOWN_SERVER_ERROR, never a code the client would misread), and ``typed``/``coordinator_typed``
turn whatever a service raised into a typed error (an unexpected exception is logged, as a bug, and answered
UNKNOWN_SERVER_ERROR). The HTTP door maps the same errors once too, in broker/api/errors.py.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from odradek.protocol.errors import (
    BrokerNotAvailableError,
    CoordinationUnavailableError,
    CoordinatorNotAvailableError,
    OdradekError,
    UnknownServerError,
)

log = logging.getLogger(__name__)

NONE = ErrorCode(0)


def code(error: OdradekError | None) -> ErrorCode:
    if error is None:
        return NONE
    try:
        return ErrorCode(error.kafka_code)
    except ValueError:
        return ErrorCode(UnknownServerError.kafka_code)


def typed(e: BaseException, what: str) -> OdradekError:
    """``e`` as the typed error the answer carries."""
    if isinstance(e, OdradekError):
        return e
    log.exception("Kafka %s failed", what, exc_info=e)
    return UnknownServerError(f"{what} failed: {e}")


def coordinator_typed(e: BaseException, what: str) -> OdradekError:
    """For the coordinators' APIs: ZooKeeper out of reach, or the coordinator this broker forwards to out of
    reach (BROKER_NOT_AVAILABLE, which no Kafka coordinator answers and librdkafka takes as abortable in a
    transaction), is COORDINATOR_NOT_AVAILABLE, which Kafka clients retry after looking the coordinator up again;
    otherwise as ``typed``."""
    if isinstance(e, CoordinationUnavailableError | BrokerNotAvailableError):
        return CoordinatorNotAvailableError(f"{what}: {e.message}")
    return typed(e, what)
