"""The Kafka door's one mapping between Odradek's typed errors and Kafka's error codes, both ways.

Every handler answers through these two: ``code`` turns a typed error into its Kafka error code (one Kafka has no
code for is UNKNOWN_SERVER_ERROR, never a code the client would misread), and ``typed``/``coordinator_typed``
turn whatever a service raised into a typed error (an unexpected exception is logged, as a bug, and answered
UNKNOWN_SERVER_ERROR). The other way, for this broker as a Kafka client of another (broker/kafka/channel.py,
broker/kafka/leader_endpoint.py): ``error_for_code`` turns a code in an answer into the typed error first declared
with it. The HTTP door maps the same errors once too, in broker/api/errors.py.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

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


@functools.cache
def _errors_by_code() -> dict[int, type[OdradekError]]:
    """Kafka error code -> the typed error first declared with it (odradek/protocol/errors.py's order)."""
    table: dict[int, type[OdradekError]] = {}
    todo = list(OdradekError.__subclasses__())
    while todo:
        cls = todo.pop(0)
        if cls.kafka_code >= 0:
            table.setdefault(cls.kafka_code, cls)
        todo.extend(cls.__subclasses__())
    return table


def error_for_code(kafka_code: int, message: str | None = None, **details: Any) -> OdradekError | None:
    """The typed error a Kafka error code in an answer stands for (None for 0); an unknown code is
    UNKNOWN_SERVER_ERROR with the code in its details."""
    if kafka_code == NONE:
        return None
    cls = _errors_by_code().get(kafka_code)
    if cls is None:
        return UnknownServerError(message or f"Kafka error code {kafka_code}", kafka_error_code=kafka_code,
                                  **details)
    return cls(message or "", **details)


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
